"""The only encoder of outbound data messages (docs/protocol.md "Messages from the server").

Delivered messages are the hottest bytes in the broker, so their headers are assembled from
pre-encoded pieces (the topic and the subscription ids are JSON-encoded once) instead of
going through a JSON encoder per message. The per-message loops of the common shapes run
compiled when the extension is built (``_wire_c.pyx``, see :mod:`spool.server.speedups`); the
list comprehensions here are the pure-Python implementation and their oracle. Every
producer of ``publish`` messages (the live fan-out, the replay sink, the SOW, later
replication) encodes here, so the layout is
written once::

    {"c":"publish","t":TOPIC,"sids":"a,b","bm":"H|S|","ts":"...","x":"...","l":N}BODY

Bookmarks are ``format_bookmark(pub_hash, pub_seq)`` (server/bookmarks.py, the one
definition of the text); the run encoders below format the same text straight into bytes
(``%d|%d|``), which ``tests/unit/engine/test_seams.py`` checks against ``format_bookmark``
so the two cannot drift apart. Sans-I/O: bytes in, bytes out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final

import orjson

from spool.server import speedups
from spool.server.bookmarks import format_bookmark, format_timestamp_us
from spool.server.txlog.format.batch import RecordBatch

try:
    from spool.server import _wire_c
except ImportError:  # not built: speedups.status() says why
    _wire_c = None  # type: ignore[assignment]

#: the compiled per-message loops (``_wire_c.pyx``), or None for the Python loops below,
#: which are their oracle (``SPOOL_NO_EXTENSIONS=1``, or not built; server/speedups.py).
_kernel = _wire_c if speedups.ENABLED else None

__all__ = [
    "encode_batch",
    "encode_group",
    "encode_keyed",
    "encode_oof",
    "encode_publish",
    "encode_queued",
    "encode_run",
    "encode_sow_record",
    "encode_sow_records",
    "key_json",
    "sids_json",
    "topic_json",
]

#: most topics whose JSON literal is kept (a broker sees thousands of topics, not millions;
#: past the limit a literal is encoded per call instead of being cached)
TOPIC_JSON_LIMIT: Final = 50_000

_topic_json: dict[str, bytes] = {}


def topic_json(topic: str) -> bytes:
    """A topic as a JSON string literal, encoded once per topic."""
    tj = _topic_json.get(topic)
    if tj is None:
        tj = orjson.dumps(topic)
        if len(_topic_json) < TOPIC_JSON_LIMIT:
            _topic_json[topic] = tj
    return tj


def sids_json(sub_ids: Sequence[str]) -> bytes:
    """The ``sids`` value of a delivery that matched these subscriptions of one client."""
    return orjson.dumps(sub_ids[0] if len(sub_ids) == 1 else ",".join(sub_ids))


def encode_publish(
    topic_literal: bytes,
    sids: bytes,
    body: bytes,
    bookmark: str | None = None,
    ts: str | None = None,
    corr_id: str | None = None,
) -> bytes:
    """One outbound ``publish`` message (header + body).

    Args:
        topic_literal: the topic as a JSON literal (:func:`topic_json`).
        sids: the subscription ids as a JSON literal (:func:`sids_json`).
        body: the body, byte for byte as published.
        bookmark: ``format_bookmark(...)`` text, or None for topics not in the log.
        ts: the ``ts`` value (:func:`spool.server.bookmarks.format_timestamp_us`), when asked.
        corr_id: the publisher's correlation id, passed through.
    """
    head = b'{"c":"publish","t":' + topic_literal + b',"sids":' + sids
    if bookmark:
        head += b',"bm":"' + bookmark.encode() + b'"'
    if ts:
        head += b',"ts":"' + ts.encode() + b'"'
    if corr_id:
        head += b',"x":' + orjson.dumps(corr_id)
    return head + b',"l":%d}' % len(body) + body


def encode_queued(
    topic_literal: bytes,
    sids: bytes,
    body: bytes,
    bookmark: str,
    lease_ms: int,
    count: int,
    corr_id: str = "",
) -> bytes:
    """One delivery of a queue message (docs/queues.md "On the wire"): its bookmark (what
    the consumer acks with ``sow_delete``), ``lp`` the lease period in milliseconds (0:
    at-most-once, nothing to ack), ``dc`` how many times it was delivered (above 1: a
    redelivery after a lease ended unacked) and ``x`` the publisher's correlation id when
    it gave one."""
    x = b',"x":' + orjson.dumps(corr_id) if corr_id else b""
    return b'{"c":"publish","t":%b,"sids":%b,"bm":"%b","lp":%d,"dc":%d%b,"l":%d}%b' % (
        topic_literal,
        sids,
        bookmark.encode(),
        lease_ms,
        count,
        x,
        len(body),
        body,
    )


def encode_run(
    topic_literal: bytes,
    sids: bytes,
    bodies: Sequence[bytes],
    part: Sequence[int] | range,
    *,
    pub_hash: int = 0,
    pub_seqs: Sequence[int] | None = None,
    ts: str | None = None,
    corr_ids: Sequence[str] | None = None,
) -> bytes:
    """The deliveries of messages ``part`` of a run (one topic, one publisher), joined.

    The live fan-out's encoder: a run's messages share the topic, the publisher id and
    the record time, so only the sequence and the body change per message.

    Args:
        part: indices into ``bodies`` (``range(len(bodies))`` for all of them).
        pub_hash: the records' publisher id (with ``pub_seqs``: the bookmarks).
        pub_seqs: the publisher sequences, or None for messages not in the log (no ``bm``).
        ts: the ``ts`` value shared by the run, when asked.
        corr_ids: per-message correlation ids (``""`` for none), or None.
    """
    if corr_ids is not None and any(corr_ids[i] for i in part):
        return b"".join(
            [
                encode_publish(
                    topic_literal,
                    sids,
                    bodies[i],
                    format_bookmark(pub_hash, pub_seqs[i]) if pub_seqs is not None else None,
                    ts,
                    corr_ids[i] or None,
                )
                for i in part
            ]
        )
    head = b'{"c":"publish","t":' + topic_literal + b',"sids":' + sids
    if pub_seqs is not None:
        tail = b'|","ts":"' + ts.encode() + b'","l":' if ts else b'|","l":'
        if _kernel is not None:
            out: bytes | None = _kernel.bookmarked(head + b',"bm":"', None, pub_hash, pub_seqs, tail, bodies,
                                     part)  # fmt: skip
            if out is not None:
                return out
        # "bm":"H|S|" with H fixed for the run: only S and the length vary per message
        head += b',"bm":"%d|' % pub_hash
        return b"".join(
            [b"%s%d%s%d}%s" % (head, pub_seqs[i], tail, len(bodies[i]), bodies[i]) for i in part]
        )
    if ts:
        head += b',"ts":"' + ts.encode() + b'"'
    head += b',"l":'
    if _kernel is not None:
        joined: bytes | None = _kernel.plain(head, bodies, part)
        if joined is not None:
            return joined
    return b"".join([b"%s%d}%s" % (head, len(bodies[i]), bodies[i]) for i in part])


def encode_batch(
    batch: RecordBatch,
    part: Sequence[int] | range,
    sids: bytes,
    *,
    topic_literal: bytes | None = None,
    want_ts: bool = False,
    literal_of: Callable[[str], bytes] = topic_json,
    bodies: Sequence[bytes] | None = None,
) -> bytes:
    """The deliveries of records ``part`` of a log batch (the replay sink's encoder).

    Args:
        topic_literal: the topic literal when every record of ``part`` has the same topic
            (a subscription to one topic); None looks each record's topic up.
        want_ts: add ``ts`` (the record's time) to each message.
        literal_of: the topic-literal cache (:func:`topic_json`).
        bodies: what to deliver in place of the records' bodies, by the same index (a
            select list's projections); None: the bodies.
    """
    if bodies is None:
        bodies = batch.bodies
    hashes = batch.pub_hashes
    pseqs = batch.pub_seqs
    if topic_literal is not None and not want_ts and not batch.has_corr_ids():
        # one topic, nothing per record but the bookmark: one format per message
        head = b'{"c":"publish","t":' + topic_literal + b',"sids":' + sids + b',"bm":"'
        if _kernel is not None:
            out: bytes | None = _kernel.bookmarked(head, hashes, 0, pseqs, b'|","l":', bodies, part)
            if out is not None:
                return out
        return b"".join(
            [
                b'%s%d|%d|","l":%d}%s' % (head, hashes[i], pseqs[i], len(bodies[i]), bodies[i])
                for i in part
            ]
        )
    topics = batch.topics
    return b"".join(
        [
            encode_publish(
                topic_literal if topic_literal is not None else literal_of(topics[i]),
                sids,
                bodies[i],
                format_bookmark(hashes[i], pseqs[i]),
                format_timestamp_us(batch.timestamp_us(i)) if want_ts else None,
                batch.corr_id(i) or None,
            )
            for i in part
        ]
    )


# -- SOW: query results, live deliveries with a key, out-of-focus notices -----------------
# (server/sow uses these; the layouts are docs/protocol.md "Messages from the server")


def key_json(key: str) -> bytes:
    """A SOW key as a JSON string literal."""
    return orjson.dumps(key)


def encode_group(kind: bytes, qid: bytes, sub_id: bytes | None = None) -> bytes:
    """A ``group_begin`` / ``group_end`` message around a query result.

    Args:
        kind: ``b"group_begin"`` or ``b"group_end"``.
        qid: the query id as a JSON literal.
        sub_id: the subscription id as a JSON literal (``sow_and_subscribe``), if any.
    """
    head = b'{"c":"' + kind + b'","qid":' + qid
    if sub_id is not None:
        head += b',"sub_id":' + sub_id
    return head + b',"l":0}'


def encode_sow_record(
    topic_literal: bytes,
    qid: bytes,
    key: str | None,
    body: bytes,
    bookmark: str | None = None,
    ts: str | None = None,
) -> bytes:
    """One ``sow`` message: a query-result record (``key`` None: ``no_sowkey``).

    Readable twin of :func:`encode_keyed`, which writes the same tail after its own
    head: tests/unit/sow/test_wire_sow.py checks them against each other.
    """
    head = b'{"c":"sow","t":' + topic_literal + b',"qid":' + qid
    if key is not None:
        head += b',"k":' + orjson.dumps(key)
    if bookmark:
        head += b',"bm":"' + bookmark.encode() + b'"'
    if ts:
        head += b',"ts":"' + ts.encode() + b'"'
    return head + b',"l":%d}' % len(body) + body


def encode_keyed(
    topic_literal: bytes,
    sids: bytes,
    key: str | None,
    body: bytes,
    bookmark: str | None = None,
    ts: str | None = None,
) -> bytes:
    """One ``publish`` delivery of a SOW topic: with the record's ``k`` (None:
    ``no_sowkey``). A delta subscription's body is the delta.

    The tail after the head is the same as :func:`encode_sow_record`'s, written out in
    both: a shared helper would cost one more call per record, and this runs once per
    live delivery of every SOW subscriber. Fast twin of :func:`encode_sow_record`:
    tests/unit/sow/test_wire_sow.py checks them against each other (same tail bytes,
    same errors).
    """
    head = b'{"c":"publish","t":' + topic_literal + b',"sids":' + sids
    if key is not None:
        head += b',"k":' + orjson.dumps(key)
    if bookmark:
        head += b',"bm":"' + bookmark.encode() + b'"'
    if ts:
        head += b',"ts":"' + ts.encode() + b'"'
    return head + b',"l":%d}' % len(body) + body


def encode_oof(
    topic_literal: bytes,
    sids: bytes,
    key: str | None,
    reason: str,
    body: bytes,
    bookmark: str | None = None,
) -> bytes:
    """One ``oof`` message: the record ``key`` left a subscription's focus.

    Args:
        reason: ``match`` (the update no longer matches the filter: ``body`` is the
            update), ``deleted`` / ``expired`` (``body`` is the record's last state) or
            ``entitlement``.
        bookmark: the bookmark of the update or deletion that caused it, when recorded.
    """
    head = b'{"c":"oof","t":' + topic_literal + b',"sids":' + sids
    if key is not None:
        head += b',"k":' + orjson.dumps(key)
    head += b',"reason":"' + reason.encode() + b'"'
    if bookmark:
        head += b',"bm":"' + bookmark.encode() + b'"'
    return head + b',"l":%d}' % len(body) + body


def encode_sow_records(
    topic_literal: bytes,
    qid: bytes,
    records: Sequence[tuple[str, bytes, int, int, int, int, int, int]],
    *,
    send_key: bool = True,
    want_ts: bool = False,
) -> bytes:
    """Many ``sow`` messages of one topic, joined: a query result batch.

    ``records`` are :class:`~spool.server.ports.SowRecord` values (``key, body, seq,
    timestamp_us, pub_hash, pub_seq, ...``); the layout is :func:`encode_sow_record`'s,
    formatted in one pass (a query sends hundreds of thousands of records).
    """
    if want_ts:
        return b"".join(
            [
                encode_sow_record(
                    topic_literal,
                    qid,
                    r[0] if send_key else None,
                    r[1],
                    f"{r[4]}|{r[5]}|" if r[2] else None,
                    format_timestamp_us(r[3]),
                )
                for r in records
            ]
        )
    head = b'{"c":"sow","t":' + topic_literal + b',"qid":' + qid
    dumps = orjson.dumps
    if send_key:
        return b"".join(
            [
                b'%s,"k":%s,"bm":"%d|%d|","l":%d}%s'
                % (head, dumps(r[0]), r[4], r[5], len(r[1]), r[1])
                if r[2]
                else b'%s,"k":%s,"l":%d}%s' % (head, dumps(r[0]), len(r[1]), r[1])
                for r in records
            ]
        )
    return b"".join(
        [
            b'%s,"bm":"%d|%d|","l":%d}%s' % (head, r[4], r[5], len(r[1]), r[1])
            if r[2]
            else b'%s,"l":%d}%s' % (head, len(r[1]), r[1])
            for r in records
        ]
    )
