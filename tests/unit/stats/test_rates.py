"""The counter rule (server/stats/rates.py): increases, rates, interval histograms."""

from __future__ import annotations

import math
from itertools import cycle, pairwise

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spool.server.stats.histogram import HistogramSnapshot, LatencyHistogram
from spool.server.stats.rates import increase, interval_histogram, rate

counts = st.integers(min_value=0, max_value=2**53)
"""Counter readings (exact as floats, like every counter the broker keeps)."""
gaps = st.floats(min_value=1e-3, max_value=1e6, allow_nan=False, allow_infinity=False)


def test_an_increase_is_the_difference_of_two_readings() -> None:
    assert increase(350, 100) == 250
    assert increase(100, 100) == 0
    assert rate(350, 100, 2.5) == 100.0


def test_a_reset_counts_from_zero() -> None:
    # the counter held 1000, restarted, and has counted 40 since
    assert increase(40, 1000) == 40
    assert rate(40, 1000, 4.0) == 10.0


def test_without_a_previous_reading_the_counter_counts_from_zero() -> None:
    assert increase(75, None) == 75
    assert rate(75, None, 5.0) == 15.0


@pytest.mark.parametrize("elapsed", [0.0, -1.0, math.nan])
def test_a_rate_needs_time_to_pass(elapsed: float) -> None:
    with pytest.raises(ValueError, match="positive interval"):
        rate(10, 0, elapsed)


@given(st.lists(counts, min_size=2), st.lists(gaps, min_size=1))
def test_monotone_counters_give_non_negative_rates_that_add_up(
    readings: list[int], elapsed: list[float]
) -> None:
    readings.sort()
    steps = list(pairwise(readings))
    for (before, now), dt in zip(steps, cycle(elapsed)):
        assert rate(now, before, dt) >= 0
        assert increase(now, before) == now - before
    assert sum(increase(now, before) for before, now in steps) == readings[-1] - readings[0]


@given(counts, counts, gaps)
def test_any_two_readings_give_a_non_negative_rate(now: int, before: int, dt: float) -> None:
    assert rate(now, before, dt) >= 0
    assert increase(now, before) <= now


@given(
    st.lists(
        st.tuples(st.integers(min_value=0, max_value=10**6), st.booleans()),
        min_size=1,
        max_size=50,
    )
)
def test_seen_resets_lose_nothing_unseen_ones_never_overcount(
    intervals: list[tuple[int, bool]],
) -> None:
    """A counter counts ``n`` events per interval and sometimes restarts at zero first.

    The sum of the increases equals the events counted when every reset shows (the
    counter is read below its old value), and never exceeds it when one does not.
    """
    value = 0
    counted = 0
    computed = 0
    every_reset_seen = True
    for n, restarted in intervals:
        before = value
        value = (0 if restarted else value) + n
        counted += n
        if restarted and value >= before:
            every_reset_seen = False  # grew back past the old value before it was read
        computed += increase(value, before)
    assert computed <= counted
    if every_reset_seen:
        assert computed == counted


def test_interval_histogram_is_what_was_observed_in_between() -> None:
    h = LatencyHistogram()
    for _ in range(1000):
        h.observe(0.050)
    before = h.snapshot()
    for _ in range(10):
        h.observe(0.001)
    interval = interval_histogram(h.snapshot(), before)
    assert interval.count == 10
    assert interval.percentile(99) == pytest.approx(0.001, rel=0.13)
    assert interval_histogram(h.snapshot(), None) == h.snapshot()


def test_interval_histogram_after_a_reset_is_the_whole_new_histogram() -> None:
    old = LatencyHistogram()
    for _ in range(100):
        old.observe(0.002)
    restarted = LatencyHistogram()
    restarted.observe(0.002)
    restarted.observe(0.3)
    interval = interval_histogram(restarted.snapshot(), old.snapshot())
    assert interval == restarted.snapshot()
    assert interval.count == 2


@given(st.lists(st.floats(min_value=1e-6, max_value=50.0), max_size=30), st.integers(0, 30))
def test_interval_counts_add_up_to_the_total(latencies: list[float], cut: int) -> None:
    h = LatencyHistogram()
    snapshots: list[HistogramSnapshot] = [h.snapshot()]
    for i, value in enumerate(latencies):
        h.observe(value)
        if i == cut:
            snapshots.append(h.snapshot())
    snapshots.append(h.snapshot())
    parts = [interval_histogram(b, a) for a, b in pairwise(snapshots)]
    assert sum(p.count for p in parts) == len(latencies)
    assert all(min(p.counts) >= 0 for p in parts)
