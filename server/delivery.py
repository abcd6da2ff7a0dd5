"""Building outbound ``publish`` messages, and the sink that feeds a bookmark subscription.

Delivered messages are the hottest bytes in the broker, so their headers are assembled from
pre-encoded pieces (the topic and subscription ids are JSON-encoded once) instead of going
through a JSON encoder per message. The layout matches PROTOCOL.md::

    {"c":"publish","t":TOPIC,"sids":"a,b","bm":"H|S|","ts":"...","x":"...","l":N}BODY
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import orjson

from server.bookmarks import format_timestamp_us
from server.expr import MessageView
from server.txlog.batch import RecordBatch

if TYPE_CHECKING:
    from server.session import Session
    from server.subscription import Subscription
    from server.txlog.pins import Pin
    from server.txlog.record import Record


def encode_publish(
    topic_json: bytes,
    sids_json: bytes,
    body: bytes,
    bookmark: str | None = None,
    ts: str | None = None,
    corr_id: str | None = None,
) -> bytes:
    """One outbound ``publish`` message (header + body)."""
    head = b'{"c":"publish","t":' + topic_json + b',"sids":' + sids_json
    if bookmark:
        head += b',"bm":"' + bookmark.encode() + b'"'
    if ts:
        head += b',"ts":"' + ts.encode() + b'"'
    if corr_id:
        head += b',"x":' + orjson.dumps(corr_id)
    return head + b',"l":%d}' % len(body) + body


class BookmarkSink:
    """Feeds one bookmark subscription from its replay cursor (the ReplaySink of replay.py).

    It applies the subscription's filter, builds messages and waits for room in the
    session's outbound buffer, so a replay paces itself to the consumer instead of ever
    tripping the slow-client limit.
    """

    def __init__(self, sub: Subscription, on_done: object = None) -> None:
        self.sub = sub
        self.sub_id = sub.sub_id
        self._session: Session = sub.session
        self._sids = orjson.dumps(sub.sub_id)
        self._caught_up = False
        flt = sub.filter
        # formatting a timestamp per record costs as much as the filter: only when read
        self._filter_ts = flt is not None and "TIMESTAMP" in flt.functions
        #: retention pin on the journals this replay still needs (moved as it advances)
        self.pin: Pin | None = None

    def accepts(self, rec: Record) -> bool:
        """Topic, entitlement and filter test of one record (used before conflation)."""
        sub = self.sub
        pattern = sub.pattern
        if pattern is None:
            if rec.topic != sub.topic:
                return False
        elif pattern.search(rec.topic) is None:
            return False
        session = self._session
        if session.broker.auth.enabled and not session.broker.can_read(session, rec.topic):
            return False
        flt = sub.filter
        if flt is None:
            return True
        return flt.matches(
            MessageView(
                rec.topic,
                rec.body,
                bookmark=rec.bookmark,
                timestamp=format_timestamp_us(rec.timestamp_us) if self._filter_ts else "",
            )
        )

    async def deliver(self, records: Sequence[Record]) -> int:
        """Send the matching records; returns how many were delivered.

        Works on a :class:`RecordBatch` (the usual replay read, walked by its columns
        with no ``Record`` per message; other sequences are wrapped in one): first the
        records this subscription takes are selected, then they are encoded and queued,
        at most 256 per piece, waiting for room in the client's buffer between pieces so
        a replay never overruns the slow-client limit.
        """
        session = self._session
        if session.closed or not records:
            return 0
        batch = records if isinstance(records, RecordBatch) else RecordBatch.from_records(records)
        sel = self._select(batch)
        delivered = 0
        for start in range(0, len(sel), 256):
            if start and not session.has_room():
                await session.wait_room()
            if session.closed:
                return delivered
            part = sel[start : start + 256]
            session.send_messages(self._encode(batch, part), len(part))
            delivered += len(part)
        sub = self.sub
        n = len(batch)
        last_seq = batch.record(n - 1).seq  # a conflated list need not be contiguous
        if self.pin is not None:
            self.pin.move(last_seq + 1)
        sub.position = batch.bookmark(n - 1)
        sub.position_seq = last_seq
        sub.position_time_us = batch.timestamp_us(n - 1)
        sub.delivered += delivered
        if not session.has_room():
            await session.wait_room()
        return delivered

    def _select(self, batch: RecordBatch) -> Sequence[int]:
        """Indices of the records this subscription takes: topic, entitlement, filter."""
        sub = self.sub
        topics = batch.topics
        n = len(topics)
        sel: Sequence[int]
        if sub.pattern is None:
            topic = sub.topic
            # a log of one topic (the usual case) needs no per-record comparison
            sel = (
                range(n)
                if topics.count(topic) == n
                else [i for i in range(n) if topics[i] == topic]
            )
        else:
            search = sub.pattern.search
            sel = [i for i in range(n) if search(topics[i]) is not None]
        session = self._session
        broker = session.broker
        if broker.auth.enabled and sel:
            allowed: dict[str, bool] = {}

            def readable(topic: str) -> bool:
                ok = allowed.get(topic)
                if ok is None:
                    ok = allowed[topic] = broker.can_read(session, topic)
                return ok

            sel = [i for i in sel if readable(topics[i])]
        if sub.filter is not None and sel:
            sel = sub.filter.select(
                topics, batch.bodies, sel, batch.bookmark,
                lambda i: format_timestamp_us(batch.timestamp_us(i)),
            )  # fmt: skip
        return sel

    def _encode(self, batch: RecordBatch, part: Sequence[int]) -> bytes:
        """The ``publish`` messages of records ``part`` of ``batch``, joined."""
        bodies = batch.bodies
        hashes = batch.pub_hashes
        pseqs = batch.pub_seqs
        broker = self._session.broker
        sub = self.sub
        if sub.pattern is None and not sub.want_ts and not batch.has_corr_ids():
            # one topic, nothing per record but the bookmark: one format per message
            tj = broker.topic_json_cache.get(sub.topic) or broker.topic_json(sub.topic)
            head = b'{"c":"publish","t":' + tj + b',"sids":' + self._sids + b',"bm":"'
            return b"".join(
                [
                    b'%s%d|%d|","l":%d}%s' % (head, hashes[i], pseqs[i], len(bodies[i]), bodies[i])
                    for i in part
                ]
            )
        topics = batch.topics
        want_ts = sub.want_ts
        return b"".join(
            [
                encode_publish(
                    broker.topic_json_cache.get(topics[i]) or broker.topic_json(topics[i]),
                    self._sids,
                    bodies[i],
                    f"{hashes[i]}|{pseqs[i]}|",
                    format_timestamp_us(batch.timestamp_us(i)) if want_ts else None,
                    batch.corr_id(i) or None,
                )
                for i in part
            ]
        )

    def caught_up(self) -> None:
        """The cursor reached the durable end (again, after a resume)."""
        if self.sub.state == "replaying":
            self.sub.state = "live"
        if self._caught_up:
            return
        self._caught_up = True
        if "completed" in self.sub.acks:
            self._session.ack("completed", self.sub.cid, sub_id=self.sub.sub_id)

    def completed(self) -> None:
        if "completed" in self.sub.acks and not (self._caught_up and self._is_open_ended()):
            self._session.ack("completed", self.sub.cid, sub_id=self.sub.sub_id)
        self.sub.state = "live"

    def _is_open_ended(self) -> bool:
        return self.sub.bookmark_kind != "range"

    def position(self, bookmark: str) -> None:
        if not self._session.closed:
            self._session.ack("persisted", None, sub_id=self.sub.sub_id, bm=bookmark)
