"""An indexed binary heap of distinct numbers: the smallest in O(1), any member added or
removed in O(log n) worst case.

MIN and MAX must stay right when the current extreme leaves a group, without looking at
the whole group. :mod:`heapq` cannot remove an arbitrary member, and the usual workaround
(leave it in and skip it later) keeps dead entries of values that never reach the top,
so a group whose values churn grows without bound until a rebuild proportional to its
size. Keeping each member's position in the list makes removal a swap with the last
member and one sift: bounded work per change, and memory proportional to the distinct
values present.
"""

from __future__ import annotations

__all__ = ["IndexedHeap"]

Number = int | float


class IndexedHeap:
    """A min-heap of distinct numbers (``1`` and ``1.0`` are the same member)."""

    __slots__ = ("_items", "_pos")

    def __init__(self) -> None:
        self._items: list[Number] = []
        self._pos: dict[Number, int] = {}

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, x: Number) -> bool:
        return x in self._pos

    def top(self) -> Number:
        """The smallest member (the heap must not be empty)."""
        return self._items[0]

    def push(self, x: Number) -> None:
        """Add ``x``, which must not be a member."""
        items = self._items
        items.append(x)
        self._pos[x] = len(items) - 1
        self._up(len(items) - 1)

    def remove(self, x: Number) -> None:
        """Remove the member ``x``."""
        items = self._items
        i = self._pos.pop(x)
        last = items.pop()
        if i == len(items):
            return
        items[i] = last
        self._pos[last] = i
        self._down(i)
        self._up(self._pos[last])

    def _up(self, i: int) -> None:
        items = self._items
        pos = self._pos
        x = items[i]
        while i > 0:
            parent = (i - 1) >> 1
            p = items[parent]
            if p <= x:
                break
            items[i] = p
            pos[p] = i
            i = parent
        items[i] = x
        pos[x] = i

    def _down(self, i: int) -> None:
        items = self._items
        pos = self._pos
        n = len(items)
        x = items[i]
        while True:
            child = 2 * i + 1
            if child >= n:
                break
            right = child + 1
            if right < n and items[right] < items[child]:
                child = right
            c = items[child]
            if x <= c:
                break
            items[i] = c
            pos[c] = i
            i = child
        items[i] = x
        pos[x] = i
