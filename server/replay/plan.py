"""Where a replay starts and where it ends: a ``bm`` resolved against the log (pure).

:func:`plan_replay` turns a parsed bookmark spec into a :class:`ReplayPlan` using only the
source's lookups; :class:`StopRule` then decides, record by record in log order, where a
range ends. No I/O of its own and no clock, so every rule of docs/bookmarks.md is tested
against a static log.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Final, Literal, TypeAlias

from spool.server.bookmarks import (
    BookmarkList,
    BookmarkPoint,
    BookmarkSpec,
    Endpoint,
    Epoch,
    Now,
    Range,
    TimePoint,
)
from spool.server.protocol.errors import BookmarkNotFound, InvalidBookmark
from spool.server.protocol.options import NotFoundPolicy
from spool.server.replay.ports import ReplaySource
from spool.server.txlog.format.record import Record, RecordKind

Verdict: TypeAlias = Literal["pass", "last", "beyond"]

_SCHEDULED: Final = int(RecordKind.SCHEDULED)
_DUE: Final = int(RecordKind.DUE)


class StopRule:
    """Where a range ends, for records met in log order (pure, but stateful).

    The end is either a sequence bound known up front (a bookmark found in the log, NOW),
    bookmarks not in the log yet (reached when their publisher's sequence is met, so a
    bookmark that never made it into this log still ends the range at the next message of
    that publisher), or a moment (reached at the first record stamped past it, or when the
    clock passes it: then :meth:`on_clock` fixes the bound from the log's time index).
    A list ends at the newest of its bookmarks.

    An end bookmark is where it was delivered: a delayed message's is its due record. When
    the record met for it is its scheduled record (the message was not due yet when the
    range was planned, or reached the log only since), the range goes on to that
    message's due record, as it would end there had it been planned after the due time.
    """

    __slots__ = (
        "_awaited",
        "_due_met",
        "_ends",
        "_inclusive",
        "_last_seq",
        "_look_at",
        "_pending",
        "_stop_at_us",
        "_time_bound",
    )

    def __init__(
        self,
        *,
        last_seq: int | None = None,
        pending: Iterable[BookmarkPoint] = (),
        inclusive: bool = True,
        stop_at_us: int | None = None,
        found: Iterable[BookmarkPoint] = (),
        look_at: int | None = None,
    ) -> None:
        """
        Args:
            last_seq: the last seq to deliver, as far as found bookmarks say.
            pending: end bookmarks not found in the log yet.
            found: the end bookmarks found (``last_seq`` is theirs): one found as its
                scheduled record is waited for at its due record.
            look_at: the seq an exclusive end was found at, past ``last_seq``: read
                before the range ends, in case it is a scheduled record.
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
        self._ends = {(p.pub_hash, p.pub_seq) for p in found}
        self._look_at = look_at
        #: end bookmarks met as scheduled records, whose due records end the range
        self._awaited: set[tuple[int, int]] = set()
        #: end bookmarks whose due record was met (a scheduled record met again after a
        #: pause waits for nothing)
        self._due_met: set[tuple[int, int]] = set()

    @property
    def bound(self) -> int | None:
        """The last seq to deliver, once known."""
        if self._stop_at_us is not None:
            return self._time_bound
        return None if self._pending or self._awaited else self._last_seq

    @property
    def read_bound(self) -> int | None:
        """The last seq to read: :attr:`bound`, or the record an exclusive end was found
        at, just past it (a scheduled record moves the end to its due record)."""
        bound = self.bound
        look_at = self._look_at
        if bound is not None and look_at is not None and look_at > bound:
            return look_at
        return bound

    @property
    def deadline_us(self) -> int | None:
        """Wall time at which :meth:`on_clock` settles a time end still open."""
        if self._stop_at_us is not None and self._time_bound is None:
            return self._stop_at_us
        return None

    def verdict(self, rec: Record) -> Verdict:
        """``pass``: deliver and go on; ``last``: deliver, then stop; ``beyond``: stop
        before it. Idempotent for a record met again (after a pause)."""
        kind = rec.kind
        if kind in (_SCHEDULED, _DUE) and self._delayed(rec, kind):
            return "pass"
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
        if rec.seq == bound:
            look_at = self._look_at
            return "pass" if look_at is not None and look_at > bound else "last"
        return "beyond"

    def _delayed(self, rec: Record, kind: int) -> bool:
        """A scheduled or due record: True when it is an end bookmark's scheduled record
        (its due record is waited for, this one passes), else False (the usual rules)."""
        point = (rec.pub_hash, rec.pub_seq)
        if kind == _DUE:
            if point in self._awaited:
                self._awaited.discard(point)
                self._due_met.add(point)
                last = rec.seq if self._inclusive else rec.seq - 1
                self._last_seq = last if self._last_seq is None else max(self._last_seq, last)
            return False
        if self._stop_at_us is not None or point in self._due_met:
            return False
        if self._pending.get(rec.pub_hash) == rec.pub_seq:
            del self._pending[rec.pub_hash]
        elif point not in self._ends:
            return False
        self._awaited.add(point)
        return True

    def on_clock(self, now_us: int, source: ReplaySource) -> None:
        """The clock passed a time end: every record up to it is in the log (or on its
        way to disk), so the bound is the log's answer for that moment.

        This runs while the cursor runs and asks the synchronous ``seq_for_time``: the
        known limit written down on :class:`~spool.server.replay.ports.ReplaySource`.
        """
        if self._stop_at_us is not None and self._time_bound is None and now_us >= self._stop_at_us:
            self._time_bound = source.seq_for_time(self._stop_at_us) - 1

    def reached(self, next_seq: int) -> bool:
        """Whether a member about to read ``next_seq`` is past the end."""
        bound = self.read_bound
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
    point: Endpoint,
    inclusive: bool,
    source: ReplaySource,
    policy: NotFoundPolicy,
    *,
    resume: bool,
) -> tuple[int, int | None]:
    """(start seq, time gate) of one start endpoint; ``resume``: a subscription's resume
    point (a range's start goes by position alone)."""
    match point:
        case Epoch():
            return source.first_seq, None
        case Now():
            return source.durable_seq + 1, None
        case BookmarkPoint(pub_hash=h, pub_seq=s):
            start = _start_at(h, s, inclusive, source, resume)
            if start is None:
                return _not_found(f"bookmark {point}", source, policy), None
            return start, None
        case BookmarkList(points=points):
            found = [
                start
                for p in points
                if (start := _start_at(p.pub_hash, p.pub_seq, inclusive, source, resume))
                is not None
            ]
            if not found:
                return _not_found("no bookmark of the list", source, policy), None
            return min(found), None
        case TimePoint(timestamp_us=us):
            gate = us if inclusive else us + 1
            return source.seq_for_time(gate), gate
    raise InvalidBookmark(f"not a start point: {point!r}")


def _start_at(
    pub_hash: int, pub_seq: int, inclusive: bool, source: ReplaySource, resume: bool
) -> int | None:
    """Where a replay starting at (``inclusive``) or after a bookmark starts; None when
    the log does not hold it.

    A resume point is never after the first record of a later message of the
    bookmark's publisher (``seq_for_later``): a client resuming after a publisher's
    message may not have its later ones, and this log may hold one before the
    bookmark's own delivery (the bookmark's record arrived late, or a later delayed
    message fell due first). The records in between may come again; a client's
    bookmark store discards them.
    """
    seq = source.seq_for_bookmark(pub_hash, pub_seq)
    if seq is None:
        return None
    start = seq if inclusive else seq + 1
    if not resume:
        return start
    later = source.seq_for_later(pub_hash, pub_seq)
    return start if later is None else min(start, later)


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
            ends = [p for p in points if p not in pending]
            return StopRule(
                last_seq=last, pending=pending, inclusive=inclusive, found=ends,
                look_at=max(found) if found and not inclusive else None,
            )  # fmt: skip
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
            spec.start, spec.start_inclusive, source, not_found_policy, resume=False
        )
        stop = _resolve_stop(spec, source, not_found_policy)
    else:
        start, gate = _resolve_start_point(
            spec, isinstance(spec, TimePoint), source, not_found_policy, resume=True
        )
        stop = None
    return ReplayPlan(max(start, source.first_seq), gate, stop)


def resolve_start(
    spec: BookmarkSpec, source: ReplaySource, not_found_policy: NotFoundPolicy = "now"
) -> int:
    """The first seq a subscription with this ``bm`` looks at (see :func:`plan_replay`)."""
    return plan_replay(spec, source, not_found_policy).start_seq
