"""A priority queue for keys that mostly arrive in order: a sorted run plus a heap.

A queue's ready messages are ordered by ``(-priority, seq)``, its leases by when they end,
its deadlines by when messages expire. Almost every key arrives in order: messages are
made ready in log order with the default priority, leases taken at a later time end later
(one lease period for the whole queue), expiry is the record time plus one expiration. A
binary heap pays ``log n`` for every pop regardless: with a backlog of 100,000 ready
messages that was about 2 us a message of the broker's single thread (a queue with four
consumers is bound by that thread).

:class:`RunHeap` keeps the keys that arrive in order (not smaller than the last one kept
that way) in a deque, O(1) at both ends, and only the others (a message given back by a
cancel or an expired lease, a non-default priority, a lease of another length) in a heap;
the smallest key is the smaller of the two heads. Same answers as ``heapq`` over every
key pushed (tests/unit/queues/test_runheap.py checks it against ``heapq``).
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any, Generic, Protocol, TypeVar

__all__ = ["RunHeap"]


class _Ordered(Protocol):
    def __lt__(self, other: Any, /) -> bool: ...


K = TypeVar("K", bound=_Ordered)


class RunHeap(Generic[K]):
    """The smallest of the keys pushed, first: ``push``, ``peek``, ``pop``, ``len``.

    Equal keys may come out in any order (as with ``heapq``); duplicates are kept.
    """

    __slots__ = ("_heap", "_run")

    def __init__(self) -> None:
        #: keys pushed in non-decreasing order (each not smaller than the one before)
        self._run: deque[K] = deque()
        #: the rest
        self._heap: list[K] = []

    def __len__(self) -> int:
        return len(self._run) + len(self._heap)

    def __bool__(self) -> bool:
        return bool(self._run) or bool(self._heap)

    def push(self, key: K) -> None:
        run = self._run
        if not run or not key < run[-1]:
            run.append(key)
        else:
            heapq.heappush(self._heap, key)

    def extend(self, keys: Iterable[K]) -> None:
        """:meth:`push` for each of ``keys`` in turn (a run of messages made ready in one
        call instead of a method call each)."""
        run = self._run
        append = run.append
        last = run[-1] if run else None
        for key in keys:
            if last is None or not key < last:
                append(key)
                last = key
            else:
                heapq.heappush(self._heap, key)

    def retain(self, keep: Callable[[K], bool]) -> None:
        """Drop every key for which ``keep`` is false (a rebuild: O(n log n))."""
        kept = sorted(k for k in (*self._run, *self._heap) if keep(k))
        self._run = deque(kept)
        self._heap = []

    def peek(self) -> K:
        """The smallest key (IndexError when empty)."""
        run = self._run
        heap = self._heap
        if run and (not heap or not heap[0] < run[0]):
            return run[0]
        return heap[0]

    def pop(self) -> K:
        """Remove and return the smallest key (IndexError when empty)."""
        run = self._run
        heap = self._heap
        if run and (not heap or not heap[0] < run[0]):
            return run.popleft()
        return heapq.heappop(heap)
