"""Which journals a journal policy acts on now, and when it will act on each one.

A journal module (archive, compress, remove) is given the log's journals (oldest first, the
active one last) and its pins, and decides here, without I/O:

- **due**: the journals its limits select (:class:`~spool.server.config.JournalLimits`): older
  than ``Age`` (by the time of their last record), or beyond the newest ``Count``, or
  beyond the newest journals that fit in ``Size`` bytes. Count and Size are taken over the
  journals the module could still act on (not yet archived, not yet compressed; all of
  them for remove), the active journal included, since it fills up next;
- **oldest first, never a gap**: only an unbroken run of due journals from the oldest is
  taken (the log's archive, compress and remove act on a journal *and every older one*);
- **pinned**: a journal holding a sequence at or after the lowest pin (a replay, a queue,
  a replication destination still needs it) is not taken, nor any newer one; it is
  reported and taken by a later run, once the pin has moved on.

:func:`select` answers "what now" for a run; :func:`due_times` answers "from when" for the
transaction-log page's plan.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from spool.server.config import JournalLimits
from spool.server.txlog.retention.pins import PinInfo
from spool.server.txlog.storage.journal import JournalInfo

__all__ = ["JournalOp", "PinnedJournal", "Selection", "due_times", "in_scope", "select"]

JournalOp = Literal["archive", "compress", "remove"]


@dataclass(frozen=True, slots=True)
class PinnedJournal:
    """A due journal a pin keeps from being acted on."""

    journal: int
    owner: str
    seq: int


@dataclass(frozen=True, slots=True)
class Selection:
    """What one run of a journal module does.

    Attributes:
        act: the journals to act on, oldest first (an unbroken run from the oldest).
        target: the newest of them (the log acts on it and every older one), or None.
        pinned: due journals left for a later run because of a pin.
    """

    act: tuple[JournalInfo, ...]
    target: int | None
    pinned: tuple[PinnedJournal, ...]


def in_scope(op: JournalOp, journal: JournalInfo) -> bool:
    """Whether ``op`` could still act on ``journal`` (preallocated files never)."""
    if journal.state == "preallocated":
        return False
    if op == "archive":
        return journal.state != "archived"
    if op == "compress":
        return journal.compression is None
    return True


def _due_now(scope: Sequence[JournalInfo], limits: JournalLimits, now: float) -> list[bool]:
    """Per journal of ``scope`` (oldest first, active last): due by the limits now."""
    n = len(scope)
    due = [False] * n
    if limits.count is not None:
        for i in range(max(0, n - limits.count)):
            due[i] = True
    if limits.size is not None:
        total = 0
        for i in range(n - 1, -1, -1):
            total += scope[i].size_bytes
            if total > limits.size:
                for k in range(i + 1):
                    due[k] = True
                break
    if limits.age is not None:
        for i, j in enumerate(scope):
            # the same expression as due_times, so "due at T" and "due now at T" agree
            if j.last_time_us is None or now >= j.last_time_us / 1e6 + limits.age:
                due[i] = True
    return due


def select(
    op: JournalOp,
    journals: Sequence[JournalInfo],
    pins: Sequence[PinInfo],
    limits: JournalLimits,
    now: float,
) -> Selection:
    """The journals one run of ``op`` acts on now (see the module docstring).

    Args:
        op: archive, compress or remove.
        journals: every journal, oldest first (``TransactionLog.journals()``).
        pins: the live pins (``TransactionLog.pins()``).
        limits: the module's limits.
        now: the time of the run (epoch seconds).
    """
    scope = [j for j in journals if in_scope(op, j)]
    due = _due_now(scope, limits, now)
    lowest = min(pins, key=lambda p: p.seq, default=None)
    act: list[JournalInfo] = []
    pinned: list[PinnedJournal] = []
    for j, is_due in zip(scope, due, strict=True):
        if not is_due or j.state == "active":
            break
        if lowest is not None and j.last_seq >= lowest.seq:
            pinned.append(PinnedJournal(j.id, lowest.owner, lowest.seq))
            continue  # this one and every newer due one wait for the pin
        if pinned:
            pinned.append(PinnedJournal(j.id, pinned[0].owner, pinned[0].seq))
            continue
        act.append(j)
    return Selection(tuple(act), act[-1].id if act else None, tuple(pinned))


def due_times(
    op: JournalOp, journals: Sequence[JournalInfo], limits: JournalLimits, now: float
) -> dict[int, float]:
    """From when each journal ``op`` could act on is due, oldest-first rule included.

    Returns:
        journal id -> epoch seconds (``-inf``: due now; absent: never with these limits
        as things stand). The active journal is never in it.
    """
    scope = [j for j in journals if in_scope(op, j)]
    due = _due_now(scope, limits, now)
    out: dict[int, float] = {}
    floor = -math.inf  # a journal is taken only once every older one is due too
    for j, is_due in zip(scope, due, strict=True):
        if j.state == "active":
            break
        if is_due:
            at = -math.inf
        elif limits.age is not None and j.last_time_us is not None:
            at = j.last_time_us / 1e6 + limits.age
        else:
            break  # never due with these limits, nor anything newer
        floor = max(floor, at)
        out[j.id] = floor
    return out
