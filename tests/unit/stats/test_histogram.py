"""LatencyHistogram against a sorted-list oracle."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from spool.server.stats.histogram import (
    BOUNDS,
    PROMETHEUS_BOUNDS,
    HistogramSnapshot,
    LatencyHistogram,
)

# Bucket width is 10**(1/20) (~12.2 %): an interpolated estimate lies in the true value's
# bucket or a neighbour of it, so it is within one bucket ratio of the truth.
RATIO = 10 ** (1 / 20)

latencies = st.floats(min_value=1e-6, max_value=99.0, allow_nan=False, allow_infinity=False)


def oracle_percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    rank = max(math.ceil(p / 100 * len(ordered)), 1)
    return ordered[rank - 1]


def test_bounds_are_sorted_and_cover_1us_to_100s() -> None:
    assert list(BOUNDS) == sorted(BOUNDS)
    assert math.isclose(BOUNDS[0], 1e-6) and math.isclose(BOUNDS[-1], 100.0)
    assert set(PROMETHEUS_BOUNDS) <= set(BOUNDS)


def test_empty_histogram() -> None:
    h = LatencyHistogram()
    assert h.count == 0 and h.sum == 0.0
    assert h.percentile(99) == 0.0
    assert h.buckets()[-1] == (math.inf, 0)


@settings(max_examples=60, deadline=None)
@given(st.lists(latencies, min_size=1, max_size=300), st.sampled_from([50.0, 90.0, 99.0, 100.0]))
def test_percentile_within_one_bucket_of_oracle(values: list[float], p: float) -> None:
    h = LatencyHistogram()
    for v in values:
        h.observe(v)
    assert h.count == len(values)
    assert math.isclose(h.sum, math.fsum(values), rel_tol=1e-9)
    truth = oracle_percentile(values, p)
    estimate = h.percentile(p)
    assert truth / RATIO <= estimate <= truth * RATIO
    assert estimate <= max(values)


@settings(max_examples=60, deadline=None)
@given(st.lists(latencies, max_size=200))
def test_prometheus_buckets_are_exact_cumulative_counts(values: list[float]) -> None:
    h = LatencyHistogram()
    for v in values:
        h.observe(v)
    buckets = h.buckets()
    assert [le for le, _ in buckets[:-1]] == list(PROMETHEUS_BOUNDS)
    for le, count in buckets:
        assert count == sum(1 for v in values if v <= le)


@settings(max_examples=40, deadline=None)
@given(st.lists(latencies, max_size=100), st.lists(latencies, min_size=1, max_size=100))
def test_delta_holds_only_the_later_observations(first: list[float], later: list[float]) -> None:
    h = LatencyHistogram()
    for v in first:
        h.observe(v)
    before = h.snapshot()
    for v in later:
        h.observe(v)
    interval = h.delta(before)
    fresh = LatencyHistogram()
    for v in later:
        fresh.observe(v)
    assert interval.counts == fresh.snapshot().counts
    assert interval.count == len(later)
    assert math.isclose(interval.sum, math.fsum(later), rel_tol=1e-6, abs_tol=1e-9)
    truth = oracle_percentile(later, 99)
    assert truth / RATIO <= interval.percentile(99) <= truth * RATIO


def test_delta_after_reset_is_the_new_snapshot() -> None:
    old = LatencyHistogram()
    for _ in range(10):
        old.observe(0.01)
    previous = old.snapshot()
    restarted = LatencyHistogram()
    restarted.observe(0.002)
    assert restarted.delta(previous) == restarted.snapshot()


def test_values_outside_the_range() -> None:
    h = LatencyHistogram()
    h.observe(0.0)
    h.observe(500.0)
    assert h.count == 2
    assert h.buckets()[0][1] == 1  # 0 s is in the first bucket
    assert h.percentile(100) == 100.0  # overflow reports its lower edge
    assert h.max == 500.0


def test_empty_snapshot_and_mean() -> None:
    empty = HistogramSnapshot.empty()
    assert empty.count == 0 and empty.mean == 0.0 and empty.percentile(50) == 0.0
    h = LatencyHistogram()
    h.observe(0.001)
    h.observe(0.003)
    assert math.isclose(h.snapshot().mean, 0.002)
