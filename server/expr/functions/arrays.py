"""Array functions: ``ARRAY_COUNT``, ``ARRAY_SUM``, ``ARRAY_AVG``, ``ARRAY_MIN``,
``ARRAY_MAX``, ``ARRAY_TO_STRING``.

These are the only built-ins that receive whole arrays (``arrays=True``); every other
function sees an array's first element. A scalar counts as a one-element array and NULL as
an empty one, so ``ARRAY_COUNT(/legs)`` works whether ``/legs`` is a list, one object or
missing. Minimum and maximum use the same comparison rules as ``<`` and ``>``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from spool.server.expr.budget import built
from spool.server.expr.functions.function import Function
from spool.server.expr.values import (
    GT,
    LT,
    Value,
    comparable,
    compare_scalar,
    scalar,
    to_number,
    to_text,
)


def _elements(value: Value) -> list[Value]:
    if type(value) is list:
        return value
    return [] if value is None else [value]


def _element_numbers(value: Value) -> list[int | float]:
    out: list[int | float] = []
    for e in _elements(value):
        if type(e) is list or type(e) is dict:
            continue
        n = to_number(e)
        if n is not None:
            out.append(n)
    return out


def _array_count(value: Value) -> int:
    return len(_elements(value))


def _array_sum(value: Value) -> int | float | None:
    nums = _element_numbers(value)
    if not nums:
        return None
    total: int | float = 0
    for n in nums:
        total += n
    return total


def _array_avg(value: Value) -> float | None:
    nums = _element_numbers(value)
    if not nums:
        return None
    total: int | float = 0
    for n in nums:
        total += n
    return total / len(nums)


def _extreme(value: Value, better: Callable[[Any, Any], bool]) -> Value:
    best: Value = None
    for e in _elements(value):
        if comparable(e) is None:
            continue
        if best is None or compare_scalar(e, best, better) is True:
            best = e
    return best


def _array_min(value: Value) -> Value:
    return _extreme(value, LT)


def _array_max(value: Value) -> Value:
    return _extreme(value, GT)


def _array_to_string(value: Value, delimiter: Value, *null_text: Value) -> str | None:
    d = to_text(scalar(delimiter))
    if d is None:
        return None
    replacement = to_text(scalar(null_text[0])) if null_text else None
    parts: list[str] = []
    for e in _elements(value):
        t = None if type(e) is dict or type(e) is list else to_text(e)
        if t is None:
            if replacement is not None:
                parts.append(replacement)
        else:
            parts.append(t)
    size = sum(map(len, parts)) + len(d) * max(0, len(parts) - 1)
    if not built(size, max(len(d), max(map(len, parts), default=0))):
        return None  # the length is known before the string is built (budget.py)
    return d.join(parts)


ARRAY_FUNCTIONS: Final[tuple[Function, ...]] = (
    Function("ARRAY_COUNT", 1, 1, _array_count, arrays=True, summary="number of elements"),
    Function("ARRAY_SUM", 1, 1, _array_sum, arrays=True, summary="sum of the numeric elements"),
    Function("ARRAY_AVG", 1, 1, _array_avg, arrays=True, summary="mean of the numeric elements"),
    Function("ARRAY_MIN", 1, 1, _array_min, arrays=True, summary="smallest element"),
    Function("ARRAY_MAX", 1, 1, _array_max, arrays=True, summary="largest element"),
    Function(
        "ARRAY_TO_STRING",
        2,
        3,
        _array_to_string,
        arrays=True,
        summary="elements joined by a delimiter",
    ),
)
"""The array functions, in the order docs/filters.md lists them."""
