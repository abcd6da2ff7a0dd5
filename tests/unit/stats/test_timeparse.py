"""Times and durations of the stats API and CLI."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spool.server.stats.timeparse import BadTimeValue, format_time, parse_duration, parse_time

MAY_1 = datetime(2024, 5, 1, 12, 30, 15, tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    "text",
    [
        "20240501T123015",
        "20240501T123015Z",
        "2024-05-01T12:30:15Z",
        "2024-05-01T12:30:15+00:00",
        "2024-05-01T14:30:15+02:00",
        "2024-05-01 12:30:15",
        str(MAY_1),
    ],
)
def test_time_forms(text: str) -> None:
    assert parse_time(text) == MAY_1


def test_fractional_compact_time() -> None:
    assert parse_time("20240501T123015.25Z") == MAY_1 + 0.25


@pytest.mark.parametrize("text", ["", "yesterday", "20241301T000000", "2024-02-30", "nan", "inf"])
def test_bad_times(text: str) -> None:
    with pytest.raises(BadTimeValue):
        parse_time(text)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("10s", 10.0), ("1m", 60.0), ("2h", 7200.0), ("7d", 604800.0), ("500ms", 0.5), ("30", 30.0)],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "0", "0s", "-1s", "10x", "1M", "s"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(BadTimeValue):
        parse_duration(text)


@settings(max_examples=100)
@given(st.integers(min_value=0, max_value=4_000_000_000_000))
def test_format_time_round_trips_at_millisecond_precision(ms: int) -> None:
    ts = ms / 1000
    text = format_time(ts)
    assert text.endswith("Z")
    assert parse_time(text) == pytest.approx(ts, abs=1e-6)
