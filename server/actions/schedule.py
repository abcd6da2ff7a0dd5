"""When a calendar schedule fires next: daily and weekly times in a named time zone.

Pure functions of a :class:`~spool.server.config.Schedule` and an instant (epoch seconds); the
trigger (:mod:`spool.server.actions.triggers`) sleeps on the injected clock until the instant
this returns. Timers (``every``) are not here: they count from the instance's start on the
monotonic clock.

Daylight-saving time, the two cases a local time of day can fall into:

- **a gap** (clocks jump forward, 02:30 does not exist that day): the action runs at the
  instant of the jump (03:00 local), once, as cron does; the next day at 02:30 again;
- **a fold** (clocks fall back, 01:30 happens twice): it runs once, at the first 01:30.

Time zones come from the system's time zone database (:mod:`zoneinfo`).
"""

from __future__ import annotations

import functools
import zoneinfo
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from typing import Final

from spool.server.config import Schedule

__all__ = ["next_fire", "zone_of"]

_DAY: Final = timedelta(days=1)


@functools.lru_cache(maxsize=64)
def zone_of(name: str) -> tzinfo:
    """The time zone called ``name`` (``UTC`` or an IANA name, checked at load time)."""
    return UTC if name == "UTC" else zoneinfo.ZoneInfo(name)


def _wall(d: date, seconds: int, tz: tzinfo) -> float:
    """The instant a clock in ``tz`` shows ``d`` at ``seconds`` after midnight.

    In a gap, the instant of the jump; in a fold, the first of the two instants.
    """
    hours, rest = divmod(seconds, 3600)
    local = datetime.combine(d, time(hours, rest // 60, rest % 60), tzinfo=tz)
    first = local.replace(fold=0).timestamp()
    if datetime.fromtimestamp(first, tz).replace(tzinfo=None) == local.replace(tzinfo=None):
        return first  # it exists (the first one, in a fold)
    # a gap: fold=1 reads the wall time with the offset after the jump (an instant before
    # the jump), fold=0 with the offset before it (an instant after): the jump is between
    low = local.replace(fold=1).timestamp()
    high = first
    if low > high:
        low, high = high, low
    offset = datetime.fromtimestamp(high, tz).utcoffset()
    # the jump is where the offset changes: bisect to the second (gaps last hours at most)
    while high - low > 1:
        mid = (low + high) // 2
        if datetime.fromtimestamp(mid, tz).utcoffset() == offset:
            high = mid
        else:
            low = mid
    return high


def next_fire(schedule: Schedule, after: float) -> float:
    """The first instant strictly after ``after`` at which a calendar schedule fires.

    Raises:
        ValueError: ``schedule`` is a timer (``every``), which has no calendar time.
    """
    if schedule.kind == "every":
        raise ValueError("a timer schedule fires relative to the instance's start")
    tz = zone_of(schedule.zone)
    today = datetime.fromtimestamp(after, tz).date()
    # the day before too: in a gap, yesterday's time may map to an instant after `after`
    for offset in range(-1, 9):
        day = today + offset * _DAY
        if schedule.kind == "weekly" and day.weekday() != schedule.weekday:
            continue
        instant = _wall(day, schedule.time_of_day, tz)
        if instant > after:
            return instant
    raise AssertionError("a daily or weekly schedule fires within eight days")  # pragma: no cover
