"""The ``Every`` option of ``amps-action-on-schedule``: a timer, a daily or a weekly time.

The three forms of the AMPS documentation, and the spellings an operator is likely to
write for them::

    15s   4h   1d                      a timer (a duration, from the start of the instance)
    02:00   Daily 02:00   daily at 02:00:30          every day at that time
    Sun 03:00   Weekly Sun 03:00   Sunday at 03:00    every week on that day at that time

Calendar times are in the action's ``TimeZone`` option (an IANA name such as
``Europe/Paris``), UTC when it is absent. A ``Z`` after the time (``02:00Z``) says UTC
explicitly, as in AMPS; it contradicts a ``TimeZone`` that is not UTC. Words are
case-insensitive; day names are English, whole or in three letters.

This module only parses (sans-I/O apart from loading the zone from the system's time
zone database); :mod:`spool.server.actions.schedule` computes when a schedule fires.
"""

from __future__ import annotations

import re
import zoneinfo
from typing import Final

from spool.server.config.actions import Schedule
from spool.server.units import UnitError, parse_duration

__all__ = ["MAX_INTERVAL", "MIN_INTERVAL", "ScheduleError", "check_zone", "parse_every"]

#: Shortest and longest timer of an ``every`` schedule (seconds).
MIN_INTERVAL: Final = 1.0
MAX_INTERVAL: Final = 366 * 86400.0

_DAYS: Final = {
    "mon": 0, "monday": 0, "tue": 1, "tues": 1, "tuesday": 1, "wed": 2, "wednesday": 2,
    "thu": 3, "thur": 3, "thurs": 3, "thursday": 3, "fri": 4, "friday": 4,
    "sat": 5, "saturday": 5, "sun": 6, "sunday": 6,
}  # fmt: skip
_TIME: Final = re.compile(r"(?P<h>\d{1,2}):(?P<m>\d{2})(?::(?P<s>\d{2}))?(?P<z>[zZ])?")


class ScheduleError(ValueError):
    """An ``Every`` or ``TimeZone`` value that cannot be a schedule (the message says why)."""


def check_zone(name: str) -> str:
    """An IANA time zone name that the system's time zone database has.

    Raises:
        ScheduleError: unknown zone.
    """
    if name.upper() in ("UTC", "Z"):
        return "UTC"
    try:
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ScheduleError(
            f"unknown time zone {name!r} (use an IANA name such as Europe/Paris, or UTC)"
        ) from None
    return name


def _time_of_day(text: str, whole: str) -> tuple[int, bool]:
    """``HH:MM[:SS][Z]`` as seconds after midnight, and whether it said UTC (``Z``)."""
    match = _TIME.fullmatch(text)
    if match is None:
        raise ScheduleError(
            f"{whole!r} is not a schedule: expected a duration (15m, 4h, 1d), a time of day "
            "(02:00, Daily 02:00) or a day and a time (Sun 03:00, Weekly Sun 03:00)"
        )
    hours, minutes = int(match["h"]), int(match["m"])
    seconds = int(match["s"] or 0)
    if hours > 23 or minutes > 59 or seconds > 59:
        raise ScheduleError(f"{text!r} in {whole!r} is not a time of day (00:00 to 23:59:59)")
    return hours * 3600 + minutes * 60 + seconds, match["z"] is not None


def parse_every(text: str, zone: str | None = None) -> Schedule:
    """Read an ``Every`` value (see the module docstring).

    Args:
        text: the value as written.
        zone: the ``TimeZone`` option, already checked with :func:`check_zone`, or None.

    Raises:
        ScheduleError: not a schedule, a timer out of range, a day or time that does not
            exist, or ``Z`` with a zone that is not UTC; a zone with a timer.
    """
    words = text.split()
    if not words:
        raise ScheduleError("an empty schedule")
    if len(words) == 1 and _TIME.fullmatch(words[0]) is None:
        try:
            interval = parse_duration(words[0])
        except UnitError as exc:
            raise ScheduleError(
                f"{text!r} is not a schedule: {exc}; or give a time of day (02:00) or a day "
                "and a time (Sun 03:00)"
            ) from None
        if not MIN_INTERVAL <= interval <= MAX_INTERVAL:
            raise ScheduleError(
                f"a timer of {text!r} is out of range (from {MIN_INTERVAL:g}s to 366d)"
            )
        if zone is not None:
            raise ScheduleError(
                f"TimeZone applies to calendar times, not to a timer of {text!r}; remove it"
            )
        return Schedule("every", interval=interval, text=text)
    lowered = [w.lower() for w in words]
    kind = "daily"
    weekday: int | None = None
    if lowered[0] in ("daily", "weekly"):
        kind = lowered.pop(0)
    if lowered and lowered[0] in _DAYS:
        weekday = _DAYS[lowered.pop(0)]
        if kind == "daily" and words[0].lower() == "daily":
            raise ScheduleError(f"{text!r}: a daily schedule names no day (write Weekly ...)")
        kind = "weekly"
    elif kind == "weekly":
        raise ScheduleError(
            f"{text!r}: a weekly schedule needs a day (Mon, Tue, Wed, Thu, Fri, Sat or Sun)"
        )
    if lowered and lowered[0] == "at":
        lowered.pop(0)
    if len(lowered) != 1:
        raise ScheduleError(
            f"{text!r} is not a schedule: expected a duration (15m, 4h, 1d), a time of day "
            "(02:00, Daily 02:00) or a day and a time (Sun 03:00, Weekly Sun 03:00)"
        )
    seconds, utc = _time_of_day(lowered[0], text)
    if utc and zone not in (None, "UTC"):
        raise ScheduleError(f"{text!r} says UTC (Z) but TimeZone is {zone}: keep one of them")
    if kind == "weekly":
        return Schedule(
            "weekly", time_of_day=seconds, weekday=weekday, zone=zone or "UTC", text=text
        )
    return Schedule("daily", time_of_day=seconds, zone=zone or "UTC", text=text)
