"""Date and time functions: ``NOW``, ``UNIX_TIMESTAMP``, ``ISO8601``, ``FROM_UNIXTIME``,
``DATEDIFF``, and the ISO-8601 reading and writing they share.

A timestamp is epoch seconds or an ISO-8601 string (the extended form people write, or the
basic form of bookmarks and journal timestamps). ``NOW()`` and the argument-less forms
read the :class:`~spool.server.clock.Clock` the expression was compiled with (the system clock
unless the caller injects another), so tests run on virtual time; being ``clock``
functions, the compiler never folds them into constants.
"""

from __future__ import annotations

import datetime as _dt
import math
import re
from typing import TYPE_CHECKING, Final

from spool.server.expr.ast import Call
from spool.server.expr.ast import Literal as LiteralNode
from spool.server.expr.errors import FilterSyntaxError
from spool.server.expr.functions.function import Function
from spool.server.expr.values import Value, to_number, to_text

if TYPE_CHECKING:
    from spool.server.clock import Clock

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


def _check_datediff(call: Call, text: str) -> int:
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
    return 0


TIME_FUNCTIONS: Final[tuple[Function, ...]] = (
    Function("NOW", 0, 0, _now, kind="clock", summary="current time, epoch seconds"),
    Function(
        "UNIX_TIMESTAMP",
        0,
        1,
        _unix_timestamp,
        kind="clock",
        summary="current time, or a timestamp, as epoch seconds",
    ),
    Function(
        "ISO8601",
        0,
        1,
        _iso8601,
        kind="clock",
        summary="current time, or a timestamp, as ISO-8601",
    ),
    Function(
        "FROM_UNIXTIME", 1, 2, _from_unixtime, summary="epoch seconds as ISO-8601 or strftime"
    ),
    Function(
        "DATEDIFF",
        3,
        3,
        _datediff,
        summary="DATEDIFF(unit, start, end): end - start in a unit",
        check=_check_datediff,
    ),
)
"""The date and time functions, in the order docs/filters.md lists them."""
