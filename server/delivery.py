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
        # formatting a timestamp per record costs as much as the filter: only when it is used
        flt = sub.filter
        self._filter_ts = flt is not None and "timestamp" in flt.text.lower()
        self._filter_bm = flt is not None and "bookmark" in flt.text.lower()
        # filters that read message metadata need a view per record (see Filter.select)
        self._filter_meta = flt is not None and any(
            word in flt.text.lower() for word in ("bookmark", "timestamp", "client_name")
        )
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

        A :class:`RecordBatch` (the usual replay read) is walked by its columns, so no
        ``Record`` object is built per message; other sequences go through the same loop
        via small accessors.
        """
        sub = self.sub
        session = self._session
        if session.closed or not records:
            return 0
        if (
            isinstance(records, RecordBatch)
            and sub.pattern is None
            and not sub.want_ts
            and not session.broker.auth.enabled
            and not records.has_corr_ids()
        ):
            return await self._deliver_columns(records)
        topics: Sequence[str]
        bodies: Sequence[bytes]
        if isinstance(records, RecordBatch):
            topics, bodies = records.topics, records.bodies
            bookmark_of = records.bookmark
            time_of = records.timestamp_us
            corr_of = records.corr_id
        else:
            topics = [r.topic for r in records]
            bodies = [r.body for r in records]

            def bookmark_of(i: int) -> str:
                return records[i].bookmark

            def time_of(i: int) -> int:
                return records[i].timestamp_us

            def corr_of(i: int) -> str:
                return records[i].corr_id

        broker = session.broker
        check_read = broker.auth.enabled
        flt = sub.filter
        pattern = sub.pattern
        topic = sub.topic
        want_ts = sub.want_ts
        filter_ts = self._filter_ts
        sids = self._sids
        send = session.send_message
        # the broker's cache, looked up without a method call per message
        topic_json = broker.topic_json
        topic_cache = broker.topic_json_cache
        delivered = 0
        for i in range(len(topics)):
            rec_topic = topics[i]
            if pattern is None:
                if rec_topic != topic:
                    continue
            elif pattern.search(rec_topic) is None:
                continue
            if check_read and not broker.can_read(session, rec_topic):
                continue
            body = bodies[i]
            bm = bookmark_of(i)
            if flt is not None:
                view = MessageView(
                    rec_topic,
                    body,
                    bookmark=bm,
                    timestamp=format_timestamp_us(time_of(i)) if filter_ts else "",
                )
                if not flt.matches(view):
                    continue
            if delivered & 255 == 255 and not session.has_room():
                # a big batch must not overrun the slow-client limit: wait mid-batch
                await session.wait_room()
                if session.closed:
                    return delivered
            tj = topic_cache.get(rec_topic)
            if tj is None:
                tj = topic_json(rec_topic)  # encodes and caches (bounded)
            send(
                encode_publish(
                    tj,
                    sids,
                    body,
                    bm,
                    format_timestamp_us(time_of(i)) if want_ts else None,
                    corr_of(i) or None,
                )
            )
            delivered += 1
        last = len(topics) - 1
        last_seq = records.last_seq if isinstance(records, RecordBatch) else records[-1].seq
        if self.pin is not None:
            self.pin.move(last_seq + 1)
        sub.position = bookmark_of(last)
        sub.position_seq = last_seq
        sub.position_time_us = time_of(last)
        sub.delivered += delivered
        if not session.has_room():
            await session.wait_room()
        return delivered

    async def _deliver_columns(self, batch: RecordBatch) -> int:
        """:meth:`deliver` for the common replay: one exact topic, no timestamp, no
        entitlement or correlation ids to look at. Selects the records first (topic, then
        filter through one reused view), then encodes them in chunks of at most 256
        messages, each queued as one piece, waiting for room between chunks."""
        sub = self.sub
        session = self._session
        topic = sub.topic
        topics = batch.topics
        bodies = batch.bodies
        hashes = batch.pub_hashes
        pseqs = batch.pub_seqs
        times = batch.timestamps_us
        n = len(bodies)
        # a log of one topic (the usual case) needs no per-record comparison
        everyone = topics.count(topic) == n
        sel: Sequence[int] = range(n) if everyone else [i for i in range(n) if topics[i] == topic]
        flt = sub.filter
        if flt is not None and sel and not self._filter_meta:
            sel = flt.select(topic, bodies, sel)
        elif flt is not None and sel:
            view = MessageView(topic, b"")
            rebind = view.rebind
            matches = flt.matches
            filter_bm = self._filter_bm
            filter_ts = self._filter_ts
            kept: list[int] = []
            keep = kept.append
            for i in sel:
                rebind(
                    bodies[i],
                    f"{hashes[i]}|{pseqs[i]}|" if filter_bm else "",
                    format_timestamp_us(times[i]) if filter_ts else "",
                )
                if matches(view):
                    keep(i)
            sel = kept
        delivered = 0
        if sel:
            broker = session.broker
            tj = broker.topic_json_cache.get(topic) or broker.topic_json(topic)
            head = b'{"c":"publish","t":' + tj + b',"sids":' + self._sids + b',"bm":"'
            for start in range(0, len(sel), 256):
                if start and not session.has_room():
                    await session.wait_room()
                if session.closed:
                    return delivered
                part = sel[start : start + 256]
                data = b"".join(
                    [
                        b'%s%d|%d|","l":%d}%s'
                        % (head, hashes[i], pseqs[i], len(bodies[i]), bodies[i])
                        for i in part
                    ]
                )
                session.send_messages(data, len(part))
                delivered += len(part)
        last_seq = batch.last_seq
        if self.pin is not None:
            self.pin.move(last_seq + 1)
        sub.position = f"{hashes[n - 1]}|{pseqs[n - 1]}|"
        sub.position_seq = last_seq
        sub.position_time_us = times[n - 1]
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
