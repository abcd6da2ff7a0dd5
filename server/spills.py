"""Spills: live subscriptions that catch up from the transaction log after a burst.

When a connection cannot take a run of a recorded topic (server/backpressure.py has the
policy), the fan-out hands its subscriptions here instead of disconnecting the client.
Each one gets a catch-up read: a replay cursor (server/replay) over the log *as appended*
(``AppendedSource``, the limit following ``last_seq``: a live subscription receives
messages before the group commit, so its catch-up does too), starting at the first record
it was not given, paced to the consumer by its :class:`~spool.server.replay.sink.CatchUpSink`
(which waits for room in the client's buffer). When the read has delivered every record
appended so far, the sink calls :meth:`Spills.rejoin` synchronously, from the cursor's
limit check, before any other task runs: from the next append on the fan-out feeds the
subscription again. Nothing is lost and nothing repeats at either edge (the module doc of
server/backpressure.py says why).

The read holds a retention pin on the journals it still needs, like a bookmark replay
(journal removal answers 409 meanwhile). A read that fails (a damaged journal) cannot give
the subscription its messages without a gap: the failure is logged and the connection
overflows (``slow client``, :meth:`~spool.server.ports.Outbound.overflow`), which is what a burst
did to it before spilling existed.

Counters for the metrics snapshot: spills, rejoins, seconds spent catching up.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from spool.server.clock import Clock
from spool.server.ports import Entitlements
from spool.server.replay import FunctionLimit, ReplayCursor, ReplayMember, ReplayPlan
from spool.server.replay.sink import CatchUpSink
from spool.server.replay.sources import AppendedSource
from spool.server.stats.source import EventSink
from spool.server.subscription import SessionSubscription
from spool.server.txlog import TransactionLog

#: records a catch-up read takes per batch (most come from the log's in-memory tail)
_BATCH_COUNT: Final = 4096
_BATCH_BYTES: Final = 2 << 20


@dataclass(slots=True, eq=False)
class _CatchUp:
    """The runtime of one subscription's catch-up: its cursor, member and sink."""

    cursor: ReplayCursor
    member: ReplayMember
    sink: CatchUpSink


class Spills:
    """Every catch-up read of an instance. Owned by the event loop.

    Args:
        txlog: the transaction log the reads go over.
        entitlements: read entitlements (regex subscriptions are checked per record).
        events: the event log (spills, rejoins and failures are reported).
        clock: the cursors' clock and the catch-up durations.

    Attributes:
        spills: how many times a subscription spilled.
        rejoins: how many catch-ups ended back on the live path.
    """

    def __init__(
        self, txlog: TransactionLog, entitlements: Entitlements, events: EventSink, clock: Clock
    ) -> None:
        self._txlog = txlog
        self._auth = entitlements
        self._events = events
        self._clock = clock
        self._reads: dict[SessionSubscription, _CatchUp] = {}
        self.spills = 0
        self.rejoins = 0
        self._seconds_done = 0.0

    # -- the fan-out's Spiller ------------------------------------------------------------

    def spill(self, subs: Sequence[SessionSubscription], first_seq: int) -> None:
        """Catch ``subs`` up from the log from record ``first_seq`` (the first one of the
        run their connection could not take)."""
        for sub in subs:
            self._start(sub, first_seq)

    def _start(self, sub: SessionSubscription, first_seq: int) -> None:
        txlog = self._txlog
        sub.progress.feed.spill(first_seq, self._clock.monotonic())
        sub.progress.state = "replaying"
        sink = CatchUpSink(sub, self._auth, self.rejoin)
        member = ReplayMember(sink, ReplayPlan(first_seq))
        sink.pin = txlog.pin(f"catch-up:{sub.client}:{sub.sub_id}", first_seq)
        cursor = ReplayCursor(
            AppendedSource(txlog),
            (member,),
            clock=self._clock,
            limit=FunctionLimit(lambda: txlog.last_seq, txlog.wait_appended),
            batch_count=_BATCH_COUNT,
            batch_bytes=_BATCH_BYTES,
            on_error=self._failed,
            paced=sub.outbound,
        )
        self._reads[sub] = _CatchUp(cursor, member, sink)
        self.spills += 1
        self._events.emit(
            "info", "subscription", "spilled",
            client=sub.client, sub_id=sub.sub_id, topic=sub.topic, from_seq=first_seq,
            behind=txlog.last_seq - first_seq + 1,
        )  # fmt: skip
        cursor.start()

    # -- the end of a catch-up ------------------------------------------------------------

    def rejoin(self, sub: SessionSubscription) -> None:
        """The read of ``sub`` delivered every record appended so far: the fan-out feeds
        it again from the next append (called by its sink, from the cursor's task)."""
        read = self._reads.pop(sub)
        seconds = sub.progress.feed.rejoin(
            read.member.next_seq, self._txlog.last_seq, self._clock.monotonic()
        )
        sub.progress.state = "live"
        self.rejoins += 1
        self._seconds_done += seconds
        self._stop(sub, read)
        self._events.emit(
            "info", "subscription", "caught_up",
            client=sub.client, sub_id=sub.sub_id, seconds=round(seconds, 6),
            at_seq=read.member.next_seq - 1,
        )  # fmt: skip

    def cancel(self, sub: SessionSubscription) -> None:
        """``sub`` ends (unsubscribed, replaced, its connection closed): stop its read."""
        read = self._reads.pop(sub, None)
        if read is None:
            return
        self._seconds_done += sub.progress.feed.end(self._clock.monotonic())
        self._stop(sub, read)

    def _stop(self, sub: SessionSubscription, read: _CatchUp) -> None:
        if read.sink.pin is not None:
            read.sink.pin.release()
            read.sink.pin = None
        read.cursor.remove(sub.sub_id)
        read.cursor.close()

    def _failed(self, cursor: ReplayCursor, exc: Exception) -> None:
        """A read failed: its subscription cannot have its messages without a gap."""
        for sub, read in list(self._reads.items()):
            if read.cursor is not cursor:
                continue
            self._events.emit(
                "error", "subscription", "catch_up_failed",
                client=sub.client, sub_id=sub.sub_id, error=repr(exc),
            )  # fmt: skip
            self.cancel(sub)
            sub.outbound.overflow(0)

    # -- counters -------------------------------------------------------------------------

    @property
    def catching_up(self) -> int:
        """Subscriptions reading the log now."""
        return len(self._reads)

    def seconds(self) -> float:
        """Seconds spent catching up, by every subscription, finished or not (monotonic)."""
        now = self._clock.monotonic()
        ongoing = sum(now - sub.progress.feed.since for sub in self._reads)
        return self._seconds_done + ongoing
