"""Parsing of the times and durations that operators type into the stats API and CLI.

Times (``t0`` / ``t1`` / ``before`` / ``--since``) are accepted as:

- ``YYYYmmddTHHMMSS[.ffffff][Z]``: the bookmark timestamp form of docs/protocol.md, always UTC;
- ISO-8601 (``2024-05-01T12:00:00Z``, ``2024-05-01 12:00``, offsets); naive means UTC;
- a plain number: seconds since the Unix epoch.

Durations (``step``, ``older_than``) are written as in the configuration file
(server/units.py: ``10s``, ``1.5h``, ``7d``, ``500ms``) or a plain number of seconds.
Every parser raises :class:`BadTimeValue` with a message fit for a 400 response.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime
from typing import Final

from spool.server import units
from spool.server.protocol.errors import SpoolError

_COMPACT: Final = re.compile(r"^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})(?:\.(\d{1,6}))?Z?$")


class BadTimeValue(SpoolError, ValueError):
    """A time or duration that none of the accepted forms matches."""


def parse_time(text: str) -> float:
    """Seconds since the epoch for ``text`` (see the module docstring for the forms).

    Raises:
        BadTimeValue: unrecognised or out-of-range value.
    """
    value = text.strip()
    if not value:
        raise BadTimeValue("empty time")
    try:
        number = float(value)
    except ValueError:
        pass
    else:
        if not math.isfinite(number):
            raise BadTimeValue(f"bad time {text!r}")
        return number
    match = _COMPACT.match(value)
    try:
        if match is not None:
            y, mo, d, h, mi, s, frac = match.groups()
            micro = int((frac or "0").ljust(6, "0"))
            moment = datetime(int(y), int(mo), int(d), int(h), int(mi), int(s), micro, tzinfo=UTC)
        else:
            moment = datetime.fromisoformat(value)
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=UTC)
    except ValueError as exc:
        raise BadTimeValue(
            f"bad time {text!r}: use YYYYmmddTHHMMSS[Z], ISO-8601 or epoch seconds"
        ) from exc
    return moment.timestamp()


def parse_duration(text: str) -> float:
    """Seconds for a duration such as ``10s``, ``1m``, ``7d`` or ``30`` (seconds).

    The units are those of the configuration file (:func:`spool.server.units.parse_duration`).

    Raises:
        BadTimeValue: unrecognised form, or not strictly positive.
    """
    try:
        seconds = units.parse_duration(text)
    except units.UnitError as exc:
        raise BadTimeValue(str(exc)) from exc
    if seconds <= 0:
        raise BadTimeValue(f"duration must be positive: {text!r}")
    return seconds


def format_time(ts: float) -> str:
    """ISO-8601 UTC with a ``Z`` (what the API returns for times)."""
    moment = datetime.fromtimestamp(ts, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
