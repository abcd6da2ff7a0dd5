"""Counter arithmetic: how two readings of a cumulative counter become a rate.

Every counter of a :class:`~spool.server.stats.snapshot.MetricsSnapshot` is cumulative; the stats
series (:mod:`spool.server.stats.series`) and the dashboard's live feed (``web/dashboard.py``)
both turn two readings into a per-second rate. The rule lives here, once, so the stored
history and the live chart cannot disagree about the same interval.

The rule is Prometheus ``rate()``'s. A counter only goes up, so a reading below the
previous one means the counter was reset (the broker restarted, a client reconnected under
the same name and its per-connection totals started again) and everything it holds now was
counted since that reset: the increase is the current value. A rate is therefore never
negative. Without a previous reading (a client or topic seen for the first time) the
counter counts from zero as well.

A reset is only visible if the counter is read before it grows past its old value again;
one that is not seen makes that interval's increase too small, never too large (the same
limit as Prometheus).

The persisted-ack latency histogram follows the same rule bucket by bucket
(:meth:`~spool.server.stats.histogram.HistogramSnapshot.delta`): an interval's observations are
the difference of two cumulative snapshots, or the whole newer snapshot after a reset.
"""

from __future__ import annotations

from spool.server.stats.histogram import HistogramSnapshot


def increase(current: float, previous: float | None) -> float:
    """How much a cumulative counter grew since ``previous`` (see the module docstring).

    Args:
        current: the newer reading.
        previous: the older reading, or None when there is none (counts from zero).

    Returns:
        ``current - previous``, or ``current`` when the counter went down (a reset) or has
        no previous reading; never negative for a non-negative counter.
    """
    if previous is None or current < previous:
        return current
    return current - previous


def rate(current: float, previous: float | None, elapsed: float) -> float:
    """Per-second rate of a cumulative counter over ``elapsed`` seconds.

    Args:
        current: the newer reading.
        previous: the older reading, or None (counts from zero).
        elapsed: seconds between the two readings.

    Raises:
        ValueError: ``elapsed`` is not positive; a rate needs time to pass, so callers
            skip it (the stats series store no ``_rate`` value, the live feed no point).
    """
    if not elapsed > 0:
        raise ValueError(f"a rate needs a positive interval, got {elapsed!r} s")
    return increase(current, previous) / elapsed


def interval_histogram(
    current: HistogramSnapshot, previous: HistogramSnapshot | None
) -> HistogramSnapshot:
    """The latencies observed between two snapshots of one cumulative histogram.

    Args:
        current: the newer snapshot.
        previous: the older snapshot, or None (every observation is new).

    Returns:
        The difference, or ``current`` itself when the histogram was reset in between.
    """
    if previous is None:
        return current
    return current.delta(previous)
