"""Numeric functions: ``ABS``, ``CEILING``, ``FLOOR``, ``ROUND``, ``MOD``, ``POWER``,
``SQRT``, ``LOG``, ``LN``, ``EXP``.

Arguments go through :func:`~spool.server.expr.values.to_number` (a numeric string counts).
Integers stay integers where the mathematics allows it (``POWER(2, 10) = 1024``,
``MOD(-10, 3) = -1``), so results compare exactly; what has no real answer is NULL.
"""

from __future__ import annotations

import math
from decimal import ROUND_HALF_UP, Decimal, localcontext
from typing import Final

from spool.server.expr.functions.function import Function
from spool.server.expr.values import Value, to_integer, to_number


def _abs(x: Value) -> int | float | None:
    n = to_number(x)
    return None if n is None else abs(n)


def _ceiling(x: Value) -> int | float | None:
    n = to_number(x)
    if n is None or type(n) is int or not math.isfinite(n):
        return n
    return math.ceil(n)


def _floor(x: Value) -> int | float | None:
    n = to_number(x)
    if n is None or type(n) is int or not math.isfinite(n):
        return n
    return math.floor(n)


def _round(x: Value, *digits: Value) -> int | float | None:
    """Round half away from zero, on the decimal digits people see (ROUND(2.675, 2) = 2.68)."""
    n = to_number(x)
    d = to_integer(digits[0]) if digits else 0
    if n is None or d is None:
        return None
    quantum = Decimal(1).scaleb(-d)
    with localcontext() as ctx:
        ctx.prec = 60
        if type(n) is int:
            if d >= 0:
                return n
            return int(Decimal(n).quantize(quantum, rounding=ROUND_HALF_UP))
        if not math.isfinite(n) or d > 20:
            return n
        r = Decimal(repr(n)).quantize(quantum, rounding=ROUND_HALF_UP)
    return int(r) if d <= 0 else float(r)


def _mod(x: Value, y: Value) -> int | float | None:
    a, b = to_number(x), to_number(y)
    if a is None or b is None or b == 0:
        return None
    if type(a) is int and type(b) is int:
        r = abs(a) % abs(b)
        return -r if a < 0 else r
    return math.fmod(a, b)


def _power(x: Value, y: Value) -> int | float | None:
    a, b = to_number(x), to_number(y)
    if a is None or b is None:
        return None
    if type(a) is int and type(b) is int and b >= 0 and abs(a).bit_length() * b <= 4096:
        exact: int = a**b  # exact for modest integer powers: POWER(2, 10) = 1024
        return exact
    return math.pow(a, b)


def _sqrt(x: Value) -> float | None:
    n = to_number(x)
    if n is None or n < 0:
        return None
    return math.sqrt(n)


def _log(x: Value, *more: Value) -> float | None:
    """LOG(x): base 10; LOG(base, x): any base."""
    if more:
        base, n = to_number(x), to_number(more[0])
        if base is None or n is None or base <= 0 or base == 1 or n <= 0:
            return None
        return math.log(n) / math.log(base)
    n = to_number(x)
    if n is None or n <= 0:
        return None
    return math.log10(n)


def _ln(x: Value) -> float | None:
    n = to_number(x)
    if n is None or n <= 0:
        return None
    return math.log(n)


def _exp(x: Value) -> float | None:
    n = to_number(x)
    return None if n is None else math.exp(n)


NUMERIC_FUNCTIONS: Final[tuple[Function, ...]] = (
    Function("ABS", 1, 1, _abs, summary="absolute value"),
    Function("CEILING", 1, 1, _ceiling, summary="smallest integer not below"),
    Function("FLOOR", 1, 1, _floor, summary="largest integer not above"),
    Function("ROUND", 1, 2, _round, summary="round half away from zero, optionally to N decimals"),
    Function("MOD", 2, 2, _mod, summary="remainder with the sign of the dividend"),
    Function("POWER", 2, 2, _power, summary="x to the power y"),
    Function("SQRT", 1, 1, _sqrt, summary="square root"),
    Function("LOG", 1, 2, _log, summary="base-10 logarithm, or LOG(base, x)"),
    Function("LN", 1, 1, _ln, summary="natural logarithm"),
    Function("EXP", 1, 1, _exp, summary="e to the power x"),
)
"""The numeric functions, in the order docs/filters.md lists them."""
