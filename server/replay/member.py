"""One subscription inside a replay cursor: its position, range, pace, conflation, quota.

A member holds everything that belongs to the subscription rather than to the loop that
reads the log, which is what lets members move between cursors (pause one out of a group,
resume several together) with their position intact.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from spool.server.bookmarks import BookmarkSpec
from spool.server.protocol.options import SubscribeOptions
from spool.server.replay.conflation import Conflator
from spool.server.replay.errors import ReplayGapError
from spool.server.replay.pacing import RatePacer
from spool.server.replay.plan import ReplayPlan, Verdict, plan_replay
from spool.server.replay.ports import ReplaySink, ReplaySource
from spool.server.txlog.format.batch import RecordBatch
from spool.server.txlog.format.record import MESSAGE_KINDS, Record


class ReplayMember:
    """One subscription's state inside a cursor; movable between cursors.

    Records flow ``ingest`` (skip what is behind the position, range end, time gate, record
    kinds, conflation) into an outbox, which the cursor drains to the sink with pacing and
    the ``top_n`` quota. :attr:`next_seq` counts what was ingested, so a cursor re-reading
    after a pause never hands a record to the sink twice.
    """

    def __init__(
        self,
        sink: ReplaySink,
        plan: ReplayPlan,
        *,
        top_n: int | None = None,
        pacer: RatePacer | None = None,
        conflator: Conflator | None = None,
        kinds: frozenset[int] = MESSAGE_KINDS,
    ) -> None:
        self.sink = sink
        self.next_seq = plan.start_seq
        self.pacer = pacer
        self.remaining = top_n
        self.delivered = 0
        self.caught_up = False
        self.finished = False
        self._not_before_us = plan.not_before_us
        self._stop = plan.stop
        self._conflator = conflator
        self._kinds = kinds
        # a list, or a whole RecordBatch handed over as it was read (no per-record objects)
        self._outbox: Sequence[Record] = []
        self._out_pos = 0
        self._stopping = False
        self.last_position: str | None = None
        self.next_position_at = 0.0
        #: The cursor feeding this member (None while it is between cursors). Only its
        #: identity matters (a cursor feeds the members it owns), so it is typed as an
        #: object: the member layer sits below the cursor and does not import it.
        self.owner: object | None = None

    @property
    def sub_id(self) -> str:
        return self.sink.sub_id

    @property
    def stop_bound(self) -> int | None:
        """The last seq this member reads, when known (None: open-ended)."""
        return None if self._stop is None else self._stop.read_bound

    @property
    def ranged(self) -> bool:
        return self._stop is not None

    @property
    def has_output(self) -> bool:
        return self._out_pos < len(self._outbox)

    @property
    def holding(self) -> bool:
        """Whether it holds records the client has not had (outbox or conflation)."""
        return self.has_output or (self._conflator is not None and self._conflator.pending > 0)

    @property
    def stopping(self) -> bool:
        return self._stopping

    def _editable(self) -> list[Record]:
        """The outbox as a list, to append to."""
        if not isinstance(self._outbox, list):
            self._outbox = list(self._outbox[self._out_pos :])
            self._out_pos = 0
        return self._outbox

    def output(self) -> tuple[Sequence[Record], int]:
        """The outbox and the index of its first undelivered record."""
        return self._outbox, self._out_pos

    def hand_over(self, count: int) -> None:
        """The next ``count`` outbox records go to the sink now (before it is awaited)."""
        self._out_pos += count
        if self._out_pos >= len(self._outbox):
            self._outbox = []
            self._out_pos = 0

    def account(self, delivered: int) -> None:
        """The sink reported ``delivered`` messages sent."""
        self.delivered += delivered
        if self.remaining is not None:
            self.remaining -= delivered

    def ingest(self, records: Sequence[Record]) -> None:
        """Take contiguous records, in log order, starting at or before :attr:`next_seq`."""
        if self.finished or self._stopping or not records:
            return
        skip = self.next_seq - records[0].seq
        if skip < 0:
            raise ReplayGapError(
                f"{self.sub_id}: records start at {records[0].seq}, expected {self.next_seq}"
            )
        if skip >= len(records):
            return
        view = records[skip:] if skip else records
        if self._stop is None and self._not_before_us is None and self._conflator is None:
            kinds = self._kinds
            if isinstance(view, RecordBatch):
                if view.kinds() <= kinds and not self.has_output:
                    self._outbox = view  # handed to the sink whole, columns and all
                    self._out_pos = 0
                else:
                    self._editable().extend(rec for rec in view if rec.kind in kinds)
            elif all(rec.kind in kinds for rec in view):
                self._editable().extend(view)
            else:
                self._editable().extend(rec for rec in view if rec.kind in kinds)
            self.next_seq = view[-1].seq + 1
            return
        self._ingest_each(view)

    def _ingest_each(self, view: Sequence[Record]) -> None:
        stop, conflator, kinds = self._stop, self._conflator, self._kinds
        for rec in view:
            verdict: Verdict = "pass" if stop is None else stop.verdict(rec)
            if verdict == "beyond":
                self._begin_stop()
                return
            self.next_seq = rec.seq + 1
            gate = self._not_before_us
            if gate is not None and rec.timestamp_us >= gate:
                self._not_before_us = gate = None
            if gate is None and rec.kind in kinds:
                if conflator is None:
                    self._editable().append(rec)
                else:
                    self._editable().extend(conflator.push(rec))
            if verdict == "last":
                self._begin_stop()
                return

    def tick(self, now_us: int, source: ReplaySource, at_head: bool) -> None:
        """Time passed: close conflation windows (only when the member has read all the log
        has, else the records themselves are its timeline) and settle a time end."""
        if self.finished or self._stopping:
            return
        if at_head and self._conflator is not None:
            self._editable().extend(self._conflator.advance(now_us))
        if self._stop is not None:
            self._stop.on_clock(now_us, source)
            if self._stop.reached(self.next_seq):
                self._begin_stop()

    def deadline_us(self, at_head: bool) -> int | None:
        """The next wall-clock moment :meth:`tick` has work to do."""
        if self.finished or self._stopping:
            return None
        deadlines: list[int] = []
        if at_head and self._conflator is not None:
            close = self._conflator.next_close_us
            if close is not None:
                deadlines.append(close)
        if self._stop is not None and (deadline := self._stop.deadline_us) is not None:
            deadlines.append(deadline)
        return min(deadlines) if deadlines else None

    def _begin_stop(self) -> None:
        self._stopping = True
        if self._conflator is not None:
            self._editable().extend(self._conflator.flush())

    def finish(self) -> None:
        """Range end or quota reached: tell the sink; deliver nothing more."""
        if self.finished:
            return
        self.finished = True
        self._outbox = []
        self._out_pos = 0
        self.sink.completed()

    def drop(self) -> None:
        """Unsubscribed: stop without telling the sink anything."""
        self.finished = True
        self.owner = None
        self._outbox = []
        self._out_pos = 0


def build_member(
    sink: ReplaySink,
    spec: BookmarkSpec,
    options: SubscribeOptions,
    source: ReplaySource,
    *,
    accept: Callable[[Record], bool] | None = None,
    kinds: frozenset[int] = MESSAGE_KINDS,
) -> ReplayMember:
    """A member for a subscribe command: resolves ``spec`` and wires the options.

    Args:
        accept: the subscription's topic/filter test, used before conflation (the sink
            still filters what it is given).

    Raises:
        BookmarkNotFound: under ``bookmark_not_found=fail``.
    """
    plan = plan_replay(spec, source, options.bookmark_not_found)
    pacer = RatePacer(options.rate, options.rate_max_gap) if options.rate is not None else None
    conflator = (
        Conflator(options.conflation, options.conflation_key, accept)
        if options.conflation is not None
        else None
    )
    return ReplayMember(
        sink, plan, top_n=options.top_n, pacer=pacer, conflator=conflator, kinds=kinds
    )
