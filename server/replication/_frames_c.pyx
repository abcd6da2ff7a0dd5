# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled twin of the run decoder of :mod:`spool.server.replication.frames` (same results).

:func:`decode_run_fields` is the loop of :func:`spool.server.replication.frames.decode_runs_py`
over a ``data`` payload: it reads each run's header, path, fixed per-record fields and
bodies in place and builds the run's columns (one int per numeric field, one ``bytes``
per body) without a Python-level loop per record. Correlation ids and SOW keys (rare on
the replication path) go through the very function the Python implementation uses
(``_strings``), and the due times of scheduled records through the log's own reader
(``split_schedule_field``). Anything malformed - a short payload, an unknown kind, a bad
count, bad UTF-8, a scheduled record without a due time, trailing bytes - makes it return
``None``: the caller then runs the Python implementation, which raises the exact error,
so both twins refuse the same bytes with the same message
(tests/unit/replication/test_frames.py).
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from libc.stdint cimport int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy
from _buffers cimport get16, get32, get64

from spool.server.replication.errors import ReplicationProtocolError
from spool.server.txlog.format.record import RecordKind, split_schedule_field

# the kinds frames.py accepts in a data run (its _KINDS says why these are not)
cdef frozenset _KINDS = frozenset(int(k) for k in RecordKind) - {
    int(RecordKind.LOST), int(RecordKind.DUE)
}
cdef int _SCHEDULED = int(RecordKind.SCHEDULED)

cdef enum:
    _RUN_SIZE = 17  # u32 count, u64 pub_hash, u8 kind, u8 flags, u16 topic_len, u8 path
    _FIXED_SIZE = 28  # u64 source_seq, i64 timestamp_us, u64 pub_seq, u32 body_len
    _HAS_CORR = 1
    _HAS_KEYS = 2


def decode_run_fields(bytes payload, Py_ssize_t count, object strings):
    """The runs of a ``data`` payload as tuples of :class:`~spool.server.replication.frames.Run`
    fields, or ``None`` when the payload is malformed (the caller asks the Python twin,
    which raises the exact error). ``strings`` is the Python twin's column reader for
    correlation ids and SOW keys."""
    cdef const char *buf = PyBytes_AS_STRING(payload)
    cdef Py_ssize_t end = PyBytes_GET_SIZE(payload)
    cdef Py_ssize_t pos = 0
    cdef Py_ssize_t got = 0
    cdef Py_ssize_t n, i, tl, npath, size, fixed, body_pos, blen, total
    cdef uint64_t pub_hash
    cdef int kind, flags
    cdef const char *rec
    cdef list runs = []
    cdef list seqs, times, pub_seqs, bodies, path
    cdef object corrs, keys
    try:
        while got < count:
            if end - pos < _RUN_SIZE:
                return None
            n = get32(buf + pos)
            pub_hash = get64(buf + pos + 4)
            kind = <uint8_t>buf[pos + 12]
            flags = <uint8_t>buf[pos + 13]
            tl = get16(buf + pos + 14)
            npath = <uint8_t>buf[pos + 16]
            pos += _RUN_SIZE
            if kind not in _KINDS or n == 0 or got + n > count:
                return None
            if end - pos < tl:
                return None
            topic = buf[pos : pos + tl].decode("utf-8")
            pos += tl
            path = []
            for i in range(npath):
                if pos >= end:
                    return None
                size = <uint8_t>buf[pos]
                if end - pos - 1 < size:
                    return None
                path.append(buf[pos + 1 : pos + 1 + size].decode("utf-8"))
                pos += 1 + size
            if (end - pos) // _FIXED_SIZE < n:
                return None
            fixed = pos
            pos += n * _FIXED_SIZE
            corrs = keys = None
            if flags & _HAS_CORR:
                corrs, pos = strings(payload, pos, n, "correlation ids")
            if flags & _HAS_KEYS:
                keys, pos = strings(payload, pos, n, "SOW keys")
            if kind == _SCHEDULED:
                # each scheduled record's SOW key field starts with its due time
                if keys is None:
                    return None
                for key in keys:
                    split_schedule_field(key)
            seqs = [None] * n
            times = [None] * n
            pub_seqs = [None] * n
            bodies = [None] * n
            body_pos = pos
            total = 0
            for i in range(n):
                rec = buf + fixed + i * _FIXED_SIZE
                blen = get32(rec + 24)
                total += blen
                if total > end - pos:
                    return None
                seqs[i] = get64(rec)
                times[i] = <int64_t>get64(rec + 8)
                pub_seqs[i] = get64(rec + 16)
                bodies[i] = PyBytes_FromStringAndSize(buf + body_pos, blen)
                body_pos += blen
            pos = body_pos
            runs.append(
                (topic, pub_hash, kind, tuple(path), seqs, times, pub_seqs, bodies, corrs, keys)
            )
            got += n
    except (UnicodeDecodeError, ValueError, ReplicationProtocolError):
        return None
    if pos != end:
        return None
    return runs


def pack_fixed(object source_seqs, object timestamps_us, object pub_seqs, object bodies):
    """The fixed part of a run's records (``u64 source_seq, i64 timestamp_us, u64 pub_seq,
    u32 body_len`` each), one ``bytes``; ``None`` when a column does not fit its field or
    the columns differ in length (the caller asks the Python twin, which raises or packs
    exactly as it would)."""
    cdef list seqs = list(source_seqs)
    cdef list times = list(timestamps_us)
    cdef list pseqs = list(pub_seqs)
    cdef list bods = list(bodies)
    cdef Py_ssize_t n = len(bods)
    cdef Py_ssize_t i
    cdef uint64_t u
    cdef int64_t s
    cdef uint32_t blen
    cdef Py_ssize_t size
    cdef bytes body
    if len(seqs) != n or len(times) != n or len(pseqs) != n:
        return None
    out = PyBytes_FromStringAndSize(NULL, n * _FIXED_SIZE)
    cdef char *p = PyBytes_AS_STRING(out)
    try:
        for i in range(n):
            body = bods[i]
            size = PyBytes_GET_SIZE(body)
            if size > 0xFFFFFFFF:
                return None
            blen = <uint32_t>size
            u = seqs[i]
            memcpy(p, &u, 8)
            s = times[i]
            memcpy(p + 8, &s, 8)
            u = pseqs[i]
            memcpy(p + 16, &u, 8)
            memcpy(p + 24, &blen, 4)
            p += _FIXED_SIZE
    except (OverflowError, TypeError):
        return None
    return out
