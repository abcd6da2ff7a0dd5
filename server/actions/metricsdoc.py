"""The instance's metrics as one document, for conditions (``amps-action-if-condition``).

A condition is a filter expression (docs/filters.md) evaluated over a document whose
fields are the metric paths of the stats database (``/api/stats/metrics``), nested by
their ``/``::

    /instance/connections > 100          /txlog/bytes > 50e9
    /host/disk/journal/fs_used_percent > 80        /clients/feed/queue_depth > 1e6
    /instance/msgs_in_rate < 1 AND /instance/connections = 0

The document is built fresh for each evaluation: a snapshot of the broker's counters (on
the loop, no I/O) and a host reading (psutil and a directory scan, in a thread). Rates
(``..._rate``) are over the time since the previous evaluation of any condition; the first
evaluation has none (the field is NULL, and a comparison with NULL is not TRUE).
"""

from __future__ import annotations

import asyncio

from spool.server.clock import Clock
from spool.server.config import Config
from spool.server.expr.values import Value
from spool.server.operations import Operations
from spool.server.stats.host import HostProbe, host_metric_values
from spool.server.stats.sampler import instance_directories
from spool.server.stats.series import snapshot_values
from spool.server.stats.snapshot import MetricsSnapshot

__all__ = ["MetricsDocument", "nest"]


def nest(values: dict[str, float]) -> dict[str, Value]:
    """``{"a/b/c": 1.0}`` -> ``{"a": {"b": {"c": 1.0}}}`` (a path that is also a prefix of
    another keeps its value under neither: metric paths never collide that way)."""
    root: dict[str, Value] = {}
    for path, value in values.items():
        node = root
        parts = path.split("/")
        for part in parts[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                child = {}
                node[part] = child
            node = child
        node[parts[-1]] = value
    return root


class MetricsDocument:
    """Reads the metrics document of an instance (see the module docstring).

    Args:
        ops: the instance's admin surface (the snapshot).
        config: the instance configuration (the directories the host reading covers).
        clock: time of the readings (rates).
    """

    def __init__(self, ops: Operations, config: Config, clock: Clock) -> None:
        self._ops = ops
        self._clock = clock
        self._probe = HostProbe(instance_directories(config))
        self._previous: MetricsSnapshot | None = None
        self._previous_at = 0.0

    async def read(self) -> dict[str, Value]:
        """The document now (host figures read in a thread)."""
        now = self._clock.time()
        snapshot = self._ops.metrics_snapshot()
        elapsed = now - self._previous_at if self._previous is not None else 0.0
        values = snapshot_values(snapshot, self._previous, elapsed)
        self._previous, self._previous_at = snapshot, now
        reading = await asyncio.to_thread(self._probe.sample)
        values.update(host_metric_values(reading))
        return nest(values)
