# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled twin of the record encoder of :mod:`spool.server.txlog.format.codec` (same API, same bytes).

:func:`encode_run` is :func:`spool.server.txlog.format.codec.encode_run_py` with the record header
written field by field into one preallocated ``bytes`` and the CRC-32C computed in place
(``crc32c.h``: the SSE 4.2 instruction, or google_crc32c where the CPU lacks it), so a
record costs one allocation. Its results, including where it stops on a field that does
not fit the format, are the Python function's (tests/unit/txlog/test_codec_twins.py).
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.list cimport PyList_Append
from libc.stdint cimport int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy
from _buffers cimport put16, put32, put64

import google_crc32c


cdef extern from "crc32c.h":
    int spool_crc32c_available()
    uint32_t spool_crc32c(const unsigned char *p, size_t n) nogil

cdef extern from "Python.h":
    unsigned long long PyLong_AsUnsignedLongLong(object o) except? -1
    long long PyLong_AsLongLong(object o) except? -1
    object PyNumber_Index(object o)


cdef bint _HW = spool_crc32c_available()
cdef object _crc_py = google_crc32c.value

cdef enum:
    _HEADER_SIZE = 52
    _MIN_RECORD = 56
    _FORMAT = 0xA1
    _KIND_PUBLISH = 1


cdef inline uint32_t crc_of(const unsigned char *p, Py_ssize_t n) except? 0xFFFFFFFF:
    """CRC-32C of ``p[:n]`` (hardware, or google_crc32c through Python)."""
    if _HW:
        return spool_crc32c(p, n)
    return _crc_py(PyBytes_FromStringAndSize(<const char *>p, n))


def crc32c(data):
    """CRC-32C of ``data`` (bytes), equal to ``google_crc32c.value(data)``."""
    cdef bytes b = data if type(data) is bytes else bytes(data)
    return crc_of(<const unsigned char *>PyBytes_AS_STRING(b), PyBytes_GET_SIZE(b))


def hardware_crc():
    """Whether the CRC runs on the CPU's crc32 instruction."""
    return bool(_HW)


cdef inline bint _u64(object value, uint64_t *out):
    """``value`` as an unsigned 64-bit field, or False where ``struct`` would refuse it."""
    try:
        v = PyNumber_Index(value)
    except TypeError:
        return False
    if v < 0:
        return False
    try:
        out[0] = PyLong_AsUnsignedLongLong(v)
    except OverflowError:
        return False
    return True


cdef inline bint _i64(object value, int64_t *out):
    try:
        v = PyNumber_Index(value)
    except TypeError:
        return False
    try:
        out[0] = PyLong_AsLongLong(v)
    except OverflowError:
        return False
    return True


def encode_run(first_seq, timestamp_us, pub_hash, pub_seqs, topic, message_type, bodies,
               bytes path_bytes=b"", int npath=0):
    """Consecutive publish records of one publisher and topic (compiled; see
    :func:`spool.server.txlog.format.codec.encode_run_py` for the contract). A replicated run's path
    comes encoded (``path_bytes``: each name as a length byte and its UTF-8, ``npath``
    names), as the Python encoder lays it out after the message type."""
    cdef bytes tb = topic.encode()
    cdef bytes mb = message_type.encode()
    cdef Py_ssize_t tl = PyBytes_GET_SIZE(tb)
    cdef Py_ssize_t ml = PyBytes_GET_SIZE(mb)
    cdef Py_ssize_t pl = PyBytes_GET_SIZE(path_bytes)
    cdef list out = []
    cdef uint64_t seq = 0, ph = 0, ps = 0
    cdef int64_t ts = 0
    cdef Py_ssize_t n_seqs = len(pub_seqs)
    cdef Py_ssize_t n_bodies = len(bodies)
    cdef Py_ssize_t n = n_seqs if n_seqs < n_bodies else n_bodies
    cdef Py_ssize_t i, bl, length
    cdef bytes body, rec
    cdef char *p
    cdef uint32_t crc
    cdef bint stopped = False
    if (
        tl > 0xFFFF or ml > 0xFF or not _u64(first_seq, &seq) or not _i64(timestamp_us, &ts)
        or not _u64(pub_hash, &ph)
    ) and n > 0:
        return out  # the first record does not fit: none does
    i = 0
    while not stopped and i < n:
        obj = bodies[i]
        body = obj if type(obj) is bytes else bytes(obj)
        bl = PyBytes_GET_SIZE(body)
        length = _MIN_RECORD + tl + ml + pl + bl
        if length > 0xFFFFFFFF or not _u64(pub_seqs[i], &ps):
            stopped = True
            break
        if i > 0:
            if seq == 0xFFFFFFFFFFFFFFFF:
                stopped = True  # the next seq does not fit u64
                break
            seq += 1
        rec = PyBytes_FromStringAndSize(NULL, length)
        p = PyBytes_AS_STRING(rec)
        put32(p, <uint32_t>length)
        p[4] = <char>_FORMAT
        p[5] = <char>_KIND_PUBLISH
        put16(p + 6, 0)
        put64(p + 8, seq)
        put64(p + 16, <uint64_t>ts)
        put64(p + 24, ph)
        put64(p + 32, ps)
        put16(p + 40, <uint16_t>tl)
        p[42] = <char><uint8_t>ml
        p[43] = <char><uint8_t>npath
        put16(p + 44, 0)
        put16(p + 46, 0)
        put32(p + 48, <uint32_t>bl)
        memcpy(p + _HEADER_SIZE, PyBytes_AS_STRING(tb), tl)
        memcpy(p + _HEADER_SIZE + tl, PyBytes_AS_STRING(mb), ml)
        memcpy(p + _HEADER_SIZE + tl + ml, PyBytes_AS_STRING(path_bytes), pl)
        memcpy(p + _HEADER_SIZE + tl + ml + pl, PyBytes_AS_STRING(body), bl)
        crc = crc_of(<const unsigned char *>p, length - 4)
        put32(p + length - 4, crc)
        PyList_Append(out, rec)
        i += 1
    if not stopped and n_seqs != n_bodies:
        # zip(strict=True)'s error, as the Python implementation raises it
        if n_bodies < n_seqs:
            raise ValueError("zip() argument 2 is shorter than argument 1")
        raise ValueError("zip() argument 2 is longer than argument 1")
    return out
