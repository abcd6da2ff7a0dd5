"""Statistics of benchmark runs: medians and spreads across runs, latency percentiles.

A benchmark scenario is run several times; one run gives one number per metric. We report
the median (robust to one disturbed run on a shared two-core machine) and the spread
``(max - min) / median`` so a reader sees at once whether the median can be trusted. Latency
percentiles use the nearest-rank definition (the value below which ``q`` of the samples
fall, always an observed sample), which is what HdrHistogram-style reports show.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

#: the latency percentiles every latency scenario reports (name suffix -> quantile).
LATENCY_QUANTILES: Final[dict[str, float]] = {
    "p50": 0.50,
    "p90": 0.90,
    "p99": 0.99,
    "p999": 0.999,
}


@dataclass(frozen=True, slots=True)
class Summary:
    """One metric over several runs.

    Attributes:
        values: the per-run values in run order (kept so the JSON can be re-analysed).
        median: the median of ``values``.
        minimum / maximum: the extremes.
        stdev: sample standard deviation (0 with a single run).
        spread_pct: ``(max - min) / median * 100``; 0 with a single run; ``inf`` when the
            median is 0 but the runs differ.
    """

    values: tuple[float, ...]
    median: float
    minimum: float
    maximum: float
    stdev: float
    spread_pct: float

    def as_dict(self) -> dict[str, float | list[float] | None]:
        """JSON shape; a non-finite spread becomes null (JSON has no infinity)."""
        return {
            "values": list(self.values),
            "median": self.median,
            "min": self.minimum,
            "max": self.maximum,
            "stdev": self.stdev,
            "spread_pct": self.spread_pct if math.isfinite(self.spread_pct) else None,
        }


def summarize(values: Sequence[float]) -> Summary:
    """Median and spread of per-run values.

    Raises:
        ValueError: no values, or a value that is not finite (a broken run must not be
            averaged into a plausible-looking number).
    """
    if not values:
        raise ValueError("summarize() needs at least one value")
    for v in values:
        if not math.isfinite(v):
            raise ValueError(f"non-finite benchmark value {v!r}")
    vals = tuple(float(v) for v in values)
    med = statistics.median(vals)
    lo, hi = min(vals), max(vals)
    sd = statistics.stdev(vals) if len(vals) > 1 else 0.0
    if hi == lo:
        spread = 0.0
    elif med == 0:
        spread = math.inf
    else:
        spread = (hi - lo) / abs(med) * 100.0
    return Summary(vals, med, lo, hi, sd, spread)


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of already sorted values (``q`` in [0, 1]).

    Raises:
        ValueError: empty input or ``q`` outside [0, 1].
    """
    if not sorted_values:
        raise ValueError("percentile() of no samples")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile {q} outside [0, 1]")
    rank = max(1, math.ceil(q * len(sorted_values)))
    return float(sorted_values[rank - 1])


def latency_summary(samples_ns: Sequence[int], prefix: str = "") -> dict[str, float]:
    """Latency percentiles in milliseconds from nanosecond samples.

    Returns ``{prefix}p50_ms``, ``p90_ms``, ``p99_ms``, ``p999_ms``, ``max_ms``, ``mean_ms``
    and ``samples`` (the count, so a reader can judge how meaningful p99.9 is).

    Raises:
        ValueError: no samples.
    """
    if not samples_ns:
        raise ValueError("no latency samples")
    ordered = sorted(samples_ns)
    out = {
        f"{prefix}{name}_ms": percentile(ordered, q) / 1e6 for name, q in LATENCY_QUANTILES.items()
    }
    out[f"{prefix}max_ms"] = ordered[-1] / 1e6
    out[f"{prefix}mean_ms"] = sum(ordered) / len(ordered) / 1e6
    out[f"{prefix}samples"] = float(len(ordered))
    return out


def higher_is_better(metric: str) -> bool | None:
    """Direction of a metric from its unit suffix: rates up, times and sizes down.

    Returns None when the name carries no known unit (the table then shows no verdict).
    """
    if metric.endswith(("_per_s", "_per_sec", "_ratio")):
        return True
    if metric.endswith(("_ms", "_us", "_ns", "_s", "_kib", "_bytes", "_mib")) or "_kib_" in metric:
        return False
    return None
