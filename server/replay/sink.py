"""The sinks that feed a subscription from a replay cursor.

:class:`BookmarkSink` feeds a bookmark subscription. It selects what the subscription
takes (topic, entitlement, filter) from each batch the cursor reads, encodes the
deliveries with :func:`spool.server.wire.encode_batch` (a subscription with a select list
gets each record's projection: its filter read the whole record), and waits for room in the client's
outbound buffer between pieces, so a replay paces itself to the consumer instead of ever
tripping the slow-client limit. :class:`CatchUpSink` does the same for a live subscription
that spilled after a burst (server/spills.py) and hands it back to the live path when its
read reaches the end of the log.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Sequence
from itertools import accumulate

from spool.server.backpressure import FeedError
from spool.server.bookmarks import format_timestamp_us
from spool.server.expr import MessageView
from spool.server.ports import Entitlements
from spool.server.subscription import SessionSubscription
from spool.server.txlog.format.batch import RecordBatch
from spool.server.txlog.format.record import Record
from spool.server.txlog.retention.pins import Pin
from spool.server.wire import encode_batch, topic_json

#: deliveries encoded into one queued piece before the client's buffer is checked
_PIECE = 256
#: the most bytes of one piece (fewer deliveries per piece for large messages); a
#: connection with a small limit asks for less (:attr:`~spool.server.ports.Outbound.piece_bytes`)
_PIECE_BYTES = 64 * 1024
#: first guess of a delivery's header bytes (corrected by what encoding shows)
_HEAD_GUESS = 96


def _per_topic(test: Callable[[str], bool]) -> Callable[[str], bool]:
    """``test`` asked once per distinct topic of a batch, not once per record."""
    answers: dict[str, bool] = {}

    def once(topic: str) -> bool:
        ok = answers.get(topic)
        if ok is None:
            ok = answers[topic] = test(topic)
        return ok

    return once


class BookmarkSink:
    """Feeds one bookmark subscription (the ``ReplaySink`` of server/replay).

    Args:
        sub: the subscription (its outbound connection, topic, filter, options).
        entitlements: read entitlements (regex topics are checked per record topic).
    """

    def __init__(self, sub: SessionSubscription, entitlements: Entitlements) -> None:
        self.sub = sub
        self.sub_id = sub.sub_id
        self._auth = entitlements
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
        elif not pattern.test(rec.topic):
            return False
        if self._auth.enabled and not self._auth.can_read(sub.user, rec.topic):
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
        at most 256 per piece and at most 64 KB or a quarter of the connection's limit,
        whichever is less (one delivery larger than that goes alone), waiting for room in
        the client's buffer between pieces so a replay never overruns the slow-client
        limit.
        """
        sub = self.sub
        out = sub.outbound
        if out.closed or not records:
            return 0
        batch = records if isinstance(records, RecordBatch) else RecordBatch.from_records(records)
        sel = self._select(batch)
        literal = topic_json(sub.topic) if sub.pattern is None else None
        want_ts = sub.want_ts
        delivered = 0
        # a piece is at most a quarter of the connection's limit (out.piece_bytes): the
        # buffer is below that when a piece is queued, so paced producers, taking turns
        # at that check, never bring it past half the limit together (backpressure.py)
        budget = max(1, min(_PIECE_BYTES, out.piece_bytes))
        bodies = batch.bodies if sub.select is None else self._project(batch.bodies, sel)
        overhead = _HEAD_GUESS
        # running body bytes of the selected records (C loops, no Python step per message)
        ends = list(accumulate(map(len, map(bodies.__getitem__, sel))))
        start = 0
        while start < len(sel):
            if start and not out.has_room():
                await out.wait_room()
            if out.closed:
                return delivered
            # the deliveries of the next piece, sized by the bodies of the records this
            # subscription takes (a batch's average says nothing when its topics differ):
            # the most that fit the budget with ``overhead`` header bytes each, at least one
            before = ends[start - 1] if start else 0

            def cost(i: int, b: int = before, p: int = overhead, s0: int = start) -> int:
                return ends[i] - b + p * (i - s0 + 1)

            fit = bisect_right(range(start, min(len(sel), start + _PIECE)), budget, key=cost)
            end = start + max(1, fit)
            part = sel[start:end]
            data = encode_batch(
                batch, part, sub.sid_bytes, topic_literal=literal, want_ts=want_ts, bodies=bodies
            )
            while len(data) > budget and len(part) > 1:
                # headers larger than guessed: learn their size, and halve the piece
                heads = len(data) - sum(len(bodies[i]) for i in part)
                overhead = max(overhead, heads // len(part) + 1)
                part = part[: len(part) // 2]
                data = encode_batch(
                    batch,
                    part,
                    sub.sid_bytes,
                    topic_literal=literal,
                    want_ts=want_ts,
                    bodies=bodies,
                )
            out.send_messages(data, len(part))
            delivered += len(part)
            start += len(part)
        n = len(batch)
        last_seq = batch.record(n - 1).seq  # a conflated list need not be contiguous
        if self.pin is not None:
            self.pin.move(last_seq + 1)
        progress = sub.progress
        progress.position = batch.bookmark(n - 1)
        progress.position_seq = last_seq
        progress.position_time_us = batch.timestamp_us(n - 1)
        progress.delivered += delivered
        if not out.has_room():
            await out.wait_room()
        return delivered

    def _project(self, bodies: Sequence[bytes], sel: Sequence[int]) -> list[bytes]:
        """``bodies`` with those of ``sel`` (the records delivered) projected onto the
        subscription's select list."""
        select = self.sub.select
        assert select is not None
        projected = list(bodies)
        for i in sel:
            projected[i] = select.project(bodies[i])
        return projected

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
            takes = _per_topic(sub.pattern.test)
            sel = [i for i in range(n) if takes(topics[i])]
        auth = self._auth
        if auth.enabled and sel:
            user = sub.user
            readable = _per_topic(lambda topic: auth.can_read(user, topic))
            sel = [i for i in sel if readable(topics[i])]
        if sub.filter is not None and sel:
            sel = sub.filter.select(
                topics, batch.bodies, sel, batch.bookmark,
                lambda i: format_timestamp_us(batch.timestamp_us(i)),
            )  # fmt: skip
        return sel

    def caught_up(self) -> None:
        """The cursor reached the durable end (again, after a resume)."""
        progress = self.sub.progress
        if progress.state == "replaying":
            progress.state = "live"
        if self._caught_up:
            return
        self._caught_up = True
        if "completed" in self.sub.acks:
            self.sub.outbound.ack("completed", self.sub.cid, sub_id=self.sub.sub_id)

    def completed(self) -> None:
        """The range end was reached (or ``top_n`` delivered)."""
        sub = self.sub
        if "completed" in sub.acks and not (self._caught_up and sub.bookmark_kind != "range"):
            sub.outbound.ack("completed", sub.cid, sub_id=sub.sub_id)
        sub.progress.state = "live"

    def position(self, bookmark: str) -> None:
        """The periodic position ack (docs/protocol.md "Acks": sparse subscribers advance)."""
        out = self.sub.outbound
        if not out.closed:
            out.ack("persisted", None, sub_id=self.sub.sub_id, bm=bookmark)


class CatchUpSink(BookmarkSink):
    """Feeds a live subscription catching up from the log after a burst (server/spills.py).

    Deliveries are a bookmark sink's (the client cannot tell them from live ones: same
    header, same ``bm``, ``ts`` and ``x``); at the end of the log the subscription goes
    back to the live path instead of announcing a catch-up.

    Args:
        sub: the live subscription.
        entitlements: read entitlements.
        on_caught_up: called with ``sub`` when the read has delivered every record
            appended so far, on the loop, before anything else runs (the cursor calls
            :meth:`caught_up` synchronously at its limit check).
    """

    def __init__(
        self,
        sub: SessionSubscription,
        entitlements: Entitlements,
        on_caught_up: Callable[[SessionSubscription], None],
    ) -> None:
        super().__init__(sub, entitlements)
        self._on_caught_up = on_caught_up

    async def deliver(self, records: Sequence[Record]) -> int:
        """As :meth:`BookmarkSink.deliver`, but waiting for room before the first piece too.

        A catch-up starts when the client's buffer is full (at half the limit), and its
        first piece must not add to that. A bookmark sink cannot wait before its first
        piece: a cursor moved or paused meanwhile counts the chunk as sent; a catch-up
        read is never paused or moved, and it is cancelled only when its subscription
        ends, when nothing is owed any more.
        """
        out = self.sub.outbound
        if not out.closed and not out.has_room():
            await out.wait_room()
        return await super().deliver(records)

    def caught_up(self) -> None:
        """The read reached the end of the log: back to the live path (no ``completed``
        ack: a live subscription never asked for one)."""
        self._on_caught_up(self.sub)

    def completed(self) -> None:
        """A catch-up read has no range end and no ``top_n``, so it never completes; a
        read that claims to has gone wrong, and stopping there would lose messages.

        Raises:
            FeedError: always (the cursor reports it and the connection is closed).
        """
        raise FeedError(f"the catch-up read of {self.sub_id!r} ended before the end of the log")

    def position(self, bookmark: str) -> None:
        """Live subscriptions get no position acks (and a catch-up leaves at its first
        catch-up, before any is due)."""
