"""When SOW records expire (pure): a heap of deadlines, stale entries skipped lazily.

A record gets a deadline from its message's ``e`` header (seconds after it was recorded)
or from its topic's ``Expiration``; updating a record gives it a new one. The index keeps
``(deadline, version, key)`` and never searches: an entry whose record has been updated
or deleted since is recognised by its version when it comes up and dropped. So that
updates of records that expire late do not grow the heap without end, it is rebuilt from
the live records when it holds more than twice as many entries as there are records.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable

from spool.server.ports import SowRecord

__all__ = ["ExpiryIndex"]

#: entries the heap may hold beyond twice the live records before it is rebuilt
_SLACK = 1024


class ExpiryIndex:
    """The deadlines of one store's records."""

    __slots__ = ("_heap",)

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, str]] = []

    def add(self, rec: SowRecord) -> None:
        """Track ``rec`` (a record without a deadline is ignored)."""
        if rec.expires_us:
            heapq.heappush(self._heap, (rec.expires_us, rec.version, rec.key))

    def next_due(self) -> int | None:
        """The earliest deadline (maybe of a stale entry: then :meth:`due` finds nothing)."""
        return self._heap[0][0] if self._heap else None

    def due(self, now_us: int, current: Callable[[str], SowRecord | None]) -> list[SowRecord]:
        """The records whose deadline is ``now_us`` or earlier (each once), taken out."""
        heap = self._heap
        out: list[SowRecord] = []
        while heap and heap[0][0] <= now_us:
            _, version, key = heapq.heappop(heap)
            rec = current(key)
            if rec is not None and rec.version == version:
                out.append(rec)
        return out

    def compact(self, live: int, records: Callable[[], Iterable[SowRecord]]) -> bool:
        """Rebuild from ``records()`` when stale entries dominate; True when it did."""
        if len(self._heap) <= 2 * live + _SLACK:
            return False
        self._heap = [(r.expires_us, r.version, r.key) for r in records() if r.expires_us]
        heapq.heapify(self._heap)
        return True

    def __len__(self) -> int:
        return len(self._heap)
