# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled twin of the SOW file's two loops (:mod:`spool.server.sow.fileformat`, same API).

:func:`encode_puts` writes the put changes of a batch of records into one preallocated
``bytes`` with the CRC-32C computed in place; :func:`live_changes` walks a file's changes
(the same checks, in the same order, with the same damage reasons) and keeps where the live
puts are. They are the SOW writer's and the compaction's per-change work: under a stream of
updates they were a quarter of the broker's CPU in Python. Results and errors equal the
Python functions' (tests/unit/sow/test_fileformat_twins.py); a field that does not fit the
format is left to the Python encoder, which raises its ``struct.error``.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy
from _buffers cimport get16, get32, get64, put16, put32, put64

import google_crc32c


cdef extern from "../txlog/format/crc32c.h":
    int spool_crc32c_available()
    uint32_t spool_crc32c(const unsigned char *p, size_t n) nogil

cdef extern from "Python.h":
    unsigned long long PyLong_AsUnsignedLongLong(object o) except? -1
    long long PyLong_AsLongLong(object o) except? -1


cdef bint _HW = spool_crc32c_available()
cdef object _crc_py = google_crc32c.value

cdef enum:
    _PUT_FIXED = 52
    _DEL_FIXED = 16
    _COMMON = 16
    _OP_PUT = 1
    _OP_DELETE = 2

cdef uint32_t _RESIDUE = 0x48674BC7


cdef inline uint32_t _crc(const unsigned char *p, Py_ssize_t n) except? 0xFFFFFFFF:
    if _HW:
        return spool_crc32c(p, n)
    return _crc_py(PyBytes_FromStringAndSize(<const char *>p, n))


cdef inline bint _fits_u64(object v) except -1:
    return type(v) is int and 0 <= v <= 0xFFFFFFFFFFFFFFFF


cdef inline bint _fits_i64(object v) except -1:
    return type(v) is int and -0x8000000000000000 <= v <= 0x7FFFFFFFFFFFFFFF


def encode_puts(records, fallback):
    """The put changes of ``records`` (SowRecord tuples), concatenated: the bytes of
    ``b"".join(map(encode_put, records))``. ``fallback`` is that Python function, called
    when a field does not fit the format (it raises the reason)."""
    cdef list keys = []
    cdef Py_ssize_t total = 0, kl, bl, length
    cdef bytes kb, body, out
    cdef char *p
    cdef tuple rec
    for obj in records:
        if not isinstance(obj, tuple) or len(<tuple>obj) < 7:
            return fallback(records)
        rec = <tuple>obj  # a SowRecord: typed as a tuple, its fields are C-level reads
        key, body_obj = rec[0], rec[1]
        if type(key) is not str or type(body_obj) is not bytes:
            return fallback(records)
        kb = (<str>key).encode("utf-8")
        kl = PyBytes_GET_SIZE(kb)
        bl = PyBytes_GET_SIZE(<bytes>body_obj)
        length = _PUT_FIXED + kl + bl + 4
        if (kl > 0xFFFF or length > 0xFFFFFFFF or not _fits_u64(rec[2])
                or not _fits_i64(rec[3]) or not _fits_u64(rec[4]) or not _fits_u64(rec[5])
                or not _fits_i64(rec[6])):
            return fallback(records)
        keys.append(kb)
        total += length
    out = PyBytes_FromStringAndSize(NULL, total)
    p = PyBytes_AS_STRING(out)
    cdef Py_ssize_t i = 0
    for obj in records:
        rec = <tuple>obj
        kb = <bytes>keys[i]
        i += 1
        body = <bytes>rec[1]
        kl = PyBytes_GET_SIZE(kb)
        bl = PyBytes_GET_SIZE(body)
        length = _PUT_FIXED + kl + bl + 4
        put32(p, <uint32_t>length)
        p[4] = <char>_OP_PUT
        p[5] = 0
        put16(p + 6, <uint16_t>kl)
        put64(p + 8, <uint64_t>PyLong_AsUnsignedLongLong(rec[2]))
        put64(p + 16, <uint64_t>PyLong_AsLongLong(rec[3]))
        put64(p + 24, <uint64_t>PyLong_AsUnsignedLongLong(rec[4]))
        put64(p + 32, <uint64_t>PyLong_AsUnsignedLongLong(rec[5]))
        put64(p + 40, <uint64_t>PyLong_AsLongLong(rec[6]))
        put32(p + 48, <uint32_t>bl)
        memcpy(p + _PUT_FIXED, PyBytes_AS_STRING(kb), kl)
        memcpy(p + _PUT_FIXED + kl, PyBytes_AS_STRING(body), bl)
        put32(p + length - 4, _crc(<const unsigned char *>p, length - 4))
        p += length
    return out


def live_changes(bytes buf, Py_ssize_t pos, base_seq):
    """``(live, top, damage)`` of the changes from ``pos``: ``live`` maps each live key to
    ``(offset, length)`` of its last put, ``top`` is the highest sequence (``base_seq`` at
    least), ``damage`` is ``(offset, reason)`` where the readable part ends, or None."""
    cdef dict live = {}
    cdef const char *b = PyBytes_AS_STRING(buf)
    cdef Py_ssize_t end = PyBytes_GET_SIZE(buf)
    cdef uint32_t length, body_len
    cdef uint8_t op
    cdef uint16_t kl
    cdef uint64_t seq, top_c = 0
    cdef Py_ssize_t fixed
    top = base_seq
    while pos < end:
        if end - pos < _COMMON:
            return live, _top(top, top_c), (pos, "torn change")
        length = get32(b + pos)
        op = <uint8_t>b[pos + 4]
        kl = get16(b + pos + 6)
        seq = get64(b + pos + 8)
        if length == 0:
            return live, _top(top, top_c), (pos, "zero length")
        if pos + <Py_ssize_t>length > end:
            return live, _top(top, top_c), (pos, "torn change")
        if op == _OP_PUT:
            fixed = _PUT_FIXED
        elif op == _OP_DELETE:
            fixed = _DEL_FIXED
        else:
            return live, _top(top, top_c), (pos, "bad op")
        if <Py_ssize_t>length < fixed + kl + 4:
            return live, _top(top, top_c), (pos, "bad length")
        if _crc(<const unsigned char *>(b + pos), length) != _RESIDUE:
            return live, _top(top, top_c), (pos, "crc mismatch")
        try:
            key = PyUnicode_DecodeUTF8(b + pos + fixed, kl, NULL)
        except UnicodeDecodeError:
            return live, _top(top, top_c), (pos, "bad utf-8")
        body_len = get32(b + pos + fixed - 4) if op == _OP_PUT else 0
        if <Py_ssize_t>length != fixed + kl + body_len + 4:
            return live, _top(top, top_c), (pos, "length mismatch")
        if op == _OP_PUT:
            live[key] = (pos, length)
        else:
            live.pop(key, None)
        if seq > top_c:
            top_c = seq
        pos += length
    return live, _top(top, top_c), None


cdef object _top(object base, uint64_t seen):
    return seen if seen > base else base
