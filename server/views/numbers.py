"""The numbers of views: what an aggregate takes as input, exact sums, and what JSON can
hold (docs/views.md "Numbers").

* An aggregate's input is a number: an int or a finite float (the filter language's
  conversion, so ``"12"`` is 12 and ``true`` is 1). NULL, text that is not a number, an
  object, NaN and the infinities are not inputs; negative zero is zero.
* Sums are exact. Every finite float is an integer multiple of ``2**-1074``, so a sum is
  kept as one Python integer counting those units (plus the count of floats in it); an
  insert adds, a delete subtracts, and nothing is ever lost to rounding, whatever the
  order of the changes. The value shown is the exact sum rounded once: an int when every
  input was an int, else the float nearest to the exact sum (Python's integer division
  rounds correctly). AVG is the exact sum divided by the count, rounded once, a float.
* An int too large for JSON (outside the signed and unsigned 64-bit ranges) is shown as
  the nearest float; a float beyond the float range is NULL.
"""

from __future__ import annotations

import math
from typing import Final

from spool.server.expr.values import Value, to_number

__all__ = ["INT_MAX", "INT_MIN", "ExactSum", "json_number", "number_input"]

SCALE: Final = 1074
"""A float is an integer number of ``2**-SCALE`` units (the smallest subnormal)."""

_ONE: Final = 1 << SCALE
INT_MIN: Final = -(2**63)
"""The smallest int JSON numbers are read and written as (signed 64-bit)."""
INT_MAX: Final = 2**64 - 1
"""The largest (unsigned 64-bit)."""

Number = int | float


def number_input(value: Value) -> Number | None:
    """The input an aggregate takes from ``value``, or None (not a number)."""
    if type(value) is int:
        return value
    n = to_number(value)
    if type(n) is float:
        if not math.isfinite(n):
            return None
        if n == 0.0:
            return 0.0  # negative zero is zero
    return n


def units(x: float) -> int:
    """A finite float as a count of ``2**-SCALE`` units (exact)."""
    num, den = x.as_integer_ratio()  # den is a power of two, at most 2**SCALE
    return num << (SCALE + 1 - den.bit_length())


def json_number(n: Number | None) -> Number | None:
    """``n`` as JSON can hold it: a huge int as the nearest float (NULL beyond floats)."""
    if type(n) is int and not INT_MIN <= n <= INT_MAX:
        try:
            return float(n)
        except OverflowError:
            return None
    return n


class ExactSum:
    """The exact sum of a multiset of numbers, under inserts and deletes.

    ``ints`` sums the int inputs, ``units`` the float inputs (in ``2**-SCALE`` units);
    ``floats`` counts float inputs (the sum is shown as a float while there is one) and
    ``count`` every input.
    """

    __slots__ = ("count", "floats", "ints", "units")

    def __init__(self) -> None:
        self.ints = 0
        self.units = 0
        self.floats = 0
        self.count = 0

    def add(self, n: Number) -> None:
        """Take ``n`` in (an input: see :func:`number_input`)."""
        self.count += 1
        if type(n) is int:
            self.ints += n
        else:
            self.units += units(n)
            self.floats += 1

    def remove(self, n: Number) -> None:
        """Take out ``n``, which was added before."""
        self.count -= 1
        if type(n) is int:
            self.ints -= n
        else:
            self.units -= units(n)
            self.floats -= 1

    def total(self) -> Number | None:
        """The sum (None when there is no input)."""
        if not self.count:
            return None
        if not self.floats:
            return json_number(self.ints)
        try:
            return ((self.ints << SCALE) + self.units) / _ONE
        except OverflowError:
            return None

    def mean(self) -> float | None:
        """The mean, a float (None when there is no input)."""
        if not self.count:
            return None
        try:
            return ((self.ints << SCALE) + self.units) / (self.count << SCALE)
        except OverflowError:
            return None
