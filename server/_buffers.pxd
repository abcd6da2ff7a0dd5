# cython: language_level=3
# Fixed-width little-endian integers read from and written to a C buffer, for the
# compiled twins (server/**/*_c.pyx).
#
# Inline functions only: each twin that cimports them gets its own copy at compile time,
# and nothing of this file exists at run time (no module to import). memcpy rather than a
# cast, because the fields of the formats are not aligned; no byte swap, because the
# formats are little-endian like every CPU Spool runs on. setup.py puts server/ on the
# Cython include path, so every twin says ``from _buffers cimport ...``; the sdist and
# the wheel ship this file with the .pyx sources (MANIFEST.in).

from libc.stdint cimport uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy


cdef inline uint16_t get16(const char *p) noexcept:
    cdef uint16_t v
    memcpy(&v, p, 2)
    return v


cdef inline uint32_t get32(const char *p) noexcept:
    cdef uint32_t v
    memcpy(&v, p, 4)
    return v


cdef inline uint64_t get64(const char *p) noexcept:
    cdef uint64_t v
    memcpy(&v, p, 8)
    return v


cdef inline void put16(char *p, uint16_t v) noexcept:
    memcpy(p, &v, 2)


cdef inline void put32(char *p, uint32_t v) noexcept:
    memcpy(p, &v, 4)


cdef inline void put64(char *p, uint64_t v) noexcept:
    memcpy(p, &v, 8)
