"""Bookmark-subscription cursors: replay, then live, from the transaction log.

A bookmark subscription is fed by a cursor over the transaction log for its **whole
life**: it replays from its start point, and once it has read everything the log holds it
waits for the next durable record (``ReplaySource.wait_durable``) and keeps reading. The
"cut-over to live" is therefore just the cursor catching up: it cannot gap or duplicate,
however fast publishers publish, because there is one ordered source and one position.
Memory stays bounded (one batch per cursor) and a slow reader is paced by its sink's
``deliver()``, which waits while the client's outbound buffer is full, so a replay never
trips the slow-client limit.

Layers (pure parts first, each usable and tested alone)::

    plan_replay / resolve_start   bookmark spec + log indexes -> start seq, time gate, stop
    StopRule                      where a range ends (bookmarks, lists, times, future ends)
    RatePacer                     msgs/s, bytes/s, or NX the original pace (+ rate_max_gap)
    Conflator                     conflation windows on the replay timeline
    ReplayMember                  one subscription: position, range, pace, conflation, top_n
    ReplayCursor                  one loop reading the log and feeding one or more members
    ReplayGroup                   the engine's entry point: a cursor built from a bm + options

A cursor with several members is a *group*: paused subscriptions resumed together share one
cursor (:func:`resume_together`, or moving members between cursors) so their messages
reach the client in log order.

Time comes from an injected :class:`~server.clock.Clock`: pacing, conflation windows, future
range ends and the periodic position acks all use it, so tests drive a ``VirtualClock``.
Decisions where PROTOCOL.md is silent are written down in docs/bookmarks.md.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Hashable, Iterable, Sequence
from typing import Final, Literal, Protocol, TypeAlias

import orjson

from server.bookmarks import (
    BookmarkList,
    BookmarkPoint,
    BookmarkSpec,
    Endpoint,
    Epoch,
    Now,
    Range,
    TimePoint,
)
from server.clock import SYSTEM_CLOCK, Clock, time_us
from server.protocol.errors import BookmarkNotFound, InvalidBookmark, SpoolError, SubIdNotFound
from server.protocol.options import NotFoundPolicy, Rate, SubscribeOptions
from server.txlog.batch import RecordBatch
from server.txlog.record import Record, RecordKind

log = logging.getLogger(__name__)

#: Record kinds a bookmark subscription delivers by default (queue bookkeeping is not data).
MESSAGE_KINDS: Final = frozenset({RecordKind.PUBLISH, RecordKind.DELTA_PUBLISH})


class ReplayGapError(SpoolError):
    """The source broke its contract (a batch that skips or repeats sequence numbers).

    The cursor stops rather than deliver a gap or a duplicate; the engine logs it and ends
    the subscription.
    """


# -- the interfaces the cursor is driven through ---------------------------------------


class ReplaySource(Protocol):
    """What a cursor reads; the transaction log implements it.

    ``first_seq`` is the oldest record still held (``durable_seq + 1`` when none is);
    ``seq_for_time(t)`` is the first record stamped at or after ``t`` (one past the newest
    *appended* record when there is none yet); ``read_batch`` returns contiguous records
    from ``from_seq`` (from ``first_seq`` if that is later; never past ``upto_seq``; it may
    serve durable records only, then a ``live`` cursor waits for them);
    ``wait_durable(seq)`` returns once ``durable_seq >= seq``.
    """

    @property
    def durable_seq(self) -> int: ...

    @property
    def first_seq(self) -> int: ...

    def seq_for_bookmark(self, pub_hash: int, pub_seq: int) -> int | None: ...

    def seq_for_time(self, timestamp_us: int) -> int: ...

    async def read_batch(
        self,
        from_seq: int,
        *,
        max_count: int = 1000,
        max_bytes: int = 1 << 20,
        upto_seq: int | None = None,
    ) -> list[Record]: ...

    async def wait_durable(self, seq: int) -> None: ...


class ReplaySink(Protocol):
    """Where a cursor delivers; the engine implements one per subscription."""

    sub_id: str

    async def deliver(self, records: Sequence[Record]) -> int:
        """Filter and send ``records``; return how many were sent (``top_n`` counts these).
        Awaits while the client's outbound buffer is above its watermark."""
        ...

    def caught_up(self) -> None:
        """An open-ended subscription first reached the live point (``completed`` ack)."""
        ...

    def completed(self) -> None:
        """Range end or ``top_n`` reached: ``completed`` ack; nothing more is delivered."""
        ...

    def position(self, bookmark: str) -> None:
        """Periodic persisted ack carrying ``bm`` = the latest durable position."""
        ...


class Horizon(Protocol):
    """How far a cursor may read: the durability level its subscription asked for.

    The default is :class:`DurableHorizon` (locally persisted). The engine supplies one that
    follows appends for ``live`` and one that follows every sync replication destination
    for ``fully_durable`` (with none configured, that is the durable horizon).
    """

    @property
    def seq(self) -> int: ...

    async def wait(self, seq: int) -> None:
        """Return once :attr:`seq` is at least ``seq``."""
        ...


class DurableHorizon:
    """Records the log has fsynced: the default delivery point."""

    def __init__(self, source: ReplaySource) -> None:
        self._source = source

    @property
    def seq(self) -> int:
        return self._source.durable_seq

    async def wait(self, seq: int) -> None:
        await self._source.wait_durable(seq)


class FunctionHorizon:
    """A horizon from two callables, for the engine's ``live`` (appended) and
    ``fully_durable`` (replicated) delivery points, e.g.
    ``FunctionHorizon(lambda: txlog.last_seq, txlog.wait_appended)``."""

    def __init__(self, seq: Callable[[], int], wait: Callable[[int], Awaitable[None]]) -> None:
        self._seq = seq
        self._wait = wait

    @property
    def seq(self) -> int:
        return self._seq()

    async def wait(self, seq: int) -> None:
        await self._wait(seq)


class _LowestHorizon:
    """A group whose members asked for different durability waits for the strictest."""

    def __init__(self, horizons: Sequence[Horizon]) -> None:
        self._horizons = tuple(horizons)

    @property
    def seq(self) -> int:
        return min(h.seq for h in self._horizons)

    async def wait(self, seq: int) -> None:
        for horizon in self._horizons:
            await horizon.wait(seq)


# -- start and stop points ----------------------------------------------------------


Verdict: TypeAlias = Literal["pass", "last", "beyond"]


class StopRule:
    """Where a range ends, for records met in log order (pure, but stateful).

    The end is either a sequence bound known up front (a bookmark found in the log, NOW),
    bookmarks not in the log yet (reached when their publisher's sequence is met, so a
    bookmark that never made it into this log still ends the range at the next message of
    that publisher), or a moment (reached at the first record stamped past it, or when the
    clock passes it: then :meth:`on_clock` fixes the bound from the log's time index).
    A list ends at the newest of its bookmarks.
    """

    __slots__ = ("_inclusive", "_last_seq", "_pending", "_stop_at_us", "_time_bound")

    def __init__(
        self,
        *,
        last_seq: int | None = None,
        pending: Iterable[BookmarkPoint] = (),
        inclusive: bool = True,
        stop_at_us: int | None = None,
    ) -> None:
        """
        Args:
            last_seq: the last seq to deliver, as far as found bookmarks say.
            pending: end bookmarks not found in the log yet.
            inclusive: whether a pending bookmark met later is itself delivered.
            stop_at_us: records stamped at or after this are past a time end.
        """
        self._last_seq = last_seq
        self._pending: dict[int, int] = {}
        for point in pending:
            known = self._pending.get(point.pub_hash, 0)
            self._pending[point.pub_hash] = max(known, point.pub_seq)
        self._inclusive = inclusive
        self._stop_at_us = stop_at_us
        self._time_bound: int | None = None

    @property
    def bound(self) -> int | None:
        """The last seq to deliver, once known."""
        if self._stop_at_us is not None:
            return self._time_bound
        return None if self._pending else self._last_seq

    @property
    def deadline_us(self) -> int | None:
        """Wall time at which :meth:`on_clock` settles a time end still open."""
        if self._stop_at_us is not None and self._time_bound is None:
            return self._stop_at_us
        return None

    def verdict(self, rec: Record) -> Verdict:
        """``pass``: deliver and go on; ``last``: deliver, then stop; ``beyond``: stop
        before it. Idempotent for a record met again (after a pause)."""
        if self._pending:
            wanted = self._pending.get(rec.pub_hash)
            if wanted is not None and rec.pub_seq >= wanted:
                del self._pending[rec.pub_hash]
                last = rec.seq if rec.pub_seq == wanted and self._inclusive else rec.seq - 1
                self._last_seq = last if self._last_seq is None else max(self._last_seq, last)
        elif (
            self._stop_at_us is not None
            and self._time_bound is None
            and rec.timestamp_us >= self._stop_at_us
        ):
            self._time_bound = rec.seq - 1
        bound = self.bound
        if bound is None or rec.seq < bound:
            return "pass"
        return "last" if rec.seq == bound else "beyond"

    def on_clock(self, now_us: int, source: ReplaySource) -> None:
        """The clock passed a time end: every record up to it is in the log (or on its
        way to disk), so the bound is the log's answer for that moment."""
        if self._stop_at_us is not None and self._time_bound is None and now_us >= self._stop_at_us:
            self._time_bound = source.seq_for_time(self._stop_at_us) - 1

    def reached(self, next_seq: int) -> bool:
        """Whether a member about to read ``next_seq`` is past the end."""
        bound = self.bound
        return bound is not None and next_seq > bound


@dataclasses.dataclass(slots=True)
class ReplayPlan:
    """A resolved bookmark spec.

    Attributes:
        start_seq: the first seq to look at.
        not_before_us: records stamped before this are skipped until the first one that
            is not (a start time still in the future when subscribing).
        stop: the end of a range, or None for an open-ended subscription.
    """

    start_seq: int
    not_before_us: int | None = None
    stop: StopRule | None = None


def _not_found(what: str, source: ReplaySource, policy: NotFoundPolicy) -> int:
    if policy == "fail":
        raise BookmarkNotFound(f"{what} is not in this instance's transaction log")
    return source.first_seq if policy == "epoch" else source.durable_seq + 1


def _resolve_start_point(
    point: Endpoint, inclusive: bool, source: ReplaySource, policy: NotFoundPolicy
) -> tuple[int, int | None]:
    """(start seq, time gate) of one start endpoint."""
    match point:
        case Epoch():
            return source.first_seq, None
        case Now():
            return source.durable_seq + 1, None
        case BookmarkPoint(pub_hash=h, pub_seq=s):
            seq = source.seq_for_bookmark(h, s)
            if seq is None:
                return _not_found(f"bookmark {point}", source, policy), None
            return (seq if inclusive else seq + 1), None
        case BookmarkList(points=points):
            found = [
                seq
                for p in points
                if (seq := source.seq_for_bookmark(p.pub_hash, p.pub_seq)) is not None
            ]
            if not found:
                return _not_found("no bookmark of the list", source, policy), None
            return (min(found) if inclusive else min(found) + 1), None
        case TimePoint(timestamp_us=us):
            gate = us if inclusive else us + 1
            return source.seq_for_time(gate), gate
    raise InvalidBookmark(f"not a start point: {point!r}")


def _resolve_stop(spec: Range, source: ReplaySource, policy: NotFoundPolicy) -> StopRule:
    end, inclusive = spec.end, spec.end_inclusive
    match end:
        case Now():
            return StopRule(last_seq=source.durable_seq)
        case TimePoint(timestamp_us=us):
            return StopRule(stop_at_us=us + 1 if inclusive else us)
        case BookmarkPoint() | BookmarkList():
            points = end.points if isinstance(end, BookmarkList) else (end,)
            found: list[int] = []
            pending: list[BookmarkPoint] = []
            for p in points:
                seq = source.seq_for_bookmark(p.pub_hash, p.pub_seq)
                if seq is None:
                    pending.append(p)
                else:
                    found.append(seq)
            if pending and policy == "fail":
                raise BookmarkNotFound(f"end bookmark {pending[0]} is not in the log")
            last = (max(found) if inclusive else max(found) - 1) if found else None
            return StopRule(last_seq=last, pending=pending, inclusive=inclusive)
    raise InvalidBookmark(f"not an end point: {end!r}")


def plan_replay(
    spec: BookmarkSpec, source: ReplaySource, not_found_policy: NotFoundPolicy = "now"
) -> ReplayPlan:
    """Resolve a parsed ``bm`` against the log.

    A plain bookmark or list is a resume point: delivery starts *after* it (the client has
    processed it); a range's ``[`` includes its start. A moment starts at the first record
    stamped at or after it (before the log: EPOCH; in the future: waits for it).

    Raises:
        BookmarkNotFound: a bookmark is unknown and the policy is ``fail``.
    """
    if isinstance(spec, Range):
        start, gate = _resolve_start_point(
            spec.start, spec.start_inclusive, source, not_found_policy
        )
        stop = _resolve_stop(spec, source, not_found_policy)
    else:
        start, gate = _resolve_start_point(
            spec, isinstance(spec, TimePoint), source, not_found_policy
        )
        stop = None
    return ReplayPlan(max(start, source.first_seq), gate, stop)


def resolve_start(
    spec: BookmarkSpec, source: ReplaySource, not_found_policy: NotFoundPolicy = "now"
) -> int:
    """The first seq a subscription with this ``bm`` looks at (see :func:`plan_replay`)."""
    return plan_replay(spec, source, not_found_policy).start_seq


# -- pacing -------------------------------------------------------------------------

#: Token buckets hold this many seconds of rate, so fast rates need not sleep per message.
BURST_WINDOW: Final = 0.01
#: A time-scaled replay that fell behind by more than this re-anchors instead of bursting.
MAX_LAG: Final = 0.1
_EPS: Final = 1e-9


class RatePacer:
    """Decides how many of the next records may go now, or how long to wait (pure).

    - ``msgs``: a token bucket of messages (capacity ``max(1, N * BURST_WINDOW)``), charged
      for the messages the sink actually delivered, so a filter does not slow the pace.
    - ``bytes``: a token bucket of body bytes that may go into debt, so a message larger
      than the bucket still goes, and the next waits until the debt is paid. When only part
      of a chunk matched, the largest bodies are charged: the rate is never exceeded.
    - ``multiplier``: each record is due ``gap / N`` after the previous one, where ``gap``
      is the difference of their original timestamps; ``rate_max_gap`` caps one wait. A
      replay more than :data:`MAX_LAG` behind schedule (slow consumer) re-anchors to now
      instead of bursting to catch up.

    Use: ``count, wait = take(records, start, now)``; if ``count`` deliver
    ``records[start:start+k]`` for some ``k <= count`` then ``charge(records, start, k,
    delivered)``; else sleep ``wait`` and ask again.
    """

    def __init__(self, rate: Rate, max_gap: float | None = None) -> None:
        if rate.value <= 0:
            raise ValueError("a rate must be positive")
        self.rate = rate
        self._value = rate.value
        self._max_gap = max_gap
        burst = rate.value * BURST_WINDOW
        self._capacity = max(1.0, burst) if rate.kind == "msgs" else burst
        # A message bucket starts full; a byte bucket starts at a zero balance (the first
        # message goes at once, the next when its debt is paid).
        self._tokens = self._capacity if rate.kind == "msgs" else 0.0
        self._updated: float | None = None
        self._prev_ts: int | None = None
        self._prev_due = 0.0
        self._head: tuple[int, float] | None = None
        self._planned: list[float] = []

    def take(self, records: Sequence[Record], start: int, now: float) -> tuple[int, float]:
        """(how many of ``records[start:]`` may go now, seconds to wait when none may)."""
        if start >= len(records):
            return 0, 0.0
        if self.rate.kind == "multiplier":
            return self._take_timeline(records, start, now)
        self._refill(now)
        if self.rate.kind == "msgs":
            if self._tokens + _EPS >= 1.0:
                return min(len(records) - start, int(self._tokens + _EPS)), 0.0
            return 0, (1.0 - self._tokens) / self._value
        if self._tokens + _EPS < 0:
            return 0, -self._tokens / self._value
        count, total = 0, 0
        for index in range(start, len(records)):
            total += len(records[index].body)
            if count and total > self._tokens:
                break
            count += 1
        return count, 0.0

    def charge(self, records: Sequence[Record], start: int, count: int, delivered: int) -> None:
        """Account for ``records[start:start+count]`` handed to the sink, of which
        ``delivered`` were sent."""
        if count <= 0:
            return
        kind = self.rate.kind
        if kind == "msgs":
            self._tokens -= delivered
        elif kind == "bytes":
            sizes = [len(records[i].body) for i in range(start, start + count)]
            if delivered >= count:
                self._tokens -= sum(sizes)
            elif delivered > 0:
                self._tokens -= sum(sorted(sizes, reverse=True)[:delivered])
        else:
            self._prev_ts = records[start + count - 1].timestamp_us
            self._prev_due = self._planned[count - 1]
            self._head = None

    def _refill(self, now: float) -> None:
        if self._updated is not None and now > self._updated:
            self._tokens = min(self._capacity, self._tokens + (now - self._updated) * self._value)
        if self._updated is None or now > self._updated:
            self._updated = now

    def _take_timeline(
        self, records: Sequence[Record], start: int, now: float
    ) -> tuple[int, float]:
        planned: list[float] = []
        prev_ts, prev_due = self._prev_ts, self._prev_due
        for index in range(start, len(records)):
            rec = records[index]
            if index == start and self._head is not None and self._head[0] == rec.seq:
                due = self._head[1]
            elif prev_ts is None:
                due = now
            else:
                gap = max(0, rec.timestamp_us - prev_ts) / 1e6 / self._value
                if self._max_gap is not None:
                    gap = min(gap, self._max_gap)
                due = max(prev_due, now - MAX_LAG) + gap
            if due > now + _EPS:
                if not planned:
                    self._head = (rec.seq, due)
                    return 0, due - now
                break
            planned.append(due)
            prev_ts, prev_due = rec.timestamp_us, due
        self._planned = planned
        return len(planned), 0.0


# -- conflation ---------------------------------------------------------------------


@dataclasses.dataclass(slots=True, eq=False)
class _Window:
    key: Hashable
    first: Record
    last: Record
    close_us: int
    closed: bool = False

    def result(self) -> Record:
        """The last body, under the first message's bookmark and log position."""
        if self.first is self.last:
            return self.first
        return dataclasses.replace(
            self.last,
            seq=self.first.seq,
            pub_hash=self.first.pub_hash,
            pub_seq=self.first.pub_seq,
        )


class Conflator:
    """Conflation on the replay timeline (pure).

    The first record of a key opens a window ``[ts, ts + interval)`` on the records'
    timestamps; later records of that key inside it replace its body. When the timeline
    passes the window's end (a later record, or the wall clock once the cursor is live),
    it emits one record: the **last** body (and its ``ts``), carrying the **first**
    record's bookmark and seq, so a client's resume point never skips a message it has
    not seen. Output keeps log order of the first records: a record that conflates with
    nothing waits behind earlier open windows.

    The key is the topic plus the values at the ``conflation_key`` paths (``/a/b``, list
    indexes allowed) of the JSON body; without paths it is the topic plus the record's SOW
    key. A record whose key cannot be read (a missing field, a body that is not JSON, no
    SOW key) is delivered unconflated. ``accept`` (the subscription's topic and filter)
    runs before conflation, so a window only holds messages the subscriber wants.
    """

    def __init__(
        self,
        interval: float,
        keys: Sequence[str] = (),
        accept: Callable[[Record], bool] | None = None,
    ) -> None:
        self._interval_us = max(1, round(interval * 1_000_000))
        self._paths = tuple(tuple(p.strip("/").split("/")) for p in keys)
        self._accept = accept
        self._open: dict[Hashable, _Window] = {}
        self._queue: deque[_Window | Record] = deque()
        self._timeline_us: int | None = None

    @property
    def pending(self) -> int:
        """Windows and records held back."""
        return len(self._queue)

    @property
    def next_close_us(self) -> int | None:
        """When the oldest held window closes (the next moment output can appear)."""
        if self._queue:
            head = self._queue[0]
            if isinstance(head, _Window) and not head.closed:
                return head.close_us
        return None

    def push(self, rec: Record) -> list[Record]:
        """Take the next record of the timeline; return the records now ready."""
        ts = rec.timestamp_us
        if self._timeline_us is None or ts > self._timeline_us:
            self._timeline_us = ts
        if self._accept is None or self._accept(rec):
            key = self._key(rec)
            if key is None:
                self._queue.append(rec)
            else:
                window = self._open.get(key)
                if window is not None and ts < window.close_us:
                    window.last = rec
                else:
                    if window is not None:
                        window.closed = True
                    window = _Window(key, rec, rec, ts + self._interval_us)
                    self._open[key] = window
                    self._queue.append(window)
        return self._ready(self._timeline_us)

    def advance(self, now_us: int) -> list[Record]:
        """The timeline reached ``now_us`` with no record (a live cursor, idle)."""
        if self._timeline_us is None or now_us > self._timeline_us:
            self._timeline_us = now_us
        return self._ready(self._timeline_us)

    def flush(self) -> list[Record]:
        """Everything held, in order (the range ended)."""
        out = [e.result() if isinstance(e, _Window) else e for e in self._queue]
        self._queue.clear()
        self._open.clear()
        return out

    def _ready(self, now_us: int) -> list[Record]:
        out: list[Record] = []
        queue = self._queue
        while queue:
            head = queue[0]
            if isinstance(head, _Window):
                if not head.closed and head.close_us > now_us:
                    break
                if self._open.get(head.key) is head:
                    del self._open[head.key]
                out.append(head.result())
            else:
                out.append(head)
            queue.popleft()
        return out

    def _key(self, rec: Record) -> Hashable | None:
        if not self._paths:
            return (rec.topic, rec.sow_key) if rec.sow_key else None
        try:
            doc = orjson.loads(rec.body)
        except orjson.JSONDecodeError:
            return None
        values: list[bytes] = [rec.topic.encode()]
        for path in self._paths:
            value = doc
            for part in path:
                if isinstance(value, dict) and part in value:
                    value = value[part]
                elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
                    value = value[int(part)]
                else:
                    return None
            values.append(orjson.dumps(value, option=orjson.OPT_SORT_KEYS))
        return tuple(values)


# -- one subscription inside a cursor -------------------------------------------------


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
        kinds: frozenset[RecordKind] = MESSAGE_KINDS,
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
        #: The cursor feeding this member (None while it is between cursors).
        self.owner: ReplayCursor | None = None

    @property
    def sub_id(self) -> str:
        return self.sink.sub_id

    @property
    def stop_bound(self) -> int | None:
        """The last seq this member could deliver, when known (None: open-ended)."""
        return None if self._stop is None else self._stop.bound

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
    kinds: frozenset[RecordKind] = MESSAGE_KINDS,
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


# -- the cursor -----------------------------------------------------------------------


class ReplayCursor:
    """One loop reading the log from the lowest member position and feeding its members.

    Run it either in its own task (``start()``; failures go to ``on_error``) or in a task
    of the caller's (``await run()``; failures propagate). ``pause()`` / ``resume()`` /
    ``close()`` are synchronous; ``close()`` makes the loop end at its next await (and
    cancels the task ``start()`` created); ``await wait_closed()`` waits for the end. The
    loop also ends by itself once every member has finished (range end, ``top_n``) or left.

    Each pass: read a batch up to the horizon (and the members' range ends), hand it to the
    members (a group gets it record by record, so interleaving across members is log
    order), drain each outbox through its pacer to its sink. At the horizon: tell new
    arrivals ``caught_up``, then wait for the next durable record, waking early for clock
    deadlines: conflation windows, future range ends and position acks (every
    ``position_interval`` seconds after catch-up, ``sink.position(bm)`` of the latest
    durable record the member has passed, when it changed since the previous one).

    Members can move between cursors at any time (:meth:`take_member`,
    :meth:`add_member`): records are handed over to a member's sink before its
    ``deliver()`` is awaited, so a move (or a cancellation) in the middle of a delivery
    never makes another cursor deliver them again. Pausing takes effect after the delivery
    in progress; positions stay in the members.
    """

    def __init__(
        self,
        source: ReplaySource,
        members: Iterable[ReplayMember] = (),
        *,
        clock: Clock = SYSTEM_CLOCK,
        horizon: Horizon | None = None,
        position_interval: float = 1.0,
        batch_count: int = 1000,
        batch_bytes: int = 1 << 20,
        on_error: Callable[[ReplayCursor, Exception], None] | None = None,
    ) -> None:
        self.source = source
        self.clock = clock
        self.horizon: Horizon = horizon if horizon is not None else DurableHorizon(source)
        self.position_interval = position_interval
        self.batch_count = batch_count
        self.batch_bytes = batch_bytes
        self.on_error = on_error
        self.error: Exception | None = None
        self._members: list[ReplayMember] = []
        self._task: asyncio.Task[None] | None = None
        self._own_task = False
        self._closed = False
        self._ended = asyncio.Event()
        self._timer: asyncio.Task[None] | None = None
        self._timer_due = 0.0
        self._waiting: asyncio.Future[None] | None = None
        self._woken = False
        self._pause_requested = False
        self._interrupted = False
        self._resumed = asyncio.Event()
        self._resumed.set()
        self._parked = asyncio.Event()
        self._mark: Record | None = None
        self._undurable: deque[Record] = deque(maxlen=65536)
        for member in members:
            self.add_member(member)

    # -- state --

    @property
    def members(self) -> tuple[ReplayMember, ...]:
        """The members still being fed, in delivery order."""
        return tuple(m for m in self._members if not m.finished and m.owner is self)

    @property
    def paused(self) -> bool:
        return self._pause_requested

    @property
    def running(self) -> bool:
        return self._task is not None and not self._ended.is_set()

    @property
    def done(self) -> bool:
        """Closed, or the loop ended (all members finished or left, or it failed)."""
        return self._closed or self._ended.is_set()

    def member(self, sub_id: str) -> ReplayMember:
        for m in self.members:
            if m.sub_id == sub_id:
                return m
        raise SubIdNotFound(sub_id)

    # -- membership --

    def add_member(self, member: ReplayMember) -> None:
        """Feed ``member`` from its own position too (it may come from another cursor)."""
        member.owner = self
        self._members.append(member)
        self._interrupted = True
        self._wake()

    def take_member(self, sub_id: str) -> ReplayMember:
        """Stop feeding a member and return it, position intact (safe at any time)."""
        member = self.member(sub_id)
        member.owner = None
        self._members.remove(member)
        self._interrupted = True
        self._wake()
        return member

    def take_members(self) -> list[ReplayMember]:
        """:meth:`take_member` for every member."""
        return [self.take_member(m.sub_id) for m in self.members]

    def remove(self, sub_id: str) -> bool:
        """Drop one member (unsubscribe) without telling its sink; False if not here."""
        for m in self.members:
            if m.sub_id == sub_id:
                self.take_member(sub_id).drop()
                return True
        return False

    # -- control --

    def start(self, *, paused: bool = False) -> None:
        """Run the loop in a new task (paused: it waits for :meth:`resume` first)."""
        self._claim()
        if paused:
            self.pause()
        self._own_task = True
        self._task = asyncio.get_running_loop().create_task(
            self._run_reporting(), name=f"replay:{','.join(m.sub_id for m in self._members)}"
        )

    async def run(self) -> None:
        """Run the loop in the calling task until it ends; failures propagate.

        Raises:
            ReplayGapError: the source returned records out of order.
            Exception: whatever the source or a sink raised.
        """
        self._claim()
        self._task = asyncio.current_task()
        await self._serve()

    def pause(self) -> None:
        """Stop reading at the next safe point; positions are kept."""
        self._pause_requested = True
        self._interrupted = True
        self._resumed.clear()
        self._wake()

    def resume(self) -> None:
        """Continue from the kept positions."""
        self._pause_requested = False
        self._resumed.set()

    async def park(self) -> None:
        """Pause and return once the loop stands still (or has ended)."""
        self.pause()
        if not self.running:
            return
        parked = asyncio.ensure_future(self._parked.wait())
        ended = asyncio.ensure_future(self._ended.wait())
        try:
            await asyncio.wait({parked, ended}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            parked.cancel()
            ended.cancel()

    def close(self) -> None:
        """End the loop at its next await (cancelling the task :meth:`start` made)."""
        self._closed = True
        self._interrupted = True
        self._resumed.set()
        self._wake()
        if self._own_task and self._task is not None and not self._task.done():
            self._task.cancel()

    async def wait_closed(self) -> None:
        """Wait until the loop has ended (by itself, by :meth:`close`, or by failing)."""
        if self._task is not None:
            await self._ended.wait()

    # -- the loop --

    def _claim(self) -> None:
        if self._task is not None or self._closed:
            raise RuntimeError("a replay cursor runs once")

    async def _run_reporting(self) -> None:
        try:
            await self._serve()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.error = exc
            if self.on_error is not None:
                self.on_error(self, exc)
            else:
                log.exception(
                    "replay cursor %s failed", self._task.get_name() if self._task else ""
                )

    async def _serve(self) -> None:
        try:
            await self._loop()
        finally:
            self._parked.clear()
            self._ended.set()
            if self._timer is not None:
                self._timer.cancel()

    async def _loop(self) -> None:
        while not self._closed:
            if self._pause_requested:
                self._parked.set()
                await self._resumed.wait()
                self._parked.clear()
                continue
            self._interrupted = False
            members = self._active()
            if not members:
                return
            self._tick(members)
            if not await self._drain_all(members):
                continue
            members = self._active()
            if not members:
                return
            if await self._step(members):
                continue
            await self._idle(members)

    def _active(self) -> list[ReplayMember]:
        members = self._members
        if any(m.finished or m.owner is not self for m in members):
            members = [m for m in members if not m.finished and m.owner is self]
            self._members = members
        return members

    async def _step(self, members: list[ReplayMember]) -> bool:
        """Read and feed one batch; False when there is nothing to read (at the horizon)."""
        first = self.source.first_seq
        read_from = min(m.next_seq for m in members)
        if read_from < first:
            # Retention removed records nobody had read: nothing to deliver there.
            for m in members:
                m.next_seq = max(m.next_seq, first)
            read_from = first
        horizon = self.horizon.seq
        if read_from > horizon:
            return False
        limit = horizon
        bounds = [m.stop_bound for m in members]
        if all(b is not None for b in bounds):
            limit = min(limit, max(b for b in bounds if b is not None))
        if read_from > limit:
            # Every member has reached its range end: the next tick finishes them.
            await asyncio.sleep(0)
            return True
        read_view = getattr(self.source, "read_view", None)
        batch: Sequence[Record]
        if read_view is not None and len(members) == 1:
            # one member: a columnar batch goes to the sink without per-record objects
            batch = await read_view(
                read_from,
                max_count=self.batch_count,
                max_bytes=self.batch_bytes,
                upto_seq=limit,
            )
        else:
            batch = await self.source.read_batch(
                read_from,
                max_count=self.batch_count,
                max_bytes=self.batch_bytes,
                upto_seq=limit,
            )
        if not batch and read_from > self.source.durable_seq:
            # A horizon ahead of disk (``live``) over a log that serves durable records
            # only: the records exist but are not readable until the next group commit.
            await self._interruptible(self.source.wait_durable(read_from))
            return True
        self._check_batch(batch, read_from, limit, members)
        self._note_durable(batch)
        if len(members) == 1:
            members[0].ingest(batch)
            await self._drain(members[0])
            return True
        for rec in batch:
            one = (rec,)
            for m in members:
                m.ingest(one)
                if not await self._drain(m):
                    return True
        return True

    def _check_batch(
        self, batch: Sequence[Record], read_from: int, limit: int, members: list[ReplayMember]
    ) -> None:
        if not batch:
            raise ReplayGapError(f"the log returned nothing from {read_from} up to {limit}")
        head = batch[0].seq
        if head != read_from:
            if head > read_from and read_from < self.source.first_seq:
                for m in members:
                    m.next_seq = max(m.next_seq, head)
            else:
                raise ReplayGapError(f"asked for seq {read_from}, the log returned {head}")
        if batch[-1].seq - head + 1 != len(batch) or batch[-1].seq > limit:
            raise ReplayGapError(f"the log returned a non-contiguous batch from {head}")

    async def _drain_all(self, members: list[ReplayMember]) -> bool:
        for m in members:
            if not await self._drain(m):
                return False
        return True

    async def _drain(self, m: ReplayMember) -> bool:
        """Deliver m's outbox; False if interrupted (pause, close, membership) first."""
        clock = self.clock
        while m.has_output and not m.finished:
            if self._interrupted or m.owner is not self:
                return False
            records, start = m.output()
            count = len(records) - start
            pacer = m.pacer
            if pacer is not None:
                count, wait = pacer.take(records, start, clock.monotonic())
                if count == 0:
                    await self._interruptible(clock.sleep(wait))
                    continue
            if m.remaining is not None:
                count = min(count, m.remaining)
            end = start + count
            chunk = records if start == 0 and end == len(records) else records[start:end]
            m.hand_over(count)
            # Cancelled inside deliver(), the chunk counts as sent: a sink sends before it
            # waits for room, so delivering it again would duplicate it.
            delivered = count
            try:
                delivered = await m.sink.deliver(chunk)
            finally:
                if pacer is not None:
                    pacer.charge(records, start, count, delivered)
                m.account(delivered)
            if m.remaining is not None and m.remaining <= 0:
                m.finish()
        if m.stopping and not m.finished and not m.has_output:
            m.finish()
        return True

    async def _idle(self, members: list[ReplayMember]) -> None:
        """At the horizon: announce catch-up, then wait for data or a deadline."""
        mono = self.clock.monotonic()
        for m in members:
            if not m.caught_up:
                m.caught_up = True
                m.next_position_at = mono + self.position_interval
                if not m.ranged:
                    m.sink.caught_up()
        delay = self._next_delay(members)
        if delay is not None and delay <= 0:
            return
        if delay is not None:
            self._arm_timer(delay)
        read_from = min(m.next_seq for m in members)
        await self._interruptible(self.horizon.wait(read_from))

    # -- time-driven work --

    def _tick(self, members: list[ReplayMember]) -> None:
        """Close due conflation windows, settle passed range ends, send due position acks."""
        now_us = time_us(self.clock)
        mono = self.clock.monotonic()
        horizon = self.horizon.seq
        self._refresh_mark()
        for m in members:
            m.tick(now_us, self.source, m.next_seq > horizon)
            position = self._position_for(m)
            if position is not None and mono + _EPS >= m.next_position_at:
                m.sink.position(position)
                m.last_position = position
                m.next_position_at = mono + self.position_interval

    def _next_delay(self, members: list[ReplayMember]) -> float | None:
        now_us = time_us(self.clock)
        mono = self.clock.monotonic()
        horizon = self.horizon.seq
        delays: list[float] = []
        for m in members:
            deadline = m.deadline_us(m.next_seq > horizon)
            if deadline is not None:
                delays.append((deadline - now_us) / 1e6)
            if self._position_for(m) is not None:
                delays.append(m.next_position_at - mono)
            elif self._undurable and m.caught_up and not m.finished:
                # A live cursor read records not on disk yet: look again later for a
                # durable position to ack (the horizon it waits on ignores durability).
                wait = m.next_position_at - mono
                delays.append(wait if wait > 0 else self.position_interval)
        return min(delays) if delays else None

    def _position_for(self, m: ReplayMember) -> str | None:
        """The position ack m is owed now, if any: caught up, holding nothing back, and the
        latest durable record it has passed differs from the last one acked."""
        mark = self._mark
        if mark is None or not m.caught_up or m.finished or m.holding or mark.seq >= m.next_seq:
            return None
        position = mark.bookmark
        return None if position == m.last_position else position

    def _note_durable(self, batch: Sequence[Record]) -> None:
        """Track the newest durable record read (a ``live`` cursor reads ahead of disk)."""
        durable = self.source.durable_seq
        if batch[-1].seq <= durable:
            self._mark = batch[-1]
            self._undurable.clear()
            return
        for rec in batch:
            if rec.seq <= durable:
                self._mark = rec
            else:
                self._undurable.append(rec)

    def _refresh_mark(self) -> None:
        durable = self.source.durable_seq
        pending = self._undurable
        while pending and pending[0].seq <= durable:
            self._mark = pending.popleft()

    # -- waiting --

    def _arm_timer(self, delay: float) -> None:
        """Wake the idle wait after ``delay`` seconds of the injected clock (one timer task
        per cursor, replaced only when an earlier deadline comes up)."""
        due = self.clock.monotonic() + delay
        timer = self._timer
        if timer is not None and not timer.done() and self._timer_due <= due + _EPS:
            return
        if timer is not None:
            timer.cancel()
        self._timer_due = due
        self._timer = asyncio.get_running_loop().create_task(self._fire_after(delay))

    async def _fire_after(self, delay: float) -> None:
        await self.clock.sleep(delay)
        self._wake()

    def _wake(self) -> None:
        waiting = self._waiting
        if waiting is not None and not waiting.done():
            self._woken = True
            waiting.cancel()

    async def _interruptible(self, awaitable: Awaitable[None]) -> None:
        """Await ``awaitable`` unless :meth:`_wake` cuts it short (then just return)."""
        waiting = asyncio.ensure_future(awaitable)
        self._waiting = waiting
        self._woken = False
        try:
            await waiting
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if not (self._woken and current is not None and current.cancelling() == 0):
                raise
        finally:
            self._waiting = None
            self._woken = False


def resume_together(cursors: Sequence[ReplayCursor]) -> ReplayCursor:
    """Paused subscriptions resumed as one group, so their messages interleave in log order.

    Every member of ``cursors`` moves (each at its own position) into one new cursor, which
    reads from the lowest position; the old cursors are closed. The new cursor has the
    first cursor's settings, and waits for the strictest durability its members asked for.
    It is returned not started: ``start()`` it or ``await run()`` it.
    """
    if not cursors:
        raise ValueError("resume_together() needs at least one cursor")
    first = cursors[0]
    if any(c.source is not first.source or c.clock is not first.clock for c in cursors):
        raise ValueError("cursors to resume together must share the source and the clock")
    members: list[ReplayMember] = []
    horizons: list[Horizon] = []
    for cursor in cursors:
        members.extend(cursor.take_members())
        if all(h is not cursor.horizon for h in horizons):
            horizons.append(cursor.horizon)
        cursor.close()
    return ReplayCursor(
        first.source,
        members,
        clock=first.clock,
        horizon=horizons[0] if len(horizons) == 1 else _LowestHorizon(horizons),
        position_interval=first.position_interval,
        batch_count=first.batch_count,
        batch_bytes=first.batch_bytes,
        on_error=first.on_error,
    )


class ReplayGroup(ReplayCursor):
    """The engine's entry point: a cursor created for one subscribe command's ``bm`` and
    options, which other subscriptions' members can join (resume together).

    ``add_sink`` resolves the spec for a sink; ``take_sink`` / ``position_of`` /
    ``add_sink_at`` move a member (the object ``take_sink`` returns) into another group.
    """

    def __init__(
        self,
        source: ReplaySource,
        spec: BookmarkSpec,
        options: SubscribeOptions,
        *,
        clock: Clock = SYSTEM_CLOCK,
        horizon: Horizon | None = None,
        position_interval: float = 1.0,
        batch_count: int = 1000,
        batch_bytes: int = 1 << 20,
        on_error: Callable[[ReplayCursor, Exception], None] | None = None,
    ) -> None:
        super().__init__(
            source,
            clock=clock,
            horizon=horizon,
            position_interval=position_interval,
            batch_count=batch_count,
            batch_bytes=batch_bytes,
            on_error=on_error,
        )
        self.spec = spec
        self.options = options

    def add_sink(
        self,
        sink: ReplaySink,
        *,
        accept: Callable[[Record], bool] | None = None,
        kinds: frozenset[RecordKind] = MESSAGE_KINDS,
    ) -> ReplayMember:
        """A member for ``sink`` at this group's spec and options.

        Raises:
            BookmarkNotFound: under ``bookmark_not_found=fail``.
        """
        member = build_member(
            sink, self.spec, self.options, self.source, accept=accept, kinds=kinds
        )
        self.add_member(member)
        return member

    def take_sink(self, sub_id: str) -> ReplayMember:
        """:meth:`take_member` (the name the engine uses)."""
        return self.take_member(sub_id)

    @staticmethod
    def position_of(member: ReplayMember) -> int:
        """The next seq ``member`` will look at."""
        return member.next_seq

    def add_sink_at(self, member: ReplayMember, position: int) -> None:
        """Add a member taken from another group, continuing at ``position``."""
        member.next_seq = position
        self.add_member(member)
