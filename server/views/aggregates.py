"""The state of one aggregate in one group, kept under inserts and deletes of inputs.

Every state has ``add(x)``, ``remove(x)`` (``x`` is an input this state was given before)
and ``result()``. Inputs are prepared once per record by :func:`input_of`: a 0/1 flag for
COUNT, a number or None for the others (None is no input: it changes nothing). The costs
per change: COUNT, SUM and AVG O(1) (a sum is one integer, docs/views.md "Numbers"); MIN
and MAX O(log d) for ``d`` distinct values in the group, O(1) when the value was already
there or is still there after the change.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from spool.server.expr.values import Value
from spool.server.views.heap import IndexedHeap
from spool.server.views.numbers import (
    INT_MAX,
    INT_MIN,
    ExactSum,
    Number,
    json_number,
    number_input,
)

__all__ = ["State", "count_input", "input_function", "input_of", "new_state"]

Input = Number | None


class Count:
    """COUNT: records whose argument is not NULL (every record, for ``COUNT(*)``)."""

    __slots__ = ("n",)

    def __init__(self) -> None:
        self.n = 0

    def add(self, x: Input) -> None:
        self.n += 1 if x else 0

    def remove(self, x: Input) -> None:
        self.n -= 1 if x else 0

    def replace(self, before: Input, after: Input) -> None:
        self.n += (1 if after else 0) - (1 if before else 0)

    def result(self) -> Number | None:
        return self.n


class Sum(ExactSum):
    """SUM: the exact sum of the numeric inputs; NULL when there is none."""

    __slots__ = ()

    def add(self, x: Input) -> None:
        if x is not None:
            ExactSum.add(self, x)

    def remove(self, x: Input) -> None:
        if x is not None:
            ExactSum.remove(self, x)

    def replace(self, before: Input, after: Input) -> None:
        if type(before) is int and type(after) is int:
            self.ints += after - before  # the common case: one int for another
            return
        if before is not None:
            ExactSum.remove(self, before)
        if after is not None:
            ExactSum.add(self, after)

    def result(self) -> Number | None:
        if self.count and not self.floats and INT_MIN <= self.ints <= INT_MAX:
            return self.ints  # the common case: a sum of ints JSON can hold
        return self.total()


class Avg(Sum):
    """AVG: the exact sum over the count of numeric inputs, a float; NULL without any."""

    __slots__ = ()

    def result(self) -> Number | None:
        return self.mean()


class Extreme:
    """MIN (``sign`` 1) or MAX (``sign`` -1) of the numeric inputs; NULL without any.

    A multiset: per distinct value, how many ints and how many floats hold it (so the
    result is an int when an int holds the extreme value, a float otherwise, whatever
    the order of the changes), and an indexed heap of the distinct values (of their
    negations for MAX).
    """

    __slots__ = ("counts", "heap", "sign")

    def __init__(self, sign: int) -> None:
        self.sign = sign
        self.counts: dict[Number, list[int]] = {}
        self.heap = IndexedHeap()

    def add(self, x: Input) -> None:
        if x is None:
            return
        c = self.counts.get(x)
        if c is None:
            c = self.counts[x] = [0, 0]
            self.heap.push(self.sign * x)
        c[type(x) is float] += 1

    def remove(self, x: Input) -> None:
        if x is None:
            return
        c = self.counts[x]
        c[type(x) is float] -= 1
        if not c[0] and not c[1]:
            del self.counts[x]
            self.heap.remove(self.sign * x)

    def replace(self, before: Input, after: Input) -> None:
        self.add(after)  # first: the value may stay the extreme
        self.remove(before)

    def result(self) -> Number | None:
        if not self.counts:
            return None
        v = self.sign * self.heap.top()
        return json_number(int(v)) if self.counts[v][0] else float(v)


State = Count | Sum | Extreme

_STATES: Final[dict[str, Callable[[], State]]] = {
    "COUNT": Count,
    "SUM": Sum,
    "AVG": Avg,
    "MIN": lambda: Extreme(1),
    "MAX": lambda: Extreme(-1),
}


def new_state(function: str) -> State:
    """An empty state of the aggregate ``function`` (``SUM``, ``COUNT``, ...)."""
    return _STATES[function]()


def count_input(value: Value) -> Input:
    """COUNT's input: 1 unless ``value`` is NULL (missing, ``null``, ``""``, ``[]``)."""
    if value is None:
        return 0
    t = type(value)
    if (t is str or t is list) and not value:
        return 0
    return 1


def input_function(function: str) -> Callable[[Value], Input]:
    """How a record's argument value becomes the input of ``function``."""
    return count_input if function == "COUNT" else number_input


def input_of(function: str, value: Value) -> Input:
    """The input a record gives ``function`` when its argument's value is ``value``."""
    return input_function(function)(value)
