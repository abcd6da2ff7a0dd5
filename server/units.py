"""Sizes and durations as operators write them: ``64MB``, ``512KB``, ``30us``, ``15s``, ``2h``.

docs/configuration.md writes every size and duration with a unit, the way AMPS configuration files do.
This module turns that text into the numbers the broker uses (``int`` bytes, ``float``
seconds) and back, so the parser, the docs and ``spool config show-default`` agree.

Grammar (whitespace around the text and between number and unit is allowed)::

    size     := NUMBER [ B | KB | MB | GB | TB | KiB | MiB | GiB | TiB ]   (case-insensitive)
    duration := NUMBER [ ns | us | µs | ms | s | m | h | d ]               (case-sensitive)
    NUMBER   := DIGITS [ "." DIGITS ]

A size without a unit is bytes; ``KB`` is 1024 bytes (binary units, as AMPS uses them) and
``KiB`` is accepted as a synonym. A size must come to a whole number of bytes (``1.5KB`` is
1536, ``1.1KB`` is refused). A duration without a unit is seconds. Duration units are
case-sensitive because ``m`` (minute) and ``M`` would otherwise be a trap; signs and
exponents are refused so that ``-1s`` or ``1e3ms`` cannot slip through as something the
operator did not mean.

Arithmetic is done in :class:`decimal.Decimal`, so ``3ms`` is exactly the float nearest to
0.003 (not ``3 * 0.001``), and :func:`format_duration` / :func:`format_size` round-trip
through the parsers exactly.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, Inexact, InvalidOperation, localcontext
from typing import Final

from spool.server.protocol.errors import SpoolError

__all__ = [
    "DURATION_UNITS",
    "SIZE_UNITS",
    "UnitError",
    "format_duration",
    "format_size",
    "parse_duration",
    "parse_size",
]


class UnitError(SpoolError, ValueError):
    """A size or duration that cannot be read.

    Attributes:
        text: the text as given.
        kind: ``"size"`` or ``"duration"``.
        reason: what is wrong with it, for a human.
    """

    def __init__(self, text: str, kind: str, reason: str) -> None:
        self.text = text
        self.kind = kind
        self.reason = reason
        super().__init__(f"{text!r} is not a valid {kind}: {reason}")


#: Size units in bytes, keyed by their upper-case spelling (matching is case-insensitive).
SIZE_UNITS: Final[dict[str, int]] = {
    "B": 1,
    "KB": 1024,
    "MB": 1024**2,
    "GB": 1024**3,
    "TB": 1024**4,
    "KIB": 1024,
    "MIB": 1024**2,
    "GIB": 1024**3,
    "TIB": 1024**4,
}

#: Duration units in seconds (exact decimals), keyed by their spelling (case-sensitive).
DURATION_UNITS: Final[dict[str, Decimal]] = {
    "ns": Decimal("0.000000001"),
    "us": Decimal("0.000001"),
    "µs": Decimal("0.000001"),
    "ms": Decimal("0.001"),
    "s": Decimal(1),
    "m": Decimal(60),
    "h": Decimal(3600),
    "d": Decimal(86400),
}

# Units the formatters use, largest first (synonyms left out so the output is canonical).
_SIZE_FORMAT_ORDER: Final[tuple[str, ...]] = ("TB", "GB", "MB", "KB")
_DURATION_FORMAT_ORDER: Final[tuple[str, ...]] = ("d", "h", "m", "s", "ms", "us", "ns")

_QUANTITY: Final = re.compile(r"\s*(?P<number>[0-9]+(?:\.[0-9]+)?)\s*(?P<unit>[^\s0-9.]*)\s*")
# Enough digits that no arithmetic on a float's decimal expansion (at most ~770 significant
# digits for subnormals, 17 for the shortest repr) is ever rounded.
_PRECISION: Final = 1000
_SIZE_UNIT_LIST: Final = "B, KB, MB, GB, TB (KiB, MiB, GiB, TiB are synonyms)"
_DURATION_UNIT_LIST: Final = "ns, us, ms, s, m, h, d"


def _split(text: str, kind: str) -> tuple[Decimal, str]:
    """Split ``text`` into its number and its unit spelling, or raise :class:`UnitError`."""
    if not text.strip():
        raise UnitError(text, kind, "it is empty")
    match = _QUANTITY.fullmatch(text)
    if match is None:
        stripped = text.strip()
        if stripped[:1] in "+-":
            reason = "a sign is not allowed (values are never negative)"
        elif not stripped[:1].isdigit():
            reason = "it must start with a number, e.g. " + (
                "'64MB'" if kind == "size" else "'15s'"
            )
        else:
            reason = "expected a number followed by one unit, e.g. " + (
                "'64MB'" if kind == "size" else "'15s'"
            )
        raise UnitError(text, kind, reason)
    try:
        number = Decimal(match.group("number"))
    except InvalidOperation as exc:  # pragma: no cover - the regex admits only decimals
        raise UnitError(text, kind, "the number cannot be read") from exc
    return number, match.group("unit")


def parse_size(text: str) -> int:
    """Parse a size such as ``64MB`` into bytes.

    Args:
        text: the size as written; a plain integer is bytes.

    Returns:
        The size in bytes.

    Raises:
        UnitError: unknown unit, malformed number, or not a whole number of bytes.
    """
    number, unit = _split(text, "size")
    factor = SIZE_UNITS.get(unit.upper() if unit else "B")
    if factor is None:
        raise UnitError(text, "size", f"unknown unit {unit!r} (use {_SIZE_UNIT_LIST})")
    with localcontext() as ctx:
        ctx.prec = _PRECISION
        value = number * factor
    if value != value.to_integral_value():
        raise UnitError(text, "size", f"it is not a whole number of bytes ({value})")
    return int(value)


def parse_duration(text: str) -> float:
    """Parse a duration such as ``15s`` or ``30us`` into seconds.

    Args:
        text: the duration as written; a plain number is seconds.

    Returns:
        The duration in seconds, the float nearest to the exact decimal value.

    Raises:
        UnitError: unknown unit or malformed number.
    """
    number, unit = _split(text, "duration")
    factor = DURATION_UNITS.get(unit or "s")
    if factor is None:
        hint = ""
        if unit.lower() in DURATION_UNITS:
            hint = f"; units are case-sensitive, did you mean {unit.lower()!r}?"
        raise UnitError(
            text, "duration", f"unknown unit {unit!r} (use {_DURATION_UNIT_LIST}){hint}"
        )
    with localcontext() as ctx:
        ctx.prec = _PRECISION
        seconds = float(number * factor)
    if not math.isfinite(seconds):
        raise UnitError(text, "duration", "it is too large")
    return seconds


def format_size(n: int) -> str:
    """Write ``n`` bytes with the largest unit that divides it exactly (``67108864`` -> ``64MB``).

    Raises:
        UnitError: ``n`` is negative.
    """
    if n < 0:
        raise UnitError(str(n), "size", "sizes are never negative")
    for unit in _SIZE_FORMAT_ORDER:
        factor = SIZE_UNITS[unit]
        if n and n % factor == 0:
            return f"{n // factor}{unit}"
    return f"{n}B"


def format_duration(seconds: float) -> str:
    """Write a duration with the largest unit giving a whole number (``0.001`` -> ``1ms``).

    The result parses back to exactly ``seconds``. Values that are not a whole number of
    any unit are written in seconds with as many decimals as the float needs.

    Raises:
        UnitError: ``seconds`` is negative, infinite or NaN.
    """
    if not math.isfinite(seconds) or seconds < 0:
        raise UnitError(repr(seconds), "duration", "durations are finite and never negative")
    # repr() is the shortest decimal that reads back as the same float.
    exact = Decimal(repr(float(seconds)))
    if exact == 0:
        return "0s"
    for unit in _DURATION_FORMAT_ORDER:
        with localcontext() as ctx:
            ctx.prec = _PRECISION
            ctx.traps[Inexact] = True
            try:
                count = exact / DURATION_UNITS[unit]
            except Inexact:
                continue
        if count == count.to_integral_value():
            return f"{int(count)}{unit}"
    return f"{exact:f}s"
