# cython: language_level=3, boundscheck=True, wraparound=True, cdivision=True
"""Compiled loops of the delivery encoder :mod:`spool.server.wire` (same bytes).

:mod:`spool.server.wire` builds the constant part of a run's headers once and formats only
what changes per message: the bookmark's numbers, the body length and the body. These two
functions do that per-message part into one preallocated ``bytes`` (two passes: sizes,
then copies), instead of one ``%`` format and one ``bytes`` per message joined afterwards.
They return None for values they do not handle (a number that is not a 64-bit unsigned
int), and wire.py then runs its Python loop: the Python loop is the oracle
(tests/unit/test_wire_twins.py).
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from libc.stdint cimport uint64_t
from libc.string cimport memcpy


cdef extern from "Python.h":
    unsigned long long PyLong_AsUnsignedLongLong(object o) except? -1


cdef inline int _digits(uint64_t v) noexcept:
    cdef int n = 1
    while v >= 10:
        v //= 10
        n += 1
    return n


cdef inline char *_put_u64(char *p, uint64_t v, int n) noexcept:
    cdef char *q = p + n
    while True:
        q -= 1
        q[0] = <char>(48 + v % 10)
        v //= 10
        if v == 0:
            break
    return p + n


cdef inline bint _u64(object value, uint64_t *out):
    """``value`` as a 64-bit unsigned int; False for anything else (negative ints and
    ints past 64 bits raise OverflowError in the conversion: the rare path)."""
    if type(value) is not int:
        return False
    try:
        out[0] = PyLong_AsUnsignedLongLong(value)
    except OverflowError:
        return False
    return True


cdef object _indices(object part):
    """``part`` as something indexable by position: a list or a range as they are (a
    range of a thousand indices is not turned into a thousand ints)."""
    if type(part) is list or type(part) is range:
        return part
    return list(part)


def bookmarked(bytes head, object hashes, object pub_hash, object pub_seqs, bytes tail,
               object bodies, object part):
    """``head + H + b"|" + S + tail + len(body) + b"}" + body`` for each ``i`` in ``part``.

    ``H`` is ``hashes[i]`` (a batch's column) or, when ``hashes`` is None, ``pub_hash``
    (a run's one publisher); ``S`` is ``pub_seqs[i]``. Returns None when a number is not
    a 64-bit unsigned int.
    """
    cdef object idx = _indices(part)
    cdef Py_ssize_t n
    cdef Py_ssize_t k, i, total = 0, hl = PyBytes_GET_SIZE(head), tl = PyBytes_GET_SIZE(tail)
    cdef Py_ssize_t r_start = 0, r_step = 1
    cdef bint is_range = type(idx) is range
    cdef uint64_t h = 0, s = 0
    cdef Py_ssize_t bl
    cdef bytes body, out
    cdef char *p
    cdef bint one_hash = hashes is None
    if one_hash and not _u64(pub_hash, &h):
        return None
    try:
        n = len(idx)
    except OverflowError:
        return None  # a range longer than Py_ssize_t: the Python loop says what is wrong
    if is_range:
        try:
            r_start = idx.start
            r_step = idx.step
        except OverflowError:
            return None  # indices past Py_ssize_t: the Python loop says what is wrong
    # pass 1: sizes and checks
    for k in range(n):
        i = r_start + k * r_step if is_range else idx[k]
        if not one_hash and not _u64(hashes[i], &h):
            return None
        if not _u64(pub_seqs[i], &s):
            return None
        obj = bodies[i]
        if type(obj) is not bytes:
            return None
        body = obj
        bl = PyBytes_GET_SIZE(body)
        total += hl + _digits(h) + 1 + _digits(s) + tl + _digits(bl) + 1 + bl
    out = PyBytes_FromStringAndSize(NULL, total)
    p = PyBytes_AS_STRING(out)
    # pass 2: copies
    for k in range(n):
        i = r_start + k * r_step if is_range else idx[k]
        if not one_hash:
            h = PyLong_AsUnsignedLongLong(hashes[i])
        s = PyLong_AsUnsignedLongLong(pub_seqs[i])
        body = bodies[i]
        bl = PyBytes_GET_SIZE(body)
        memcpy(p, PyBytes_AS_STRING(head), hl)
        p += hl
        p = _put_u64(p, h, _digits(h))
        p[0] = b'|'
        p += 1
        p = _put_u64(p, s, _digits(s))
        memcpy(p, PyBytes_AS_STRING(tail), tl)
        p += tl
        p = _put_u64(p, bl, _digits(bl))
        p[0] = b'}'
        p += 1
        memcpy(p, PyBytes_AS_STRING(body), bl)
        p += bl
    return out


def plain(bytes head, object bodies, object part):
    """``head + len(body) + b"}" + body`` for each ``i`` in ``part`` (``head`` ends with
    ``"l":``)."""
    cdef object idx = _indices(part)
    cdef Py_ssize_t n
    cdef Py_ssize_t k, total = 0, hl = PyBytes_GET_SIZE(head), bl
    cdef bytes body, out
    cdef char *p
    try:
        n = len(idx)
        for k in range(n):
            <Py_ssize_t>idx[k]
    except OverflowError:
        return None  # indices past Py_ssize_t: the Python loop says what is wrong
    for k in range(n):
        obj = bodies[<Py_ssize_t>idx[k]]
        if type(obj) is not bytes:
            return None
        body = obj
        bl = PyBytes_GET_SIZE(body)
        total += hl + _digits(bl) + 1 + bl
    out = PyBytes_FromStringAndSize(NULL, total)
    p = PyBytes_AS_STRING(out)
    for k in range(n):
        body = bodies[<Py_ssize_t>idx[k]]
        bl = PyBytes_GET_SIZE(body)
        memcpy(p, PyBytes_AS_STRING(head), hl)
        p += hl
        p = _put_u64(p, bl, _digits(bl))
        p[0] = b'}'
        p += 1
        memcpy(p, PyBytes_AS_STRING(body), bl)
        p += bl
    return out
