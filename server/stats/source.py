"""What the stats code needs from the broker, as structural types (no import of the engine).

``spool.server.operations.Operations`` satisfies these protocols; tests may pass any object that
does.
"""

from __future__ import annotations

from typing import Protocol

from spool.server.stats.snapshot import MetricsSnapshot


class EventSink(Protocol):
    """The event log (server/eventlog.py)."""

    def emit(self, level: str, category: str, event: str, **fields: object) -> None:
        """Record one structured event (``fields``: any JSON-encodable values)."""
        ...


class MetricsSource(Protocol):
    """A broker as seen by the sampler and the Prometheus collector."""

    @property
    def events(self) -> EventSink:
        """Where failures of sampling are reported."""
        ...

    def metrics_snapshot(self) -> MetricsSnapshot:
        """Cheap counters snapshot (server/stats/snapshot.py); called on the event loop."""
        ...
