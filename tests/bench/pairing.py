"""Paired runs: two configurations measured back to back in one run, ABBA.

A ratio between two scenarios measured minutes apart on the shared two-core machine
divides two different loads: the load of other work drifts by more than the difference
being measured in that time. A paired run measures both sides under the same load: two
measurements of each, in the order :func:`pair_order` gives (A, B, B, A, then B, A, A, B,
and so on), each side's two combined (:func:`combined`). The TLS replay and the
replicated publish families run their goal ratios this way.
"""

from __future__ import annotations

from collections.abc import Sequence


def pair_order(call: int) -> tuple[bool, ...]:
    """Which side runs when in the ``call``-th run (0-based; True is the measured side,
    False its baseline): baseline, measured, measured, baseline, then measured, baseline,
    baseline, measured, and so on. Within a run the load drifting steadily weighs on both
    sides alike; across runs neither side always goes first, on the caches and the load
    the other one left."""
    first = call % 2 == 1
    return (first, not first, not first, first)


def combined(runs: Sequence[dict[str, float]]) -> dict[str, float]:
    """One side's measurements of a run as one: rates (``*_per_s``) as their harmonic mean
    (the rate of all the messages over all the time, every measurement moving the same
    number of messages), every other figure as its mean."""
    out: dict[str, float] = {}
    for key in runs[0]:
        values = [r[key] for r in runs]
        if key.endswith("_per_s"):
            out[key] = len(values) / sum(1.0 / v for v in values)
        else:
            out[key] = sum(values) / len(values)
    return out
