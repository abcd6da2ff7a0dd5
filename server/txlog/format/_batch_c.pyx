# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled twin of the bulk record decoder of :mod:`spool.server.txlog.format.batch` (same results).

:func:`decode_columns` is the loop of :func:`spool.server.txlog.format.batch.decode_batch_py`: it reads
each record's header in place, checks its CRC-32C in place (``crc32c.h``), and fills the
columns a :class:`~spool.server.txlog.format.batch.RecordBatch` keeps, one ``bytes`` per body and one
int per numeric column; ``batch.py`` wraps them in the batch. Records of a rare shape
(a path, correlation id or SOW key) and every damaged record go through the very functions
the Python implementation uses (``special_fields``, ``check_at``), so the fields kept and
the errors raised are the same (tests/unit/txlog/test_codec_twins.py). One exception, for
speed: a record with a path only (what a replicating instance logs of every record that
came from elsewhere) whose message type and path bytes were seen before is read here, its
path taken from a cache keyed by those bytes (they were checked when first seen).
"""

from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_Resize
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.list cimport PyList_Append
from libc.stdint cimport int64_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcmp, memcpy
from _buffers cimport get16, get32, get64

import google_crc32c

from spool.server.txlog.format.codec import HEADER, check_at, decode_text, special_fields
from spool.server.txlog.format.record import RecordKind
from spool.server.txlog.errors import CorruptRecord


cdef extern from "crc32c.h":
    int spool_crc32c_available()
    uint32_t spool_crc32c(const unsigned char *p, size_t n) nogil


cdef bint _HW = spool_crc32c_available()
cdef object _crc_py = google_crc32c.value
cdef object _unpack = HEADER.unpack_from
cdef object _special_fields = special_fields
cdef frozenset _kinds_known = frozenset(k.value for k in RecordKind)
#: message type + path bytes of path-only records -> their path (checked when first seen);
#: bounded: a few sources send the same few paths
cdef dict _paths = {}
cdef Py_ssize_t _PATHS_MAX = 4096
cdef object _check_at = check_at
cdef object _decode_text = decode_text
cdef object _CorruptRecord = CorruptRecord

cdef enum:
    _HEADER_SIZE = 52
    _MIN_RECORD = 56
    _FORMAT = 0xA1

cdef uint32_t _RESIDUE = 0x48674BC7


cdef inline bint _crc_ok(const char *p, Py_ssize_t n) except -1:
    if _HW:
        return spool_crc32c(<const unsigned char *>p, n) == _RESIDUE
    return _crc_py(PyBytes_FromStringAndSize(p, n)) == _RESIDUE


def decode_columns(bytes buf, Py_ssize_t pos, Py_ssize_t end, expect_seq, Py_ssize_t max_count,
                   Py_ssize_t max_bytes, upto_seq, Py_ssize_t t_start, Py_ssize_t t_stop):
    """Decode records from ``pos`` into columns (see ``decode_batch_py`` for the contract).

    Returns:
        ``(topics, bodies, times, hashes, pub_seqs, kinds, special, last_off, pos,
        kind_col)``; ``kind_col`` is each record's kind, one byte a record (a batch of
        several kinds is routed record by record).
    """
    cdef Py_ssize_t start = pos
    cdef const char *b = PyBytes_AS_STRING(buf)
    cdef list topics = [], bodies = [], times = [], hashes = [], pseqs = []
    cdef set kinds = set()
    cdef dict special = {}
    cdef int prev_kind = -1
    cdef Py_ssize_t last_off = -1
    cdef Py_ssize_t length, tl, ml, bl, p, q, rec_end, body_at, prev_tl = -1, prev_p = -1
    cdef int pc, k
    cdef object key, spec
    cdef bytearray kind_col = bytearray()
    cdef char *kc
    cdef uint64_t seq, stop_seq, rseq
    cdef int kind
    cdef object prev_topic = ""
    cdef Py_ssize_t idx = 0
    if end > PyBytes_GET_SIZE(buf) or pos < 0:
        return None  # bounds outside the buffer: the Python implementation's business
    # stop_seq = min(upto_seq, expect_seq + max_count - 1), as Python ints first: both
    # may be outside 64 bits in principle
    py_stop = upto_seq if upto_seq is not None else 1 << 64
    if max_count < py_stop - expect_seq + 1:
        py_stop = expect_seq + max_count - 1
    if expect_seq < 0 or py_stop >= (1 << 64) - 1:
        return None  # sequences at the edge of 64 bits: the Python implementation's
    if py_stop < expect_seq:
        return [], [], [], [], [], kinds, special, last_off, pos, kind_col
    seq = expect_seq
    stop_seq = py_stop
    # at most one record per _MIN_RECORD bytes, and at most max_count of them
    PyByteArray_Resize(kind_col, min(max_count, (end - pos) // _MIN_RECORD + 1, max_bytes))
    kc = PyByteArray_AS_STRING(kind_col)
    while pos < end and seq <= stop_seq and pos - start < max_bytes:
        if end - pos < _HEADER_SIZE:
            break
        length = get32(b + pos)
        if length == 0 or (length >= _MIN_RECORD and pos + length > end):
            break  # end of data, or incomplete: the caller decides
        if (
            length < _MIN_RECORD
            or <unsigned char>b[pos + 4] != _FORMAT
            or ((pos < t_start or pos + length > t_stop) and not _crc_ok(b + pos, length))
        ):
            _check_at(buf, pos, end)  # raises with the precise reason
        rseq = get64(b + pos + 8)
        if rseq != seq:
            raise _CorruptRecord(pos, "sequence gap")
        kind = <unsigned char>b[pos + 5]
        tl = get16(b + pos + 40)
        ml = <unsigned char>b[pos + 42]
        bl = get32(b + pos + 48)
        pc = <unsigned char>b[pos + 43]
        if pc or get16(b + pos + 44) or get16(b + pos + 46):
            spec = None
            key = None
            if pc and not get16(b + pos + 44) and not get16(b + pos + 46) and kind in _kinds_known:
                # a path only: walk its names; bytes that do not add up go to Python
                rec_end = pos + length - 4 - bl
                q = pos + _HEADER_SIZE + tl + ml
                k = 0
                while k < pc and q < rec_end:
                    q += 1 + <unsigned char>b[q]
                    k += 1
                if k == pc and q == rec_end:
                    key = PyBytes_FromStringAndSize(b + pos + _HEADER_SIZE + tl,
                                                    q - pos - _HEADER_SIZE - tl)
                    spec = _paths.get(key)
            body_at = pos + length - 4 - bl
            if spec is None:
                topic, body, spec = _special_fields(buf, pos, _unpack(buf, pos))
                if key is not None and len(_paths) < _PATHS_MAX:
                    _paths[key] = spec
                PyList_Append(topics, topic)
                PyList_Append(bodies, body)
                body_at = -1
            special[idx] = spec
        else:
            if _MIN_RECORD + tl + ml + bl != length:
                raise _CorruptRecord(pos, "length mismatch")
            body_at = pos + _HEADER_SIZE + tl + ml
        if body_at >= 0:  # not appended above (a record of the rare shape read in Python)
            p = pos + _HEADER_SIZE
            if not (tl == prev_tl and memcmp(b + prev_p, b + p, tl) == 0):
                try:
                    prev_topic = _decode_text(PyBytes_FromStringAndSize(b + p, tl))
                except UnicodeDecodeError:
                    raise _CorruptRecord(pos, "bad utf-8") from None
                prev_tl = tl
                prev_p = p
            PyList_Append(topics, prev_topic)
            PyList_Append(bodies, PyBytes_FromStringAndSize(b + body_at, bl))
        if kind != prev_kind:
            prev_kind = kind
            kinds.add(kind)
        kc[idx] = <char>kind
        PyList_Append(times, <int64_t>get64(b + pos + 16))
        PyList_Append(hashes, get64(b + pos + 24))
        PyList_Append(pseqs, get64(b + pos + 32))
        last_off = pos
        pos += length
        idx += 1
        seq += 1
    PyByteArray_Resize(kind_col, idx)
    return topics, bodies, times, hashes, pseqs, kinds, special, last_off, pos, kind_col
