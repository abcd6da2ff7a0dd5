"""The built-in functions of the expression language.

Function names are case-insensitive. Unless a function is marked ``arrays``, it is not
array aware: an array argument is replaced by its first element before the call (the AMPS
rule). Every implementation is total: a NULL argument gives NULL unless the function says
otherwise (``COALESCE``, ``CONCAT``, ``ARRAY_COUNT``), and any data problem (a string where
a number is needed, a number out of range) gives NULL instead of raising -- :func:`invoke`
enforces that for both evaluators.

Three kinds of functions exist: ``pure`` ones depend only on their arguments (the compiler
folds them when the arguments are constants), ``message`` ones read the message being
filtered (``TOPIC()``, ``BOOKMARK()``, ``TIMESTAMP()``, ``CLIENT_NAME()``), and ``clock``
ones read the injected :class:`~server.clock.Clock` (``NOW()``, ``UNIX_TIMESTAMP()``).
"""

from __future__ import annotations

import datetime as _dt
import difflib
import functools
import math
import re
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal, localcontext
from typing import TYPE_CHECKING, Any, Final, Literal

from server.expr.ast import Call
from server.expr.ast import Literal as LiteralNode
from server.expr.errors import FilterSyntaxError
from server.expr.values import (
    GT,
    LT,
    Value,
    comparable,
    compare_scalar,
    is_null,
    scalar,
    to_integer,
    to_number,
    to_text,
)

if TYPE_CHECKING:
    from server.clock import Clock
    from server.expr.view import MessageView

Kind = Literal["pure", "message", "clock"]

RUNTIME_ERRORS: Final = (ArithmeticError, ValueError, TypeError, LookupError, re.error)
"""What a function may raise on odd data; :func:`invoke` turns it into NULL."""


@dataclass(frozen=True, slots=True)
class Function:
    """One built-in function.

    Attributes:
        name: upper-case name.
        min_args, max_args: accepted argument counts (``max_args`` None: any number).
        impl: ``impl(*args)`` for pure functions, ``impl(view)`` for message functions,
            ``impl(clock, *args)`` for clock functions.
        kind: ``pure``, ``message`` or ``clock``.
        arrays: whether arguments are passed whole (arrays included) instead of their first
            element.
        check: compile-time validation of literal arguments (e.g. a regular expression).
        summary: one line for error messages and the docs.
    """

    name: str
    min_args: int
    max_args: int | None
    impl: Callable[..., Any]
    kind: Kind = "pure"
    arrays: bool = False
    check: Callable[[Call, str], None] | None = None
    summary: str = ""

    def arity(self) -> str:
        """``takes 1 argument``, ``takes 2 or 3 arguments``, ``takes at least 1 argument``."""
        lo, hi = self.min_args, self.max_args
        if hi is None:
            return f"takes at least {lo} argument{'s' if lo != 1 else ''}"
        if lo == hi:
            return f"takes {lo} argument{'s' if lo != 1 else ''}" if lo else "takes no arguments"
        if hi == lo + 1:
            return f"takes {lo} or {hi} arguments"
        return f"takes {lo} to {hi} arguments"


def invoke(fn: Function, args: Sequence[Value], view: MessageView, clock: Clock) -> Value:
    """Call ``fn`` on evaluated arguments the way both evaluators must: total, NULL on error."""
    if not fn.arrays:
        args = [scalar(a) for a in args]
    try:
        if fn.kind == "pure":
            return fn.impl(*args)
        if fn.kind == "message":
            return fn.impl(view)
        return fn.impl(clock, *args)
    except RUNTIME_ERRORS:
        return None


# --- regular expressions ---------------------------------------------------------------


@functools.lru_cache(maxsize=512)
def _regex(pattern: str) -> re.Pattern[str] | None:
    try:
        return re.compile(pattern)
    except (re.error, RecursionError, OverflowError):
        return None


def compile_regex(pattern: str, node_pos: int, text: str, what: str) -> re.Pattern[str]:
    """Compile a literal pattern at compile time, or raise a ``bad filter`` that says why."""
    try:
        return re.compile(pattern)
    except re.error as exc:
        where = f" (at offset {exc.pos} of the pattern)" if exc.pos is not None else ""
        raise FilterSyntaxError(
            f"bad regular expression in {what}: {exc.msg}{where}", node_pos, text
        ) from exc
    except (RecursionError, OverflowError) as exc:
        raise FilterSyntaxError(
            f"bad regular expression in {what}: too complex", node_pos, text
        ) from exc


# --- string comparison -------------------------------------------------------------------


def _instr(s: Value, sub: Value) -> int | None:
    a, b = to_text(s), to_text(sub)
    if a is None or b is None:
        return None
    return a.find(b) + 1


def _instr_i(s: Value, sub: Value) -> int | None:
    a, b = to_text(s), to_text(sub)
    if a is None or b is None:
        return None
    return a.lower().find(b.lower()) + 1


def _strequal_i(x: Value, y: Value) -> bool | None:
    a, b = to_text(x), to_text(y)
    if a is None or b is None:
        return None
    return a.lower() == b.lower()


def _starts_with(s: Value, prefix: Value) -> bool | None:
    a, b = to_text(s), to_text(prefix)
    if a is None or b is None:
        return None
    return a.startswith(b)


def _ends_with(s: Value, suffix: Value) -> bool | None:
    a, b = to_text(s), to_text(suffix)
    if a is None or b is None:
        return None
    return a.endswith(b)


def _contains(s: Value, sub: Value) -> bool | None:
    a, b = to_text(s), to_text(sub)
    if a is None or b is None:
        return None
    return b in a


def _regexp_match(s: Value, pattern: Value) -> bool | None:
    a, p = to_text(s), to_text(pattern)
    if a is None or p is None:
        return None
    rx = _regex(p)
    if rx is None:
        return None
    return rx.search(a) is not None


def _check_regexp_match(call: Call, text: str) -> None:
    pattern = call.args[1]
    if isinstance(pattern, LiteralNode) and isinstance(pattern.value, str):
        compile_regex(pattern.value, pattern.pos, text, "REGEXP_MATCH")


# --- string manipulation -----------------------------------------------------------------


def _concat(*args: Value) -> str:
    parts = [to_text(a) for a in args]
    return "".join(p for p in parts if p is not None)


def _upper(s: Value) -> str | None:
    a = to_text(s)
    return None if a is None else a.upper()


def _lower(s: Value) -> str | None:
    a = to_text(s)
    return None if a is None else a.lower()


def _replace(s: Value, old: Value, new: Value) -> str | None:
    a, b, c = to_text(s), to_text(old), to_text(new)
    if a is None or b is None or c is None:
        return None
    if not b:
        return a
    return a.replace(b, c)


def _substr(s: Value, pos: Value, *length: Value) -> str | None:
    a = to_text(s)
    p = to_integer(pos)
    if a is None or p is None:
        return None
    n = len(a)
    start = p - 1 if p > 0 else max(n + p, 0) if p < 0 else 0
    if not length:
        return a[start:]
    k = to_integer(length[0])
    if k is None:
        return None
    if k <= 0:
        return ""
    return a[start : start + k]


def _length(s: Value) -> int | None:
    a = to_text(s)
    return None if a is None else len(a)


def _trimmer(method: str) -> Callable[..., str | None]:
    def trim(s: Value, *chars: Value) -> str | None:
        a = to_text(s)
        if a is None:
            return None
        if not chars:
            return getattr(a, method)()  # type: ignore[no-any-return]
        c = to_text(chars[0])
        if c is None:
            return None
        return getattr(a, method)(c)  # type: ignore[no-any-return]

    return trim


def _reverse(s: Value) -> str | None:
    a = to_text(s)
    return None if a is None else a[::-1]


# --- numeric -----------------------------------------------------------------------------


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


# --- date and time -----------------------------------------------------------------------

_EPOCH: Final = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
_ONE_US: Final = _dt.timedelta(microseconds=1)
_ISO_EXTENDED: Final = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})"
    r"(?:[Tt ](\d{2}):(\d{2})(?::(\d{2})(?:[.,](\d{1,9}))?)?)?"
    r"(Z|z|[+-]\d{2}(?::?\d{2})?)?",
    re.ASCII,
)
_ISO_BASIC: Final = re.compile(
    r"(\d{4})(\d{2})(\d{2})"
    r"(?:[Tt](\d{2})(\d{2})(?:(\d{2})(?:[.,](\d{1,9}))?)?)?"
    r"(Z|z|[+-]\d{2}(?:\d{2})?)?",
    re.ASCII,
)
UNITS: Final[dict[str, tuple[int, int]]] = {
    # unit -> (multiplier, divisor) applied to a difference in seconds
    "microsecond": (1_000_000, 1),
    "microseconds": (1_000_000, 1),
    "us": (1_000_000, 1),
    "millisecond": (1000, 1),
    "milliseconds": (1000, 1),
    "ms": (1000, 1),
    "second": (1, 1),
    "seconds": (1, 1),
    "s": (1, 1),
    "minute": (1, 60),
    "minutes": (1, 60),
    "m": (1, 60),
    "hour": (1, 3600),
    "hours": (1, 3600),
    "h": (1, 3600),
    "day": (1, 86400),
    "days": (1, 86400),
    "d": (1, 86400),
    "week": (1, 604800),
    "weeks": (1, 604800),
    "w": (1, 604800),
}


def parse_time(text: str) -> float | None:
    """Seconds since the Unix epoch for an ISO-8601 timestamp, or None.

    Accepts the extended form (``2024-01-02``, ``2024-01-02T03:04:05.123456Z``, a space
    instead of ``T``, an offset ``+02:00``) and the basic form used by bookmarks and
    journal timestamps (``20240102T030405.123456Z``). No offset means UTC.
    """
    s = text.strip()
    m = _ISO_EXTENDED.fullmatch(s) or _ISO_BASIC.fullmatch(s)
    if m is None:
        return None
    year, month, day, hour, minute, second, frac, zone = m.groups()
    try:
        moment = _dt.datetime(
            int(year),
            int(month),
            int(day),
            int(hour or 0),
            int(minute or 0),
            int(second or 0),
            int((frac or "").ljust(6, "0")[:6]),
            tzinfo=_dt.UTC,
        )
    except ValueError:
        return None
    micros = (moment - _EPOCH) // _ONE_US
    if zone and zone not in "Zz":
        digits = zone[1:].replace(":", "")
        offset = int(digits[:2]) * 3600 + int(digits[2:4] or 0) * 60
        micros -= (offset if zone[0] == "+" else -offset) * 1_000_000
    return micros / 1_000_000


def format_time(seconds: int | float) -> str | None:
    """``YYYY-MM-DDTHH:MM:SS.ffffffZ`` (UTC, microseconds) for epoch seconds, or None."""
    if type(seconds) is float and not math.isfinite(seconds):
        return None
    try:
        moment = _EPOCH + _dt.timedelta(microseconds=round(seconds * 1_000_000))
    except OverflowError:
        return None
    return (
        f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d}T"
        f"{moment.hour:02d}:{moment.minute:02d}:{moment.second:02d}.{moment.microsecond:06d}Z"
    )


def to_epoch(value: Value) -> int | float | None:
    """Epoch seconds from a number, an ISO-8601 string or a numeric string."""
    if type(value) is str:
        t = parse_time(value)
        if t is not None:
            return t
    n = to_number(value)
    if n is None or (type(n) is float and not math.isfinite(n)):
        return None
    return n


def _now(clock: Clock) -> float:
    return clock.time()


def _unix_timestamp(clock: Clock, *args: Value) -> int | float | None:
    if not args:
        return clock.time()
    return to_epoch(args[0])


def _iso8601(clock: Clock, *args: Value) -> str | None:
    t = clock.time() if not args else to_epoch(args[0])
    return None if t is None else format_time(t)


def _from_unixtime(seconds: Value, *fmt: Value) -> str | None:
    t = to_number(seconds)
    if t is None:
        return None
    if not fmt:
        return format_time(t)
    f = to_text(fmt[0])
    if f is None or (type(t) is float and not math.isfinite(t)):
        return None
    moment = _EPOCH + _dt.timedelta(microseconds=round(t * 1_000_000))
    return moment.strftime(f)


def _datediff(unit: Value, start: Value, end: Value) -> int | float | None:
    u = to_text(unit)
    scale = UNITS.get(u.strip().lower()) if u is not None else None
    a, b = to_epoch(start), to_epoch(end)
    if scale is None or a is None or b is None:
        return None
    mul, div = scale
    diff = (b - a) * mul
    return diff / div if div != 1 else diff


def _check_datediff(call: Call, text: str) -> None:
    unit = call.args[0]
    if (
        isinstance(unit, LiteralNode)
        and isinstance(unit.value, str)
        and unit.value.strip().lower() not in UNITS
    ):
        raise FilterSyntaxError(
            f"unknown DATEDIFF unit {unit.value!r} "
            "(use 'us', 'ms', 's', 'minutes', 'hours', 'days' or 'weeks')",
            unit.pos,
            text,
        )


# --- arrays ------------------------------------------------------------------------------


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
    return d.join(parts)


# --- NULL, checksums, typed values, the message ------------------------------------------


def _coalesce(*args: Value) -> Value:
    for a in args:
        if not is_null(a):
            return a
    return None


def _crc32(x: Value) -> int | None:
    s = to_text(x)
    return None if s is None else zlib.crc32(s.encode("utf-8")) & 0xFFFFFFFF


def _char_value(x: Value) -> str | None:
    n = to_integer(x)
    if n is None or not 0 <= n <= 255:
        return None
    return chr(n)


def _topic(view: MessageView) -> str:
    return view.topic


def _bookmark(view: MessageView) -> str:
    return view.bookmark


def _timestamp(view: MessageView) -> str:
    return view.timestamp


def _client_name(view: MessageView) -> str:
    return view.client_name


def _f(
    name: str,
    lo: int,
    hi: int | None,
    impl: Callable[..., Any],
    summary: str,
    *,
    kind: Kind = "pure",
    arrays: bool = False,
    check: Callable[[Call, str], None] | None = None,
) -> Function:
    return Function(name, lo, hi, impl, kind, arrays, check, summary)


FUNCTIONS: Final[dict[str, Function]] = {
    f.name: f
    for f in (
        # string comparison
        _f("INSTR", 2, 2, _instr, "1-based position of a substring, 0 if absent"),
        _f("INSTR_I", 2, 2, _instr_i, "INSTR ignoring case"),
        _f("STREQUAL_I", 2, 2, _strequal_i, "string equality ignoring case"),
        _f("STARTS_WITH", 2, 2, _starts_with, "whether a string starts with a prefix"),
        _f("ENDS_WITH", 2, 2, _ends_with, "whether a string ends with a suffix"),
        _f("CONTAINS", 2, 2, _contains, "whether a string contains a substring"),
        _f(
            "REGEXP_MATCH",
            2,
            2,
            _regexp_match,
            "whether a regular expression matches anywhere in a string",
            check=_check_regexp_match,
        ),
        # string manipulation
        _f("CONCAT", 1, None, _concat, "concatenation; NULL arguments are skipped"),
        _f("UPPER", 1, 1, _upper, "upper case"),
        _f("LOWER", 1, 1, _lower, "lower case"),
        _f("REPLACE", 3, 3, _replace, "replace every occurrence of a substring"),
        _f("SUBSTR", 2, 3, _substr, "substring from a 1-based position"),
        _f("LENGTH", 1, 1, _length, "number of characters"),
        _f("LTRIM", 1, 2, _trimmer("lstrip"), "strip leading blanks (or given characters)"),
        _f("RTRIM", 1, 2, _trimmer("rstrip"), "strip trailing blanks (or given characters)"),
        _f("TRIM", 1, 2, _trimmer("strip"), "strip both ends"),
        _f("REVERSE", 1, 1, _reverse, "characters in reverse order"),
        # numeric
        _f("ABS", 1, 1, _abs, "absolute value"),
        _f("CEILING", 1, 1, _ceiling, "smallest integer not below"),
        _f("FLOOR", 1, 1, _floor, "largest integer not above"),
        _f("ROUND", 1, 2, _round, "round half away from zero, optionally to N decimals"),
        _f("MOD", 2, 2, _mod, "remainder with the sign of the dividend"),
        _f("POWER", 2, 2, _power, "x to the power y"),
        _f("SQRT", 1, 1, _sqrt, "square root"),
        _f("LOG", 1, 2, _log, "base-10 logarithm, or LOG(base, x)"),
        _f("LN", 1, 1, _ln, "natural logarithm"),
        _f("EXP", 1, 1, _exp, "e to the power x"),
        # date and time
        _f("NOW", 0, 0, _now, "current time, epoch seconds", kind="clock"),
        _f(
            "UNIX_TIMESTAMP",
            0,
            1,
            _unix_timestamp,
            "current time, or a timestamp, as epoch seconds",
            kind="clock",
        ),
        _f("ISO8601", 0, 1, _iso8601, "current time, or a timestamp, as ISO-8601", kind="clock"),
        _f("FROM_UNIXTIME", 1, 2, _from_unixtime, "epoch seconds as ISO-8601 or strftime"),
        _f(
            "DATEDIFF",
            3,
            3,
            _datediff,
            "DATEDIFF(unit, start, end): end - start in a unit",
            check=_check_datediff,
        ),
        # arrays
        _f("ARRAY_COUNT", 1, 1, _array_count, "number of elements", arrays=True),
        _f("ARRAY_SUM", 1, 1, _array_sum, "sum of the numeric elements", arrays=True),
        _f("ARRAY_AVG", 1, 1, _array_avg, "mean of the numeric elements", arrays=True),
        _f("ARRAY_MIN", 1, 1, _array_min, "smallest element", arrays=True),
        _f("ARRAY_MAX", 1, 1, _array_max, "largest element", arrays=True),
        _f(
            "ARRAY_TO_STRING",
            2,
            3,
            _array_to_string,
            "elements joined by a delimiter",
            arrays=True,
        ),
        # NULL handling, checksums, typed values
        _f("COALESCE", 1, None, _coalesce, "first argument that is not NULL"),
        _f("CRC32", 1, 1, _crc32, "CRC-32 (IEEE) of the UTF-8 text, unsigned"),
        _f("TRUE_VALUE", 0, 0, lambda: True, "boolean true"),
        _f("FALSE_VALUE", 0, 0, lambda: False, "boolean false"),
        _f("NAN_VALUE", 0, 0, lambda: math.nan, "not-a-number"),
        _f("CHAR_VALUE", 1, 1, _char_value, "the character with a code 0-255"),
        # the message and its publisher
        _f("TOPIC", 0, 0, _topic, "topic of the message", kind="message"),
        _f("BOOKMARK", 0, 0, _bookmark, "bookmark of the message", kind="message"),
        _f("TIMESTAMP", 0, 0, _timestamp, "time the message was recorded", kind="message"),
        _f("CLIENT_NAME", 0, 0, _client_name, "name of the publisher", kind="message"),
    )
}
"""Every built-in function by upper-case name (``IF`` is syntax: see the parser)."""


def lookup(name: str, pos: int, text: str) -> Function:
    """The function called ``name`` (any case), or a ``bad filter`` naming close matches."""
    fn = FUNCTIONS.get(name.upper())
    if fn is None:
        close = difflib.get_close_matches(name.upper(), [*FUNCTIONS, "IF"], n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise FilterSyntaxError(f"unknown function {name!r}{hint}", pos, text)
    return fn
