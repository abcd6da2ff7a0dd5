"""Values of the expression language and the coercions every operator shares.

A value is what a JSON body or a literal can hold, as Python objects: ``None`` (NULL),
``bool``, ``int``, ``float``, ``str``, ``list`` (an array) or ``dict`` (an object). AMPS
treats a value as any type it can be meaningfully converted to, and so do we; the rules
below are the single source of truth for both evaluators (the tree-walking reference and
the compiled closures), and docs/filters.md states them for people:

* The operators consider an empty string to be NULL.
* ``true``/``false`` are the numbers 1 and 0 to comparison and arithmetic operators.
* Two strings compare as strings (code-point order, case-sensitive). A string and a number
  compare as numbers when the string is a decimal number (``'10' > 9``); otherwise the
  string is greater than any number.
* Comparison, ``IN``, ``BETWEEN``, ``LIKE`` and ``BEGINS/ENDS WITH`` are array aware: they
  hold when they hold for any element. An empty array is NULL. Arithmetic operators and
  functions are not array aware: they use the first element.
* An object (a JSON ``{...}``) is not a scalar: scalar operators see NULL.

Everything here is pure and total: bad input yields ``None``, never an exception.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Sequence
from typing import Any, Final

from spool.server.regex import Regex

Value = Any
"""``None | bool | int | float | str | list[Value] | dict[str, Value]``."""

Compare = Callable[[Any, Any], bool]

EQ: Final[Compare] = operator.eq
NE: Final[Compare] = operator.ne
LT: Final[Compare] = operator.lt
LE: Final[Compare] = operator.le
GT: Final[Compare] = operator.gt
GE: Final[Compare] = operator.ge

COMPARISONS: Final[dict[str, Compare]] = {
    "=": EQ,
    "==": EQ,
    "!=": NE,
    "<>": NE,
    "<": LT,
    "<=": LE,
    ">": GT,
    ">=": GE,
}
"""Comparison operator spelling -> Python comparison."""

FLIPPED: Final[dict[str, str]] = {
    "=": "=",
    "==": "==",
    "!=": "!=",
    "<>": "<>",
    "<": ">",
    "<=": ">=",
    ">": "<",
    ">=": "<=",
}
"""``a OP b`` is ``b FLIPPED[OP] a``; lets the compiler put a constant on the right."""

_NUMERIC: Final = re.compile(r"\s*[+-]?(?:(\d+)(\.\d*)?|\.\d+)([eE][+-]?\d+)?\s*", re.ASCII)


def parse_number(text: str) -> int | float | None:
    """The number a string spells, or None.

    Accepted: optional blanks, an optional sign, decimal digits with an optional fraction
    and an optional exponent (``12``, ``-1.5``, ``.5``, ``2e3``). Not accepted: ``nan``,
    ``inf``, hexadecimal, digit separators, non-ASCII digits, the empty string. Digits
    without a fraction or exponent give an ``int`` (exact, any size), others a ``float``.
    """
    m = _NUMERIC.fullmatch(text)
    if m is None:
        return None
    if m.group(1) is not None and m.group(2) is None and m.group(3) is None:
        try:
            return int(text)
        except ValueError:  # more digits than int() converts: fall back to a float
            return float(text)
    return float(text)


def scalar(value: Value) -> Value:
    """The value a scalar operator or a function sees: the first element of an array."""
    if type(value) is list:
        return value[0] if value else None
    return value


def comparable(value: Value) -> int | float | str | None:
    """A scalar as comparison operators see it: NULL, a number or a non-empty string."""
    t = type(value)
    if t is int or t is float:
        return value  # type: ignore[no-any-return]
    if t is str:
        return value or None
    if t is bool:
        return int(value)
    return None


def compare_scalar(left: Value, right: Value, op: Compare) -> bool | None:
    """Compare two scalars (arrays and objects are NULL here); None means NULL."""
    a = comparable(left)
    if a is None:
        return None
    b = comparable(right)
    if b is None:
        return None
    a_str = type(a) is str
    if a_str is (type(b) is str):
        return op(a, b)
    if a_str:
        n = parse_number(a)  # type: ignore[arg-type]
        # A string that is not a number is greater than every number.
        return op(1, 0) if n is None else op(n, b)
    n = parse_number(b)  # type: ignore[arg-type]
    return op(0, 1) if n is None else op(a, n)


def compare(left: Value, right: Value, op: Compare) -> bool | None:
    """Array-aware comparison: TRUE if any pair of elements compares TRUE."""
    if type(left) is list or type(right) is list:
        lefts: Sequence[Value] = left if type(left) is list else (left,)
        rights: Sequence[Value] = right if type(right) is list else (right,)
        if not lefts or not rights:
            return None
        unknown = False
        for a in lefts:
            for b in rights:
                r = compare_scalar(a, b, op)
                if r:
                    return True
                if r is None:
                    unknown = True
        return None if unknown else False
    return compare_scalar(left, right, op)


def truth(value: Value) -> bool | None:
    """A value in a logical context (``AND``, ``OR``, ``NOT``, a whole filter).

    Booleans are themselves; numbers are TRUE unless zero (NaN is NULL); the strings
    ``true``/``false`` (any case) and numeric strings convert; an array uses its first
    element; everything else is NULL.
    """
    t = type(value)
    if t is bool:
        return value  # type: ignore[no-any-return]
    if value is None:
        return None
    if t is list:
        if not value:
            return None
        value = value[0]
        t = type(value)
        if t is bool:
            return value  # type: ignore[no-any-return]
    if t is int:
        return value != 0  # type: ignore[no-any-return]
    if t is float:
        return None if value != value else value != 0.0
    if t is str:
        low = value.strip().lower()
        if low == "true":
            return True
        if low == "false":
            return False
        n = parse_number(value)
        if n is None:
            return None
        return None if n != n else n != 0
    return None


def not3(value: bool | None) -> bool | None:
    """Three-valued NOT: NOT NULL is NULL."""
    return None if value is None else not value


def to_number(value: Value) -> int | float | None:
    """The number a scalar (or an array's first element) converts to, or None."""
    t = type(value)
    if t is int or t is float:
        return value  # type: ignore[no-any-return]
    if t is list:
        if not value:
            return None
        value = value[0]
        t = type(value)
        if t is int or t is float:
            return value  # type: ignore[no-any-return]
    if t is str:
        return parse_number(value)
    if t is bool:
        return int(value)
    return None


def to_integer(value: Value) -> int | None:
    """A number truncated toward zero to an int (for positions, lengths, digits), or None."""
    n = to_number(value)
    if n is None:
        return None
    if type(n) is float:
        if not math.isfinite(n):
            return None
        return int(n)
    return n  # type: ignore[return-value]


def format_float(value: float) -> str:
    """The text of a float: shortest round-trip form; ``NaN``, ``Infinity``, ``-Infinity``."""
    if value != value:
        return "NaN"
    if value == math.inf:
        return "Infinity"
    if value == -math.inf:
        return "-Infinity"
    return repr(value)


def to_text(value: Value) -> str | None:
    """The string a scalar (or an array's first element) converts to, or None.

    Numbers use their shortest decimal form, booleans ``true``/``false``; NULL and objects
    have no text.
    """
    t = type(value)
    if t is list:
        if not value:
            return None
        value = value[0]
        t = type(value)
    if t is str:
        return value  # type: ignore[no-any-return]
    if t is int:
        try:
            return str(value)
        except ValueError:  # beyond Python's int->str digit limit
            return None
    if t is float:
        return format_float(value)
    if t is bool:
        return "true" if value else "false"
    return None


def text_operand(value: Value) -> str | None:
    """A scalar as a string *operator* (LIKE, BEGINS WITH) sees it: '' is NULL."""
    if type(value) is str:
        return value or None
    if type(value) is list or type(value) is dict:
        return None
    return to_text(value)


def is_null(value: Value) -> bool:
    """``IS NULL``: missing, JSON null, the empty string or an empty array."""
    if value is None:
        return True
    t = type(value)
    if t is str or t is list:
        return not value
    return False


# --- arithmetic -----------------------------------------------------------------------


def _divide(a: int | float, b: int | float) -> int | float | None:
    if b == 0:
        return None
    return a / b


def _modulo(a: int | float, b: int | float) -> int | float | None:
    """Remainder with the sign of the dividend (C ``fmod``), as AMPS computes it."""
    if b == 0:
        return None
    if type(a) is int and type(b) is int:
        r = abs(a) % abs(b)
        return -r if a < 0 else r
    return math.fmod(a, b)


ARITHMETIC: Final[dict[str, Callable[[Any, Any], Any]]] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "/": _divide,
    "%": _modulo,
}
"""Binary arithmetic operator spelling -> implementation over two numbers."""


def arithmetic(op: Callable[[Any, Any], Any], left: Value, right: Value) -> int | float | None:
    """Apply a binary arithmetic operator to two values (first elements of arrays).

    NULL or a non-numeric operand gives NULL; so do division by zero and results too large
    to represent.
    """
    a = to_number(left)
    if a is None:
        return None
    b = to_number(right)
    if b is None:
        return None
    try:
        return op(a, b)  # type: ignore[no-any-return]
    except (ArithmeticError, ValueError):
        return None


def negate(value: Value) -> int | float | None:
    """Unary minus."""
    n = to_number(value)
    return None if n is None else -n


def positive(value: Value) -> int | float | None:
    """Unary plus: the value as a number."""
    return to_number(value)


# --- set, range and pattern operators ---------------------------------------------------


def in_list(value: Value, items: Sequence[Value]) -> bool | None:
    """``value IN (items)``: the three-valued OR of ``value = item``."""
    unknown = False
    for item in items:
        r = compare(value, item, EQ)
        if r:
            return True
        if r is None:
            unknown = True
    return None if unknown else False


def _between_scalar(value: Value, low: Value, high: Value) -> bool | None:
    a = compare_scalar(value, low, GE)
    if a is False:
        return False
    b = compare_scalar(value, high, LE)
    if b is False:
        return False
    if a is None or b is None:
        return None
    return True


def between(value: Value, low: Value, high: Value) -> bool | None:
    """``value BETWEEN low AND high`` (inclusive), for any element of an array."""
    low = scalar(low)
    high = scalar(high)
    if type(value) is list:
        if not value:
            return None
        unknown = False
        for element in value:
            r = _between_scalar(element, low, high)
            if r:
                return True
            if r is None:
                unknown = True
        return None if unknown else False
    return _between_scalar(value, low, high)


def _like_scalar(value: Value, pattern: Regex) -> bool | None:
    s = text_operand(value)
    if s is None:
        return None
    return pattern.test(s)


def like(value: Value, pattern: Regex) -> bool | None:
    """``value LIKE 'regex'``: a regular-expression *search*, for any element of an array."""
    if type(value) is list:
        if not value:
            return None
        unknown = False
        for element in value:
            r = _like_scalar(element, pattern)
            if r:
                return True
            if r is None:
                unknown = True
        return None if unknown else False
    return _like_scalar(value, pattern)


def affix_match(value: Value, affixes: Sequence[Value], *, ends: bool) -> bool | None:
    """``value BEGINS WITH (...)`` / ``ENDS WITH (...)``: any element, any affix."""
    if type(value) is list:
        if not value:
            return None
        elements: Sequence[Value] = value
    else:
        elements = (value,)
    texts = [text_operand(scalar(a)) for a in affixes]
    unknown = False
    for element in elements:
        s = text_operand(element)
        for t in texts:
            if s is None or t is None:
                unknown = True
            elif s.endswith(t) if ends else s.startswith(t):
                return True
    return None if unknown else False


# --- field paths -------------------------------------------------------------------------


def resolve(value: Value, steps: Sequence[str | int]) -> Value:
    """Follow a field path from a document.

    A key step reads an object member; applied to an array it reads that member of every
    element that is an object and collects the results (nested arrays are flattened one
    level), so ``/legs/px`` is every leg's price. An index step reads an array element
    (negative counts from the end); on a value that is not an array, index ``0`` or ``-1``
    is the value itself (a scalar is a one-element array). Anything missing is NULL.
    """
    for step in steps:
        if value is None:
            return None
        t = type(value)
        if type(step) is str:
            if t is dict:
                value = value.get(step)
            elif t is list:
                found: list[Value] = []
                for element in value:
                    if type(element) is dict and step in element:
                        got = element[step]
                        if type(got) is list:
                            found.extend(got)
                        else:
                            found.append(got)
                value = found if found else None
            else:
                return None
        elif t is list:
            try:
                value = value[step]
            except IndexError:
                return None
        elif step != 0 and step != -1:
            return None
    return value
