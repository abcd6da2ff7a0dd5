"""When calendar schedules fire, against an oracle that walks the clock minute by minute.

The oracle knows nothing of :mod:`zoneinfo` folds or gaps: it steps UTC minutes from the
given instant and stops at the first minute whose local wall time is the schedule's (on
its weekday), or at the first minute the local clock jumps over it (a DST gap). That is
what "the next 02:30" means to a person watching the clock on the wall, who, when the
clocks fall back, does not count the hour shown a second time as another 02:30: the
schedule runs once that day, at the first.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from spool.server.actions.schedule import next_fire, zone_of
from spool.server.config import Schedule

ZONES = [
    "UTC",
    "Europe/Paris",
    "America/New_York",
    "Australia/Lord_Howe",  # a 30-minute DST shift
    "Asia/Kolkata",  # +05:30, no DST
    "America/Sao_Paulo",  # DST until 2019
    "Pacific/Apia",  # skipped a whole day in 2011
]


def oracle(schedule: Schedule, after: float) -> float:
    tz = zone_of(schedule.zone)
    hh, rest = divmod(schedule.time_of_day, 3600)
    want = (hh, rest // 60)
    t = (int(after) // 60 + 1) * 60  # the next whole minute strictly after
    previous = datetime.fromtimestamp(t - 60, tz)
    for _ in range(60 * 24 * 9):
        local = datetime.fromtimestamp(t, tz)
        day_ok = schedule.weekday is None or local.weekday() == schedule.weekday
        if day_ok and (local.hour, local.minute) == want and not local.fold:
            return float(t)
        # a jump over the wanted time on this local day (a gap): the run is at the jump
        jumped = local - previous > timedelta(minutes=1)
        wanted_today = local.replace(hour=want[0], minute=want[1], second=0, fold=0)
        if (
            jumped
            and day_ok
            and previous.replace(tzinfo=None) < wanted_today.replace(tzinfo=None)
            and wanted_today.replace(tzinfo=None) < local.replace(tzinfo=None)
        ):
            return float(t)
        previous = local
        t += 60
    raise AssertionError("no firing within nine days")


instants = st.floats(min_value=datetime(2005, 1, 1, tzinfo=UTC).timestamp(),
                     max_value=datetime(2035, 1, 1, tzinfo=UTC).timestamp())  # fmt: skip
minutes = st.integers(min_value=0, max_value=24 * 60 - 1).map(lambda m: m * 60)


@settings(max_examples=100, deadline=None)
@given(zone=st.sampled_from(ZONES), at=minutes, after=instants)
def test_a_daily_schedule_fires_at_the_next_wall_clock_time(
    zone: str, at: int, after: float
) -> None:
    schedule = Schedule("daily", time_of_day=at, zone=zone)
    assert next_fire(schedule, after) == oracle(schedule, after)


@settings(max_examples=25, deadline=None)
@given(zone=st.sampled_from(ZONES), at=minutes, day=st.integers(0, 6), after=instants)
# between the two 01:00 of New York's fall-back: not again that night, a week later
@example(zone="America/New_York", at=3600, day=6,
         after=datetime(2031, 11, 2, 5, 30, tzinfo=UTC).timestamp())  # fmt: skip
def test_a_weekly_schedule_fires_on_its_day(zone: str, at: int, day: int, after: float) -> None:
    schedule = Schedule("weekly", time_of_day=at, weekday=day, zone=zone)
    assert next_fire(schedule, after) == oracle(schedule, after)


@settings(max_examples=100, deadline=None)
@given(zone=st.sampled_from(ZONES), at=minutes, after=instants)
def test_firings_follow_each_other_a_day_apart_at_most_a_few_hours_off(
    zone: str, at: int, after: float
) -> None:
    """Chaining next_fire from each firing never stalls, never fires twice an instant."""
    schedule = Schedule("daily", time_of_day=at, zone=zone)
    t = next_fire(schedule, after)
    for _ in range(5):
        following = next_fire(schedule, t)
        assert 20 * 3600 <= following - t <= 28 * 3600 or zone == "Pacific/Apia"
        assert following > t
        t = following


@pytest.mark.parametrize(
    ("after", "expected"),
    [
        # spring forward in Paris: 02:30 does not exist on 2024-03-31; the run is at the
        # jump (03:00 CEST = 01:00 UTC), then 02:30 again the next day
        ("2024-03-30T12:00:00+00:00", "2024-03-31T01:00:00+00:00"),
        ("2024-03-31T01:00:00+00:00", "2024-04-01T00:30:00+00:00"),
        # fall back: 02:30 happens twice on 2024-10-27; the run is at the first one only
        ("2024-10-26T12:00:00+00:00", "2024-10-27T00:30:00+00:00"),
        ("2024-10-27T00:30:00+00:00", "2024-10-28T01:30:00+00:00"),
    ],
)
def test_daylight_saving_gaps_and_folds(after: str, expected: str) -> None:
    schedule = Schedule("daily", time_of_day=2 * 3600 + 1800, zone="Europe/Paris")
    got = next_fire(schedule, datetime.fromisoformat(after).timestamp())
    assert datetime.fromtimestamp(got, UTC).isoformat() == expected


def test_a_timer_has_no_calendar_time() -> None:
    with pytest.raises(ValueError, match="relative to the instance's start"):
        next_fire(Schedule("every", interval=60.0), 0.0)
