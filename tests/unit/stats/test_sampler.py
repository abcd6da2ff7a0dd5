"""The sampler over a real SQLite file, driven by a virtual clock."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from sqlalchemy import text

from spool.server.clock import VirtualClock
from spool.server.config import AdminConfig, Config
from spool.server.eventlog import EventLog
from spool.server.stats.histogram import LatencyHistogram
from spool.server.stats.sampler import Sampler
from spool.server.stats.snapshot import ClientCounters, MetricsSnapshot, SubscriptionLag
from spool.server.stats.store import StatsStore
from tests.support.snapshots import client_counters, metrics_snapshot, subscription_lag
from tests.support.wait import async_wait_until

START = 1_700_000_000.0


class MetricsBroker:
    """The two things the sampler reads: a snapshot and the event log."""

    def __init__(self, clock: VirtualClock) -> None:
        self.clock = clock
        self.events = EventLog(None, "test", console=False, clock=clock)
        self.msgs_in = 0
        self.latency = LatencyHistogram()
        self.clients: dict[str, ClientCounters] = {}
        self.subscriptions: list[SubscriptionLag] = []

    def metrics_snapshot(self) -> MetricsSnapshot:
        return metrics_snapshot(
            time=self.clock.time(),
            msgs_in=self.msgs_in,
            connections=1,
            clients=self.clients,
            subscriptions_detail=self.subscriptions,
            persisted_ack_latency=self.latency,
        )


def make_config(
    tmp_path: Path,
    *,
    interval: float = 10.0,
    retention: float = 3600.0,
    client_retention: float = 3600.0,
    client_limit: int = 5000,
) -> Config:
    return Config(
        name="t",
        group="t",
        data_directory=tmp_path,
        admin=AdminConfig(
            stats_file=tmp_path / "stats.db",
            interval=interval,
            stats_retention=retention,
            client_stats_retention=client_retention,
            client_stats_limit=client_limit,
        ),
        transports=(),
        transaction_log=None,
    )


async def ticked(sampler: Sampler, n: int) -> None:
    """Wait for the ``n``-th tick: its write runs in a thread, which the virtual clock's
    ``advance`` does not wait for (it settles the event loop only)."""
    await async_wait_until(lambda: sampler.ticks == n, message=f"tick {n}")


async def parked(clock: VirtualClock) -> None:
    """Wait until the sampler sleeps on the clock (after a tick's thread work)."""
    await async_wait_until(lambda: clock.sleepers == 1, message="the sampler asleep")


def test_samples_are_written_at_each_interval(tmp_path: Path) -> None:
    async def main() -> None:
        clock = VirtualClock(START)
        broker = MetricsBroker(clock)
        sampler = Sampler(broker, make_config(tmp_path), clock)
        await sampler.start()
        try:
            for tick in range(1, 4):
                await parked(clock)
                broker.msgs_in += 100
                broker.latency.observe(0.002)
                await clock.advance(10.0)
                await ticked(sampler, tick)
            store = sampler.store
            assert store is not None
            rates = await asyncio.to_thread(
                store.reader.query_series, "instance/msgs_in_rate", START, START + 100
            )
            assert rates == [(START + 10, 10.0), (START + 20, 10.0), (START + 30, 10.0)]
            p99 = await asyncio.to_thread(
                store.reader.query_series, "persisted_ack/p99_ms", START, START + 100
            )
            # one 2 ms ack per interval; estimates are within one bucket (12 %)
            assert len(p99) == 3 and all(2.0 / 1.13 < v < 2.0 * 1.13 for _, v in p99)
            paths = await asyncio.to_thread(store.reader.list_metrics)
            assert "host/cpu_percent" in paths and "process/rss_bytes" in paths
        finally:
            await sampler.stop()
        assert sampler.store is None
        broker.events.close()

    asyncio.run(main())


def test_retention_at_start_removes_old_samples(tmp_path: Path) -> None:
    config = make_config(tmp_path, retention=600.0)
    seeded = StatsStore.open(config.admin.stats_file)
    seeded.writer.write(START - 1000, {"old": 1.0})
    seeded.writer.write(START - 10, {"recent": 2.0})
    seeded.close()

    async def main() -> None:
        clock = VirtualClock(START)
        broker = MetricsBroker(clock)
        sampler = Sampler(broker, config, clock)
        await sampler.start()
        try:
            store = sampler.store
            assert store is not None
            assert await asyncio.to_thread(store.reader.list_metrics) == ["recent"]
            events = broker.events.recent()
            assert any(e["event"] == "retention" and e["deleted_samples"] == 1 for e in events)
        finally:
            await sampler.stop()
            broker.events.close()

    asyncio.run(main())


def test_write_failures_are_reported_once_and_sampling_goes_on(tmp_path: Path) -> None:
    async def main() -> None:
        clock = VirtualClock(START)
        broker = MetricsBroker(clock)
        sampler = Sampler(broker, make_config(tmp_path), clock)
        await sampler.start()
        try:
            store = sampler.store
            assert store is not None

            def drop() -> None:
                with store.engine.begin() as conn:
                    conn.execute(text("DROP TABLE sample"))

            await asyncio.to_thread(drop)
            for tick in (1, 2):
                await clock.advance(10.0)
                await ticked(sampler, tick)
            failures = [e for e in broker.events.recent() if e["event"] == "write_failed"]
            assert len(failures) == 1
            assert failures[0]["level"] == "error"
        finally:
            await sampler.stop()
            broker.events.close()

    asyncio.run(main())


def test_a_slow_tick_skips_missed_intervals(tmp_path: Path) -> None:
    async def main() -> None:
        clock = VirtualClock(START)
        broker = MetricsBroker(clock)
        config = make_config(tmp_path)
        sampler = Sampler(broker, config, clock)
        await sampler.start()
        # A slow disk: the tick's write waits for this writer's lock, so the tick cannot
        # end before the clock has passed the missed deadlines (the clock does not wait
        # for threads, and a fast tick would otherwise sleep again at +20).
        disk = sqlite3.connect(config.admin.stats_file, isolation_level=None)
        try:
            await parked(clock)
            disk.execute("BEGIN IMMEDIATE")
            await clock.advance(35.0)  # one wake-up at +10, the +20/+30 deadlines are gone
            disk.execute("COMMIT")
            await ticked(sampler, 1)
            await parked(clock)
            assert sampler.last_tick == START + 10
            await clock.advance(10.0)
            await ticked(sampler, 2)
            assert sampler.last_tick == START + 45
        finally:
            disk.close()
            await sampler.stop()
            broker.events.close()

    asyncio.run(main())


def client_paths(paths: list[str]) -> list[str]:
    return [p for p in paths if p.startswith(("clients/", "subscriptions/"))]


async def listed(sampler: Sampler) -> list[str]:
    store = sampler.store
    assert store is not None
    return await asyncio.to_thread(store.reader.list_metrics)


async def next_tick(sampler: Sampler, clock: VirtualClock) -> None:
    """One sampling tick, the way the schedule runs it."""
    await parked(clock)
    target = sampler.ticks + 1
    await clock.advance(sampler.interval)
    await ticked(sampler, target)


def test_a_flood_of_short_lived_clients_keeps_at_most_the_limit(tmp_path: Path) -> None:
    limit = 30  # a client has nine series, a subscription one

    async def main() -> None:
        clock = VirtualClock(START)
        broker = MetricsBroker(clock)
        sampler = Sampler(broker, make_config(tmp_path, client_limit=limit), clock)
        await sampler.start()
        try:
            broker.clients["feed"] = client_counters()
            for i in range(40):  # a dashboard page's client per tick, gone at the next
                name = f"dashboard-query-{i:06}"
                broker.clients[name] = client_counters(msgs_in=i)
                broker.subscriptions = [subscription_lag(name, "q")]
                await next_tick(sampler, clock)
                del broker.clients[name]
                assert len(client_paths(await listed(sampler))) <= limit
            paths = await listed(sampler)
            assert "clients/feed/msgs_in_rate" in paths
            assert "clients/dashboard-query-000039/msgs_in" in paths  # the newest stay
            assert "clients/dashboard-query-000000/msgs_in" not in paths
            assert sampler.client_series.count == len(client_paths(paths))
            store = sampler.store
            assert store is not None
            for path in ("clients/feed/queue_depth", "instance/connections"):
                got = await asyncio.to_thread(store.reader.query_series, path, START, START + 1e4)
                assert [ts for ts, _ in got] == [START + 10 * k for k in range(1, 41)]
        finally:
            await sampler.stop()
            broker.events.close()

    asyncio.run(main())


def test_a_disconnected_clients_series_go_after_the_retention(tmp_path: Path) -> None:
    async def main() -> None:
        clock = VirtualClock(START)
        broker = MetricsBroker(clock)
        config = make_config(tmp_path, client_retention=60.0)
        sampler = Sampler(broker, config, clock)
        await sampler.start()
        try:
            broker.clients = {"feed": client_counters(), "cli": client_counters()}
            broker.subscriptions = [subscription_lag("feed", "s1"), subscription_lag("cli", "x")]
            await next_tick(sampler, clock)  # +10
            await next_tick(sampler, clock)  # +20: the CLI's last tick
            del broker.clients["cli"]
            broker.subscriptions = [subscription_lag("feed", "s1")]
            for _ in range(5):  # +30 .. +70: idle for less than the retention
                await next_tick(sampler, clock)
            assert "clients/cli/msgs_in" in await listed(sampler)
            await next_tick(sampler, clock)  # +80: idle for 60 s
            paths = await listed(sampler)
            assert not [p for p in paths if "/cli/" in p]
            for _ in range(50):  # the connected client outlives the retention many times
                await next_tick(sampler, clock)
            paths = await listed(sampler)
            assert {"clients/feed/msgs_out", "subscriptions/feed/s1/seconds_behind"} <= set(paths)
            assert "instance/msgs_in_rate" in paths
        finally:
            await sampler.stop()
            broker.events.close()

    asyncio.run(main())


def test_a_restart_expires_the_series_of_clients_gone_before_it(tmp_path: Path) -> None:
    config = make_config(tmp_path, client_retention=600.0)
    seeded = StatsStore.open(config.admin.stats_file)
    seeded.writer.write(START - 1000, {"clients/gone/msgs_in": 1.0, "instance/msgs_in": 1.0})
    seeded.writer.write(START - 100, {"clients/recent/msgs_in": 1.0})
    seeded.close()

    async def main() -> None:
        clock = VirtualClock(START)
        broker = MetricsBroker(clock)
        sampler = Sampler(broker, config, clock)
        await sampler.start()
        try:
            assert sampler.client_series.groups() == {
                "clients/gone": START - 1000,
                "clients/recent": START - 100,
            }
            await next_tick(sampler, clock)
            paths = await listed(sampler)
            assert "clients/gone/msgs_in" not in paths
            assert {"clients/recent/msgs_in", "instance/msgs_in"} <= set(paths)
        finally:
            await sampler.stop()
            broker.events.close()

    asyncio.run(main())


def test_live_clients_filling_the_limit_are_reported_once(tmp_path: Path) -> None:
    async def main() -> None:
        clock = VirtualClock(START)
        broker = MetricsBroker(clock)
        sampler = Sampler(broker, make_config(tmp_path, client_limit=18), clock)
        await sampler.start()
        try:
            broker.clients = {name: client_counters() for name in ("a", "b", "c")}
            await next_tick(sampler, clock)
            await next_tick(sampler, clock)
            assert not [p for p in await listed(sampler) if p.startswith("clients/c/")]
            warned = [e for e in broker.events.recent() if e["event"] == "client_stats_limit"]
            assert len(warned) == 1
            assert (warned[0]["level"], warned[0]["refused"]) == ("warning", 1)
            del broker.clients["a"]  # room again: c's series are written from now on
            await next_tick(sampler, clock)
            assert "clients/c/msgs_in" in await listed(sampler)
        finally:
            await sampler.stop()
            broker.events.close()

    asyncio.run(main())
