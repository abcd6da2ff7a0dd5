# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled twin of :func:`spool.server.protocol.frame.parse_frame_py` (same API, same results).

The pure-Python splitter is the specification: for every input this module returns equal
messages and an error of the same type, text and ``cid`` (tests/unit/protocol/
test_frame_twins.py checks it with hypothesis). What makes it faster:

- the header of the usual message (a flat object of short keys whose values are ASCII
  strings without escapes, integers of up to 18 digits, ``true``, ``false``, ``null``) is
  parsed here into its dict directly, with the common keys and recently seen string
  values (topics, ack kinds) reused instead of allocated. Anything else in a header (an
  escape, non-ASCII text, a float, an array, whitespace, a huge or negative number) sends
  that one header to exactly what the Python implementation does: orjson on the slice up
  to the first ``}``, then a scan for the first ``}`` outside strings (the regular
  expression of frame.py, as a loop), then orjson on that;
- the loop over messages, the ``l`` checks and the body slices are C.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.dict cimport PyDict_GetItem, PyDict_SetItem
from cpython.list cimport PyList_Append
from cpython.object cimport PyObject
from libc.string cimport memchr, memcmp, memcpy

import orjson

from spool.server.protocol.message import (
    LONG,
    MAX_HEADER_BYTES,
    Delivery,
    FrameError,
    Message,
    ParsedFrame,
    cid_of,
    delivery_of,
    normalize,
    sub_ids_of,
)
from spool.server.protocol.message import _UNSET, _sids_cache


cdef extern from "Python.h":
    ctypedef struct PyTypeObject:
        PyObject *(*tp_alloc)(PyTypeObject *, Py_ssize_t) except NULL
        int (*tp_descr_set)(PyObject *, PyObject *, PyObject *) except -1
    PyTypeObject *Py_TYPE(PyObject *o)
    void Py_DECREF(PyObject *o)
    long long PyLong_AsLongLongAndOverflow(object o, int *overflow) except? -1
    void PyObject_GC_UnTrack(void *op)
    object PyUnicode_DecodeASCII(const char *s, Py_ssize_t size, const char *errors)
    object PyLong_FromLongLong(long long v)
    Py_ssize_t PyUnicode_GET_LENGTH(object o)
    void *PyUnicode_DATA(object o)
    int PyUnicode_IS_COMPACT_ASCII(object o)


cdef object _loads = orjson.loads
cdef object _decode_error = orjson.JSONDecodeError
cdef object _Message = Message
cdef object _ParsedFrame = ParsedFrame
cdef object _FrameError = FrameError
cdef object _LONG = LONG
cdef object _normalize = normalize
cdef object _cid_of = cid_of
cdef Py_ssize_t _MAX_HEADER = MAX_HEADER_BYTES
cdef object _header_slot = Message.header
cdef object _body_slot = Message.body


cdef inline object _message(object header, object body):
    """A :class:`Message`, built as its dataclass ``__init__`` would (without the call)."""
    cdef PyTypeObject *tp = <PyTypeObject *>_Message
    cdef PyObject *raw = tp.tp_alloc(tp, 0)
    cdef object msg = <object>raw
    Py_DECREF(raw)
    Py_TYPE(<PyObject *>_header_slot).tp_descr_set(
        <PyObject *>_header_slot, <PyObject *>msg, <PyObject *>header)
    Py_TYPE(<PyObject *>_body_slot).tp_descr_set(
        <PyObject *>_body_slot, <PyObject *>msg, <PyObject *>body)
    return msg
cdef object _L = "l"

# Keys of more than one character that headers use; one-character strings are cached by
# CPython itself. Looked up by length and bytes, so a known key costs no allocation.
cdef tuple _KNOWN_KEYS = (
    "cid", "sids", "bm", "ts", "status", "reason", "sub_id", "qid", "client_name",
    "user_id", "pw", "version", "hb", "lp", "bs", "top_n", "orderby", "max_msgs",
    "detail", "matches", "records_returned", "records_deleted",
)

# A direct-mapped cache of recent string values (topics, ack kinds, command names): a
# frame of publishes repeats them in every header. Bounded: 64 slots, values up to 128
# bytes.
cdef enum:
    _SLOTS = 64
    _CACHED_MAX = 128

cdef list _value_cache = [None] * _SLOTS


cdef inline object _cached_str(const char *p, Py_ssize_t n):
    """The str of ASCII bytes ``p[:n]``, reused from the cache when it was seen lately."""
    cdef Py_ssize_t slot
    cdef object s
    if n > _CACHED_MAX or n == 0:
        return PyUnicode_DecodeASCII(p, n, NULL)
    slot = (n * 31 + <unsigned char>p[0] * 7 + <unsigned char>p[n - 1]) & (_SLOTS - 1)
    s = _value_cache[slot]
    if s is not None and PyUnicode_GET_LENGTH(s) == n and memcmp(PyUnicode_DATA(s), p, n) == 0:
        return s
    s = PyUnicode_DecodeASCII(p, n, NULL)
    _value_cache[slot] = s
    return s


cdef list _ONE_CHAR = [chr(i) for i in range(128)]


cdef inline object _key_str(const char *p, Py_ssize_t n):
    cdef object k
    cdef Py_ssize_t i
    if n == 1:
        return _ONE_CHAR[<unsigned char>p[0]]  # ASCII (the scan refused anything else)
    if n > 1:
        for i in range(len(_KNOWN_KEYS)):
            k = _KNOWN_KEYS[i]
            if PyUnicode_GET_LENGTH(k) == n and memcmp(PyUnicode_DATA(k), p, n) == 0:
                return k
    return PyUnicode_DecodeASCII(p, n, NULL)


cdef inline Py_ssize_t _ascii_string_end(const char *buf, Py_ssize_t i, Py_ssize_t limit):
    """Index of the closing quote of a string starting after ``buf[i - 1] == '"'``, or -1
    when the string is not plain printable ASCII without escapes (or runs past limit)."""
    cdef unsigned char ch
    while i < limit:
        ch = <unsigned char>buf[i]
        if ch == 34:  # '"'
            return i
        if ch < 32 or ch >= 128 or ch == 92:  # control, non-ASCII, backslash
            return -1
        i += 1
    return -1


cdef object _fast_header(const char *buf, Py_ssize_t pos, Py_ssize_t limit, Py_ssize_t *hend,
                         bint *has_long):
    """Parse the flat, simple header at ``pos`` (``buf[pos] == '{'``) into a dict.

    Returns None when the header is not of the simple shape (the caller then does what
    the Python implementation does); ``hend`` is set past the closing brace.
    """
    cdef dict header = {}
    cdef Py_ssize_t i = pos + 1
    cdef Py_ssize_t j, ndig
    cdef long long num
    cdef unsigned char ch
    cdef object key, value
    if i < limit and buf[i] == b'}':
        hend[0] = i + 1
        return header
    while True:
        if i >= limit or buf[i] != b'"':
            return None
        j = _ascii_string_end(buf, i + 1, limit)
        if j < 0:
            return None
        key = _key_str(buf + i + 1, j - i - 1)
        if j - i - 1 > 1 and key in _LONG:
            has_long[0] = True
        i = j + 1
        if i >= limit or buf[i] != b':':
            return None
        i += 1
        if i >= limit:
            return None
        ch = <unsigned char>buf[i]
        if ch == 34:  # string
            j = _ascii_string_end(buf, i + 1, limit)
            if j < 0:
                return None
            value = _cached_str(buf + i + 1, j - i - 1)
            i = j + 1
        elif 48 <= ch <= 57:  # a non-negative integer
            if ch == 48 and i + 1 < limit and 48 <= <unsigned char>buf[i + 1] <= 57:
                return None  # a leading zero: orjson's error message
            num = 0
            ndig = 0
            while i < limit and 48 <= <unsigned char>buf[i] <= 57:
                num = num * 10 + (<unsigned char>buf[i] - 48)
                ndig += 1
                i += 1
                if ndig > 18:
                    return None
            if i < limit and (buf[i] == b'.' or buf[i] == b'e' or buf[i] == b'E'):
                return None
            value = PyLong_FromLongLong(num)
        elif ch == 116 and i + 4 <= limit and memcmp(buf + i, b"true", 4) == 0:
            value = True
            i += 4
        elif ch == 102 and i + 5 <= limit and memcmp(buf + i, b"false", 5) == 0:
            value = False
            i += 5
        elif ch == 110 and i + 4 <= limit and memcmp(buf + i, b"null", 4) == 0:
            value = None
            i += 4
        else:
            return None
        PyDict_SetItem(header, key, value)
        if i >= limit:
            return None
        if buf[i] == b',':
            i += 1
            continue
        if buf[i] == b'}':
            hend[0] = i + 1
            return header
        return None


cdef Py_ssize_t _scan_header_end(const char *buf, Py_ssize_t pos, Py_ssize_t limit):
    """The end (past ``}``) of the header at ``pos`` as frame.py's regular expression finds
    it within ``limit``, or -1 when it does not match."""
    cdef Py_ssize_t i
    cdef unsigned char ch
    if pos >= limit or buf[pos] != b'{':
        return -1
    i = pos + 1
    while i < limit:
        ch = <unsigned char>buf[i]
        if ch == 125:  # '}'
            return i + 1
        if ch == 123:  # '{': nested
            return -1
        if ch == 34:  # a string: up to the next unescaped quote
            i += 1
            while True:
                if i >= limit:
                    return -1
                ch = <unsigned char>buf[i]
                if ch == 34:
                    break
                if ch == 92:
                    if i + 1 >= limit:
                        return -1
                    i += 2
                    continue
                i += 1
        i += 1
    return -1


cdef object _slow_header(bytes data, const char *buf, Py_ssize_t pos, Py_ssize_t end,
                         Py_ssize_t *hend):
    """What frame.py does for a header: returns the header dict, or a FrameError."""
    cdef const char *close
    cdef Py_ssize_t h = -1
    cdef Py_ssize_t limit
    header = None
    if buf[pos] == b'{':
        close = <const char *>memchr(buf + pos, 125, end - pos)
        if close != NULL:
            h = close - buf + 1
            if h <= pos + _MAX_HEADER:
                try:
                    header = _loads(data[pos:h])
                except _decode_error:
                    header = None
    if header is None:
        limit = end if end < pos + _MAX_HEADER else pos + _MAX_HEADER
        h = _scan_header_end(buf, pos, limit)
        if h < 0:
            if buf[pos] != b'{':
                return _FrameError(f"expected a JSON header at byte {pos}")
            return _FrameError(f"unterminated or nested JSON header at byte {pos}")
        try:
            header = _loads(data[pos:h])
        except _decode_error as exc:
            return _FrameError(f"header is not JSON: {exc}")
    hend[0] = h
    return header


cdef object _one(bytes frame, const char *buf, Py_ssize_t pos, Py_ssize_t end,
                 Py_ssize_t *next_pos):
    """The message at ``pos`` as a :class:`Message` (``next_pos`` set past it), or the
    :class:`FrameError` that ends the frame there: parse_frame_py's loop body."""
    cdef Py_ssize_t hend = 0, bend
    cdef long long length
    cdef bint has_long = False
    cdef int overflow
    cdef PyObject *lp
    cdef object header = None, body
    if buf[pos] == b'{':
        header = _fast_header(buf, pos, end if end - pos < _MAX_HEADER else pos + _MAX_HEADER,
                              &hend, &has_long)
    if header is None:
        header = _slow_header(frame, buf, pos, end, &hend)
        if type(header) is _FrameError:
            return header
        if type(header) is not dict:
            return _FrameError("header is not a JSON object")
        has_long = not _LONG.isdisjoint(header)
    if has_long:
        header = _normalize(header)
    lp = PyDict_GetItem(header, _L)
    if lp == NULL or <object>lp is None:
        body = PyBytes_FromStringAndSize(buf + hend, end - hend)
        next_pos[0] = end
    else:
        lobj = <object>lp
        overflow = 0
        length = -1
        if type(lobj) is int:
            length = PyLong_AsLongLongAndOverflow(lobj, &overflow)
        if length < 0 and overflow <= 0:
            return _FrameError("'l' must be a non-negative integer", _cid_of(header))
        if overflow > 0 or length > end - hend:
            return _FrameError(
                f"'l' is {lobj} but only {end - hend} body bytes follow", _cid_of(header)
            )
        bend = hend + length
        body = PyBytes_FromStringAndSize(buf + hend, length)
        next_pos[0] = bend
    return _message(header, body)


def parse_frame(data):
    """Split a frame into messages (compiled; see :func:`spool.server.protocol.frame.parse_frame_py`)."""
    cdef bytes frame = data if type(data) is bytes else bytes(data)
    cdef list messages = []
    cdef Py_ssize_t pos = 0, nxt = 0
    cdef Py_ssize_t end = PyBytes_GET_SIZE(frame)
    cdef const char *buf = PyBytes_AS_STRING(frame)
    cdef object item
    if end == 0:
        return _ParsedFrame(messages, _FrameError("empty frame"))
    while pos < end:
        item = _one(frame, buf, pos, end, &nxt)
        if type(item) is _FrameError:
            return _ParsedFrame(messages, item)
        PyList_Append(messages, item)
        pos = nxt
    return _ParsedFrame(messages)


# -- deliveries (the client's splitter) ----------------------------------------------------

cdef object _Delivery = Delivery
cdef object _delivery_of = delivery_of
cdef object _sub_ids_of = sub_ids_of
cdef dict _sids = _sids_cache
cdef object _UNSET_ = _UNSET
cdef object _PUBLISH = "publish"
cdef object _C = "c"
cdef tuple _DELIVERY_SLOTS = tuple(
    getattr(Delivery, name)
    for name in ("topic", "data", "sub_ids", "bookmark", "timestamp", "correlation_id",
                 "_header", "_json")
)


cdef inline void _set_slot(object descr, object obj, object value) except *:
    Py_TYPE(<PyObject *>descr).tp_descr_set(<PyObject *>descr, <PyObject *>obj,
                                            <PyObject *>value)


cdef inline Py_ssize_t _expect(const char *buf, Py_ssize_t i, Py_ssize_t end, const char *lit,
                               Py_ssize_t n) noexcept:
    """``i + n`` when ``buf[i:i + n] == lit``, else -1."""
    if i < 0 or end - i < n or memcmp(buf + i, lit, n) != 0:
        return -1
    return i + n


cdef object _fast_delivery(const char *buf, Py_ssize_t pos, Py_ssize_t end,
                           Py_ssize_t *next_pos):
    """The :class:`Delivery` at ``pos`` when its header is exactly the broker's layout
    ``{"c":"publish","t":T,"sids":S[,"bm":B][,"ts":TS][,"x":X],"l":N}`` with plain ASCII
    strings and a body that fits; None otherwise (the general path then decides)."""
    cdef Py_ssize_t i, j, ndig
    cdef long long num
    cdef object topic, sids, ids, bm = None, ts = None, x = None, body, d
    cdef PyObject *hit
    cdef PyTypeObject *tp
    cdef PyObject *raw
    i = _expect(buf, pos, end, b'{"c":"publish","t":"', 20)
    if i < 0:
        return None
    j = _ascii_string_end(buf, i, end)
    if j < 0:
        return None
    topic = _cached_str(buf + i, j - i)
    i = _expect(buf, j + 1, end, b',"sids":"', 9)
    if i < 0:
        return None
    j = _ascii_string_end(buf, i, end)
    if j < 0:
        return None
    sids = _cached_str(buf + i, j - i)
    i = j + 1
    j = _expect(buf, i, end, b',"bm":"', 7)
    if j >= 0:
        i = _ascii_string_end(buf, j, end)
        if i < 0:
            return None
        bm = PyUnicode_DecodeASCII(buf + j, i - j, NULL)
        i += 1
    j = _expect(buf, i, end, b',"ts":"', 7)
    if j >= 0:
        i = _ascii_string_end(buf, j, end)
        if i < 0:
            return None
        ts = PyUnicode_DecodeASCII(buf + j, i - j, NULL)
        i += 1
    j = _expect(buf, i, end, b',"x":"', 6)
    if j >= 0:
        i = _ascii_string_end(buf, j, end)
        if i < 0:
            return None
        x = PyUnicode_DecodeASCII(buf + j, i - j, NULL)
        i += 1
    i = _expect(buf, i, end, b',"l":', 5)
    if i < 0 or i >= end:
        return None
    if buf[i] == b'0' and i + 1 < end and 48 <= <unsigned char>buf[i + 1] <= 57:
        return None
    num = 0
    ndig = 0
    while i < end and 48 <= <unsigned char>buf[i] <= 57:
        num = num * 10 + (<unsigned char>buf[i] - 48)
        ndig += 1
        i += 1
        if ndig > 18:
            return None
    if ndig == 0 or i >= end or buf[i] != b'}':
        return None
    i += 1
    if num > end - i:
        return None  # the general path reports it
    if i - pos > _MAX_HEADER:
        return None
    hit = PyDict_GetItem(_sids, sids)
    ids = <object>hit if hit != NULL else _sub_ids_of(sids)
    body = PyBytes_FromStringAndSize(buf + i, num)
    tp = <PyTypeObject *>_Delivery
    raw = tp.tp_alloc(tp, 0)
    d = <object>raw
    Py_DECREF(raw)
    _set_slot(_DELIVERY_SLOTS[0], d, topic)
    _set_slot(_DELIVERY_SLOTS[1], d, body)
    _set_slot(_DELIVERY_SLOTS[2], d, ids)
    _set_slot(_DELIVERY_SLOTS[3], d, bm)
    _set_slot(_DELIVERY_SLOTS[4], d, ts)
    _set_slot(_DELIVERY_SLOTS[5], d, x)
    _set_slot(_DELIVERY_SLOTS[6], d, None)
    _set_slot(_DELIVERY_SLOTS[7], d, _UNSET_)
    # It holds only strings, bytes and a tuple of strings: it cannot be part of a cycle,
    # so the cycle collector need not walk it (as CPython untracks such tuples). A replay
    # keeps hundreds of thousands of them in a subscription's buffer; tracked, every full
    # collection walked them all (measured: up to half the receive cost).
    PyObject_GC_UnTrack(<void *>d)
    next_pos[0] = i + num
    return d


def split_deliveries(data):
    """A frame from the broker as deliveries and other messages (compiled; see
    :func:`spool.server.protocol.delivery.split_deliveries_py`)."""
    cdef bytes frame = data if type(data) is bytes else bytes(data)
    cdef list items = []
    cdef Py_ssize_t pos = 0, nxt = 0
    cdef Py_ssize_t end = PyBytes_GET_SIZE(frame)
    cdef const char *buf = PyBytes_AS_STRING(frame)
    cdef object item
    if end == 0:
        return items, _FrameError("empty frame")
    while pos < end:
        item = _fast_delivery(buf, pos, end, &nxt)
        if item is None:
            item = _one(frame, buf, pos, end, &nxt)
            if type(item) is _FrameError:
                return items, item
            if (<object>PyDict_GetItem(item.header, _C) if PyDict_GetItem(item.header, _C) != NULL
                    else None) == _PUBLISH:
                item = _delivery_of(item.header, item.body)
        PyList_Append(items, item)
        pos = nxt
    return items, None


# -- publishes (the clients' encoder) ------------------------------------------------------

cdef inline int _ndigits(unsigned long long v) noexcept:
    cdef int n = 1
    while v >= 10:
        v //= 10
        n += 1
    return n


cdef inline char *_put_digits(char *p, unsigned long long v, int n) noexcept:
    cdef char *q = p + n
    while True:
        q -= 1
        q[0] = <char>(48 + v % 10)
        v //= 10
        if v == 0:
            break
    return p + n


def encode_publishes(bytes head, first_seq, bytes mid, list bodies):
    """Compiled :func:`spool.server.protocol.frame.encode_publishes_py` (same bytes)."""
    cdef Py_ssize_t n = len(bodies), k, total = 0, bl
    cdef Py_ssize_t hl = PyBytes_GET_SIZE(head), ml = PyBytes_GET_SIZE(mid)
    cdef unsigned long long seq
    cdef bytes out
    cdef char *p
    cdef object b
    if n == 0:
        return b""
    if type(first_seq) is not int or first_seq < 0 or first_seq + n > 0xFFFFFFFFFFFFFFFF:
        return b"".join([b"%s%d%s%d}%s" % (head, first_seq + i, mid, len(x), x)
                         for i, x in enumerate(bodies)])
    for k in range(n):
        b = bodies[k]
        if type(b) is not bytes:
            return b"".join([b"%s%d%s%d}%s" % (head, first_seq + i, mid, len(x), x)
                             for i, x in enumerate(bodies)])
        bl = PyBytes_GET_SIZE(b)
        seq = <unsigned long long>first_seq + k
        total += hl + _ndigits(seq) + ml + _ndigits(bl) + 1 + bl
    out = PyBytes_FromStringAndSize(NULL, total)
    p = PyBytes_AS_STRING(out)
    for k in range(n):
        b = bodies[k]
        bl = PyBytes_GET_SIZE(b)
        seq = <unsigned long long>first_seq + k
        memcpy(p, PyBytes_AS_STRING(head), hl)
        p += hl
        p = _put_digits(p, seq, _ndigits(seq))
        memcpy(p, PyBytes_AS_STRING(mid), ml)
        p += ml
        p = _put_digits(p, bl, _ndigits(bl))
        p[0] = b'}'
        p += 1
        memcpy(p, PyBytes_AS_STRING(b), bl)
        p += bl
    return out
