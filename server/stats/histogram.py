"""Latency histogram with fixed log-spaced buckets, cheap enough for the publish hot path.

The engine observes one latency per persisted ack; the sampler turns per-interval deltas
into percentiles for the stats database; the Prometheus collector exposes the cumulative
buckets at scrape time. One bucket layout is shared by all histograms so snapshots can be
subtracted and merged without resampling.

Layout: :data:`BOUNDS` holds 161 upper bounds, ``10 ** (k / 20)`` seconds for
``k = -120 .. 40`` (1 us to 100 s, 20 buckets per decade, each ~12 % wide, so an
interpolated percentile is within ~6 % of the truth). ``counts[i]`` holds observations
``v`` with ``BOUNDS[i - 1] < v <= BOUNDS[i]`` (Prometheus ``le`` semantics); the last slot,
``counts[len(BOUNDS)]``, is the overflow bucket (``+Inf``).

Thread-safety: none, on purpose. A histogram belongs to the event loop that observes it;
readers (sampler, ``/metrics``) run on the same loop, so ``observe`` takes no lock.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

BOUNDS: Final[tuple[float, ...]] = tuple(10 ** (k / 20) for k in range(-120, 41))
"""Upper bounds (seconds) of the finite buckets, ascending."""

PROMETHEUS_BOUNDS: Final[tuple[float, ...]] = tuple(10 ** (k / 20) for k in range(-100, 21, 5))
"""The subset of :data:`BOUNDS` exposed to Prometheus: 10 us .. 10 s, four per decade.

Every value is also in :data:`BOUNDS` (same expression), so the coarse cumulative counts
are exact, not estimates.
"""


_STEP: Final = 10 ** (1 / 20)


def _percentile(counts: Sequence[int], total: int, p: float) -> float:
    """Estimate the ``p``-th percentile (0..100) by linear interpolation inside a bucket."""
    if total <= 0:
        return 0.0
    p = min(max(p, 0.0), 100.0)
    rank = max(p / 100.0 * total, 1.0)
    seen = 0
    for i, n in enumerate(counts):
        if n == 0:
            continue
        if seen + n >= rank:
            # the first bucket is as wide (on the log scale) as every other one
            lower = BOUNDS[i - 1] if i > 0 else BOUNDS[0] / _STEP
            if i >= len(BOUNDS):
                # Overflow bucket has no upper bound: report its lower edge.
                return lower
            upper = BOUNDS[i]
            return lower + (upper - lower) * (rank - seen) / n
        seen += n
    return BOUNDS[-1]


def _cumulative(counts: Sequence[int], bounds: Sequence[float]) -> list[tuple[float, int]]:
    """Cumulative ``(le, count)`` pairs at ``bounds`` (a subset of BOUNDS) plus ``+Inf``."""
    out: list[tuple[float, int]] = []
    running = 0
    i = 0
    for bound in bounds:
        while i < len(BOUNDS) and BOUNDS[i] <= bound:
            running += counts[i]
            i += 1
        out.append((bound, running))
    out.append((float("inf"), sum(counts)))
    return out


@dataclass(frozen=True, slots=True)
class HistogramSnapshot:
    """An immutable copy of a histogram's buckets (cumulative since start, or a delta).

    Attributes:
        counts: one count per bucket of :data:`BOUNDS`, plus the overflow slot.
        count: total observations.
        sum: sum of the observed values (seconds).
    """

    counts: tuple[int, ...]
    count: int
    sum: float

    @classmethod
    def empty(cls) -> HistogramSnapshot:
        """A snapshot with no observations (the baseline before the first sample)."""
        return cls((0,) * (len(BOUNDS) + 1), 0, 0.0)

    def delta(self, previous: HistogramSnapshot) -> HistogramSnapshot:
        """Observations made after ``previous`` was taken (``self`` must be newer)."""
        counts = tuple(a - b for a, b in zip(self.counts, previous.counts, strict=True))
        if any(c < 0 for c in counts):
            # The source histogram was reset (e.g. engine restart): the whole snapshot is new.
            return self
        return HistogramSnapshot(counts, self.count - previous.count, self.sum - previous.sum)

    def percentile(self, p: float) -> float:
        """Estimated ``p``-th percentile in seconds; 0.0 when there is no observation."""
        return _percentile(self.counts, self.count, p)

    @property
    def mean(self) -> float:
        """Mean in seconds; 0.0 when empty."""
        return self.sum / self.count if self.count else 0.0

    def buckets(self, bounds: Sequence[float] = PROMETHEUS_BOUNDS) -> list[tuple[float, int]]:
        """Cumulative ``(upper_bound, count)`` pairs ending with ``(inf, count)``."""
        return _cumulative(self.counts, bounds)


class LatencyHistogram:
    """A mutable latency histogram; see the module docstring for layout and threading.

    Example::

        h = LatencyHistogram()
        h.observe(0.0004)           # 400 us
        h.percentile(99)            # ~0.0004
        before = h.snapshot()
        ...
        interval = h.delta(before)  # observations since ``before``
    """

    __slots__ = ("_count", "_counts", "_max", "_sum")

    def __init__(self) -> None:
        self._counts = [0] * (len(BOUNDS) + 1)
        self._count = 0
        self._sum = 0.0
        self._max = 0.0

    def observe(self, seconds: float) -> None:
        """Record one latency in seconds (O(log buckets), no allocation)."""
        self._counts[bisect_left(BOUNDS, seconds)] += 1
        self._count += 1
        self._sum += seconds
        if seconds > self._max:
            self._max = seconds

    @property
    def count(self) -> int:
        """Observations since creation."""
        return self._count

    @property
    def sum(self) -> float:
        """Sum of all observations, seconds."""
        return self._sum

    @property
    def max(self) -> float:
        """Largest observation, seconds (0.0 when empty)."""
        return self._max

    def percentile(self, p: float) -> float:
        """Estimated ``p``-th percentile (0..100) in seconds, never above the largest value."""
        return min(_percentile(self._counts, self._count, p), self._max)

    def buckets(self, bounds: Sequence[float] = PROMETHEUS_BOUNDS) -> list[tuple[float, int]]:
        """Cumulative ``(upper_bound, count)`` pairs ending with ``(inf, count)``."""
        return _cumulative(self._counts, bounds)

    def snapshot(self) -> HistogramSnapshot:
        """An immutable copy, to subtract later with :meth:`delta`."""
        return HistogramSnapshot(tuple(self._counts), self._count, self._sum)

    def delta(self, previous: HistogramSnapshot) -> HistogramSnapshot:
        """Observations made since ``previous`` (a snapshot of this histogram)."""
        return self.snapshot().delta(previous)
