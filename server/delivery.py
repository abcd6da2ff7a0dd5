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
        self._topic_cache: dict[str, bytes] = {}
        self._caught_up = False
        # formatting a timestamp per record costs as much as the filter: only when it is used
        flt = sub.filter
        self._filter_ts = flt is not None and "timestamp" in flt.text.lower()
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
        """Send the matching records; returns how many were delivered."""
        sub = self.sub
        session = self._session
        if session.closed:
            return 0
        if isinstance(records, RecordBatch) and not session.broker.auth.enabled:
            return await self._deliver_columns(records)
        flt = sub.filter
        pattern = sub.pattern
        topic = sub.topic
        want_ts = sub.want_ts
        auth = session.broker.auth
        check_read = auth.enabled
        topics = self._topic_cache
        delivered = 0
        for rec in records:
            if pattern is None:
                if rec.topic != topic:
                    continue
            elif pattern.search(rec.topic) is None:
                continue
            if check_read and not session.broker.can_read(session, rec.topic):
                continue
            bm = rec.bookmark
            if flt is not None:
                view = MessageView(
                    rec.topic,
                    rec.body,
                    bookmark=bm,
                    timestamp=format_timestamp_us(rec.timestamp_us) if self._filter_ts else "",
                )
                if not flt.matches(view):
                    continue
            tj = topics.get(rec.topic)
            if tj is None:
                tj = orjson.dumps(rec.topic)
                if len(topics) < 4096:
                    topics[rec.topic] = tj
            if delivered & 255 == 255 and not session.has_room():
                # a big batch must not overrun the slow-client limit: wait mid-batch
                await session.wait_room()
                if session.closed:
                    return delivered
            session.send_message(
                encode_publish(
                    tj,
                    self._sids,
                    rec.body,
                    bm,
                    format_timestamp_us(rec.timestamp_us) if want_ts else None,
                    rec.corr_id or None,
                )
            )
            delivered += 1
        if records:
            last = records[-1]
            if self.pin is not None:
                self.pin.move(last.seq + 1)
            sub.position = last.bookmark
            sub.position_seq = last.seq
            sub.position_time_us = last.timestamp_us
        sub.delivered += delivered
        if not session.has_room():
            await session.wait_room()
        return delivered

    async def _deliver_columns(self, batch: RecordBatch) -> int:
        """:meth:`deliver` over a columnar batch: no Record object per message."""
        sub = self.sub
        session = self._session
        flt = sub.filter
        pattern = sub.pattern
        topic = sub.topic
        want_ts = sub.want_ts
        topics_cache = self._topic_cache
        sids = self._sids
        send = session.send_message
        topics = batch.topics
        bodies = batch.bodies
        filter_ts = self._filter_ts
        delivered = 0
        for i in range(len(batch)):
            rec_topic = topics[i]
            if pattern is None:
                if rec_topic != topic:
                    continue
            elif pattern.search(rec_topic) is None:
                continue
            body = bodies[i]
            bm = batch.bookmark(i)
            if flt is not None:
                view = MessageView(
                    rec_topic,
                    body,
                    bookmark=bm,
                    timestamp=format_timestamp_us(batch.timestamp_us(i)) if filter_ts else "",
                )
                if not flt.matches(view):
                    continue
            tj = topics_cache.get(rec_topic)
            if tj is None:
                tj = orjson.dumps(rec_topic)
                if len(topics_cache) < 4096:
                    topics_cache[rec_topic] = tj
            if delivered & 255 == 255 and not session.has_room():
                await session.wait_room()
                if session.closed:
                    return delivered
            send(
                encode_publish(
                    tj,
                    sids,
                    body,
                    bm,
                    format_timestamp_us(batch.timestamp_us(i)) if want_ts else None,
                    batch.corr_id(i) or None,
                )
            )
            delivered += 1
        if len(batch):
            last = len(batch) - 1
            if self.pin is not None:
                self.pin.move(batch.last_seq + 1)
            sub.position = batch.bookmark(last)
            sub.position_seq = batch.last_seq
            sub.position_time_us = batch.timestamp_us(last)
        sub.delivered += delivered
        if not session.has_room():
            await session.wait_room()
        return delivered

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
