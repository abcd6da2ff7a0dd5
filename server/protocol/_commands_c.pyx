# cython: language_level=3, boundscheck=False, wraparound=False
"""Compiled loop of :func:`spool.server.protocol.commands.take_publish_run_py` (same results).

The publish run scanner reads each header of a publisher's frame to decide whether it is
a *plain* publish of the run; here the header is walked with ``PyDict_Next`` and the keys
compared by identity first (headers' keys are the interned one-letter strings the frame
splitters produce), instead of a Python ``for key, value in h.items()`` loop.
``commands.py`` passes in what the rules need (the cache of validated ack strings and the
result type), so this module imports nothing of Spool.
"""

from cpython.dict cimport PyDict_GetItem, PyDict_Next
from cpython.list cimport PyList_Append
from cpython.object cimport PyObject


cdef extern from "Python.h":
    long long PyLong_AsLongLongAndOverflow(object o, int *overflow) except? -1


cdef str _C = "c"
cdef str _T = "t"
cdef str _L = "l"
cdef str _S = "s"
cdef str _A = "a"
cdef str _CID = "cid"
cdef str _PUBLISH = "publish"

cdef enum:
    _K_SKIP = 0
    _K_S = 1
    _K_A = 2
    _K_CID = 3
    _K_OTHER = 4


cdef inline object _get(dict h, object key):
    cdef PyObject *v = PyDict_GetItem(h, key)
    return <object>v if v != NULL else None


cdef inline bint _is_str(object value, str text):
    """``value == text`` for a str ``text``, without a rich comparison object."""
    return value is text or (type(value) is str and <str>value == text)


cdef inline int _kind(object key):
    """Which rule a header key falls under (identity first: keys are interned)."""
    if key is _C or key is _T or key is _L:
        return _K_SKIP
    if key is _S:
        return _K_S
    if key is _A:
        return _K_A
    if key is _CID:
        return _K_CID
    if type(key) is not str:
        return _K_OTHER
    if <str>key == _C or <str>key == _T or <str>key == _L:
        return _K_SKIP
    if <str>key == _S:
        return _K_S
    if <str>key == _A:
        return _K_A
    if <str>key == _CID:
        return _K_CID
    return _K_OTHER


cdef inline bint _non_negative_int(object value):
    cdef int overflow = 0
    cdef long long v
    if type(value) is not int:
        return False
    v = PyLong_AsLongLongAndOverflow(value, &overflow)
    return overflow > 0 or (overflow == 0 and v >= 0)


def take_publish_run(list msgs, Py_ssize_t start, dict ack_cache, object scan_type):
    """See :func:`spool.server.protocol.commands.take_publish_run_py`."""
    cdef Py_ssize_t n = len(msgs)
    cdef Py_ssize_t j = start
    cdef Py_ssize_t pos
    cdef PyObject *kp
    cdef PyObject *vp
    cdef dict h
    cdef list seqs = [], bodies = [], acks = []
    cdef bint plain
    cdef int kind
    cdef object topic, key, value, kinds, cid, s, msg, hobj
    hobj = msgs[start].header
    if type(hobj) is not dict:
        return None
    h = <dict>hobj
    if not _is_str(_get(h, _C), _PUBLISH):
        return None
    topic = _get(h, _T)
    if type(topic) is not str or not topic:
        return None
    while j < n:
        msg = msgs[j]
        hobj = msg.header
        if type(hobj) is not dict:
            break
        h = <dict>hobj
        if not _is_str(_get(h, _C), _PUBLISH) or not _is_str(_get(h, _T), <str>topic):
            break
        kinds = None
        cid = None
        s = None
        plain = True
        pos = 0
        while PyDict_Next(h, &pos, &kp, &vp):
            value = <object>vp
            kind = _kind(<object>kp)
            if kind == _K_SKIP or value is None:
                continue
            if kind == _K_S:
                if not _non_negative_int(value):
                    plain = False
                    break
                s = value
            elif kind == _K_A:
                if type(value) is not str:
                    plain = False
                    break
                kinds = _get(ack_cache, value)
                if kinds is None:
                    plain = False
                    break
            elif kind == _K_CID:
                if type(value) is str:
                    cid = value
                elif type(value) is int:
                    cid = str(value)
                else:
                    plain = False
                    break
            else:
                plain = False
                break
        if not plain:
            break
        if kinds:
            PyList_Append(acks, (j - start, kinds, cid))
        PyList_Append(seqs, s)
        PyList_Append(bodies, msg.body)
        j += 1
    if j == start:
        return None
    return scan_type(topic, seqs, bodies, acks, j)
