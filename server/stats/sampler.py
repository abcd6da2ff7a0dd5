"""The stats sampler: every ``Admin/Interval`` one row per series into the stats database.

Per tick, on the event loop: take ``broker.metrics_snapshot()`` (cheap, no I/O) and a
snapshot of the persisted-ack histogram, turn them into metric values against the previous
tick (:mod:`spool.server.stats.series`, by the counter rule of :mod:`spool.server.stats.rates`). Then,
in worker threads: read host metrics (psutil, a directory scan) and write every row in one
transaction. The loop never waits on SQLite.

Retention: samples older than ``Admin/StatsRetention`` are deleted at start and then every
:data:`RETENTION_EVERY` seconds; the admin API's truncate action deletes on demand through
the same :class:`~spool.server.stats.store.StatsStore`.

Per-client series (``clients/C/...``, ``subscriptions/C/S/...``) are bounded by
:mod:`spool.server.stats.clientseries`: each tick's values pass through its
:class:`~spool.server.stats.clientseries.ClientSeries` before the write, and the series it
lets go (idle past ``Admin/ClientStatsRetention``, or pushed out by
``Admin/ClientStatsLimit``) are deleted in a worker thread, in batches, before the write.
At start it learns the series already in the database, so a restart forgets nothing.

Failures to write (disk full, locked file) are reported to the event log once per kind and
sampling goes on: statistics must never take the broker down.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final, ParamSpec, Protocol

from spool.server.clock import Clock
from spool.server.config import Config
from spool.server.stats.clientseries import GROUP_SEGMENTS, ClientSeries
from spool.server.stats.histogram import HistogramSnapshot
from spool.server.stats.host import HostProbe, host_metric_values
from spool.server.stats.rates import interval_histogram
from spool.server.stats.series import snapshot_values
from spool.server.stats.snapshot import MetricsSnapshot
from spool.server.stats.source import MetricsSource
from spool.server.stats.store import StatsStore
from spool.server.stats.writer import LinkEventRow, LinkSampleRow

RETENTION_EVERY: Final = 300.0  # seconds between retention passes

P = ParamSpec("P")


class LinkEventView(Protocol):
    """A replication link event (server/replication/history.py ``LinkEvent``)."""

    @property
    def time(self) -> float: ...

    @property
    def direction(self) -> str: ...

    @property
    def link(self) -> str: ...

    @property
    def event(self) -> str: ...

    @property
    def detail(self) -> str: ...


def instance_directories(config: Config) -> dict[str, Path]:
    """The directories whose disk usage is reported (labels are metric path segments)."""
    dirs: dict[str, Path] = {"data": config.data_directory}
    if config.transaction_log is not None:
        dirs["journal"] = config.transaction_log.journal_directory
        dirs["archive"] = config.transaction_log.archive_directory
    dirs["stats"] = config.admin.stats_file.parent
    return dirs


class Sampler:
    """Samples the broker into the stats database.

    Args:
        broker: the metrics source (``spool.server.operations.Operations``).
        config: the instance configuration (``admin.interval``, ``admin.stats_file``,
            ``admin.stats_retention``, the directories).
        clock: time source; sampling times are ``clock.time()``.
        link_events: the replication link events that happened since the last call
            (written with each tick's samples).
        link_samples: the replication links' states now (each tick writes them to
            ``link_sample``: the per-link history).

    Attributes:
        ticks: completed sampling ticks (rows written or not).
        last_tick: ``clock.time()`` of the last completed tick, or None.
    """

    def __init__(
        self,
        broker: MetricsSource,
        config: Config,
        clock: Clock,
        *,
        link_events: Callable[[], Sequence[LinkEventView]] | None = None,
        link_samples: Callable[[], Sequence[LinkSampleRow]] | None = None,
    ) -> None:
        self._broker = broker
        self._link_events = link_events
        self._link_samples = link_samples
        self._config = config
        self._clock = clock
        self._interval = max(float(config.admin.interval), 1.0)
        self._retention = float(config.admin.stats_retention)
        self._probe = HostProbe(instance_directories(config))
        self._store: StatsStore | None = None
        self._task: asyncio.Task[None] | None = None
        self._previous: MetricsSnapshot | None = None
        self._previous_at = 0.0
        self._previous_acks: HistogramSnapshot | None = None
        self._last_retention = 0.0
        self._reported: set[str] = set()
        self._clients = ClientSeries(
            float(config.admin.client_stats_retention), config.admin.client_stats_limit
        )
        self._inflight: asyncio.Future[int] | None = None
        self.ticks = 0
        self.last_tick: float | None = None

    @property
    def store(self) -> StatsStore | None:
        """The open stats database (None before :meth:`start` and after :meth:`stop`)."""
        return self._store

    @property
    def interval(self) -> float:
        """Seconds between ticks."""
        return self._interval

    @property
    def client_series(self) -> ClientSeries:
        """The per-client series kept and their last-seen times."""
        return self._clients

    async def start(self) -> None:
        """Open and migrate the database (in a thread), take the baseline, start ticking."""
        self._store = store = await asyncio.to_thread(
            StatsStore.open, self._config.admin.stats_file
        )
        prefixes = [f"{first}/" for first in GROUP_SEGMENTS]
        self._clients.restore(await asyncio.to_thread(store.reader.last_samples, prefixes))
        self._baseline()
        await self._apply_retention()
        # The schedule is anchored here, not when the task first runs.
        first = self._clock.monotonic() + self._interval
        self._task = asyncio.create_task(self._run(first), name="spool-stats-sampler")

    async def stop(self) -> None:
        """Stop ticking (a write in progress completes) and close the database."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        inflight, self._inflight = self._inflight, None
        if inflight is not None and not inflight.done():
            # The thread cannot be cancelled: let its transaction finish before closing.
            await asyncio.wait({inflight})
            if not inflight.cancelled() and inflight.exception() is not None:
                self._report("write_failed", inflight.exception() or RuntimeError())
        store, self._store = self._store, None
        if store is not None:
            await asyncio.to_thread(store.close)

    def _baseline(self) -> None:
        snapshot = self._broker.metrics_snapshot()
        self._previous = snapshot
        self._previous_at = self._clock.time()
        self._previous_acks = self._ack_snapshot(snapshot)

    @staticmethod
    def _ack_snapshot(snapshot: MetricsSnapshot) -> HistogramSnapshot:
        return snapshot["persisted_ack_latency"].snapshot()

    async def _run(self, deadline: float) -> None:
        while True:
            await self._clock.sleep(max(deadline - self._clock.monotonic(), 0.0))
            await self.sample_once()
            deadline += self._interval
            now = self._clock.monotonic()
            if deadline <= now:  # fell behind (slow disk): skip ticks, do not burst
                deadline = now + self._interval

    async def sample_once(self) -> int:
        """Take one sample now and write it; returns the number of rows written."""
        now = self._clock.time()
        snapshot = self._broker.metrics_snapshot()
        acks = self._ack_snapshot(snapshot)
        ack_delta = interval_histogram(acks, self._previous_acks)
        values = snapshot_values(snapshot, self._previous, now - self._previous_at, ack_delta)
        self._previous, self._previous_at, self._previous_acks = snapshot, now, acks
        written = 0
        try:
            reading = await asyncio.to_thread(self._probe.sample)
            values.update(host_metric_values(reading))
        except Exception as exc:  # psutil can fail on exotic platforms; keep broker stats
            self._report("host_metrics_failed", exc)
        admission = self._clients.admit(now, values)
        values = admission.values
        self._report_refused(admission.refused)
        store = self._store
        if store is not None and admission.expired:
            try:
                await self._in_thread(store.writer.delete_series, admission.expired)
            except Exception as exc:
                self._report("write_failed", exc)
        if store is not None:
            try:
                written = await self._in_thread(store.writer.write, now, values)
            except Exception as exc:  # disk full, locked file: never fatal
                self._report("write_failed", exc)
            else:
                self._reported.discard("write_failed")
            events = self._link_events() if self._link_events is not None else ()
            if events:
                rows: list[LinkEventRow] = [
                    (e.time, e.direction, e.link, e.event, e.detail) for e in events
                ]
                try:
                    await self._in_thread(store.writer.write_link_events, rows)
                except Exception as exc:
                    self._report("write_failed", exc)
            links = self._link_samples() if self._link_samples is not None else ()
            if links:
                try:
                    await self._in_thread(store.writer.write_link_samples, now, links)
                except Exception as exc:
                    self._report("write_failed", exc)
        if now - self._last_retention >= RETENTION_EVERY:
            await self._apply_retention()
        self.ticks += 1
        self.last_tick = now
        return written

    async def _in_thread(self, func: Callable[P, int], *args: P.args, **kwargs: P.kwargs) -> int:
        """Run a store call in a thread; a cancelled tick leaves it to finish (see stop)."""
        future = asyncio.ensure_future(asyncio.to_thread(func, *args, **kwargs))
        self._inflight = future
        return await asyncio.shield(future)

    async def _apply_retention(self) -> None:
        store = self._store
        if store is None:
            return
        now = self._clock.time()
        self._last_retention = now
        try:
            deleted = await self._in_thread(store.writer.truncate, now - self._retention)
        except Exception as exc:
            self._report("retention_failed", exc)
            return
        if deleted:
            self._broker.events.emit("info", "stats", "retention", deleted_samples=deleted)

    def _report_refused(self, refused: list[str]) -> None:
        """Say once, when it starts, that ClientStatsLimit keeps new clients' series out."""
        if not refused:
            self._reported.discard("client_stats_limit")
            return
        if "client_stats_limit" in self._reported:
            return
        self._reported.add("client_stats_limit")
        self._broker.events.emit(
            "warning", "stats", "client_stats_limit",
            limit=self._config.admin.client_stats_limit, refused=len(refused),
            first=refused[0],
        )  # fmt: skip

    def _report(self, event: str, exc: BaseException) -> None:
        if event in self._reported:
            return
        self._reported.add(event)
        self._broker.events.emit("error", "stats", event, error=f"{type(exc).__name__}: {exc}")
