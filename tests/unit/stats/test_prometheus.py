"""The Prometheus collector renders one snapshot per scrape, per registry."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from spool.server.eventlog import EventLog
from spool.server.stats.histogram import LatencyHistogram
from spool.server.stats.prometheus import make_registry
from spool.server.stats.snapshot import DelayedCounters, MetricsSnapshot
from tests.support.snapshots import (
    client_counters,
    link_counters,
    metrics_snapshot,
    spill_counters,
    subscription_lag,
    topic_counters,
    transport_counters,
    txlog_counters,
)


class ScrapedBroker:
    def __init__(self) -> None:
        self.events = EventLog(None, "prom", console=False)
        self.ready = True
        self.started_at = 1_700_000_000.0
        self.latency = LatencyHistogram()
        self.msgs_in = 0
        self.scrapes = 0
        self.delayed: DelayedCounters | None = {"pending": 6, "delivered": 40}

    def metrics_snapshot(self) -> MetricsSnapshot:
        self.scrapes += 1
        return metrics_snapshot(
            time=0.0,
            msgs_in=self.msgs_in,
            msgs_out=7,
            bytes_in=100,
            bytes_out=70,
            connections=2,
            subscriptions=1,
            clients={'pub "1"': client_counters(msgs_in=5, bytes_in=50, queue_depth=12)},
            topics={"orders": topic_counters(msgs_in=5, bytes_in=50)},
            subscriptions_detail=[
                subscription_lag("sub", "1", topic="orders", position_seq=5, seconds_behind=0.5)
            ],
            txlog=txlog_counters(
                last_seq=5,
                durable_seq=4,
                bytes=4096.0,
                journals=1.0,
                appended=5.0,
                flushes=3.0,
                fsync_p50_ms=0.25,
                fsync_p99_ms=1.5,
            ),
            persisted_ack_latency=self.latency,
            transports={"websocket-json": transport_counters(connections=2)},
            replication={
                "out/b": link_counters(msgs=9, bytes=90, acked=4, messages_behind=1,
                                       seconds_behind=0.25, disconnects=3),
                "in/c": link_counters(direction="in", connected=False, msgs=2, acked=2),
            },
            spills=spill_counters(catching_up=1, spills=4, rejoins=3, seconds=2.5),
            disconnects={"slow_client_stalled": 2, "client": 9},
            queues={"work": {"depth": 7, "backlog": 3, "held": 0, "leased": 4, "consumers": 2,
                             "oldest_lease_age": 1.5, "oldest_message_age": 9.0,
                             "oldest_undelivered_age": 8.0, "stuck": 1,
                             "enqueued": 20, "removed": {"acked": 12, "expired": 1},
                             "dead_lettered": 3, "inactive": 40, "deferred_acks": 2}},
            event_topics={"/spool/events/clients": {"published": 11, "dropped": 2,
                                                    "refused": 1}},
            delayed=self.delayed,
        )  # fmt: skip


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_exposition_reflects_the_snapshot_at_scrape_time() -> None:
    broker = ScrapedBroker()
    registry = make_registry(broker)
    broker.latency.observe(0.0005)
    broker.latency.observe(0.02)
    broker.msgs_in = 5
    got = samples(generate_latest(registry).decode())
    assert got[("spool_messages_in_total", ())] == 5
    assert got[("spool_messages_out_total", ())] == 7
    assert got[("spool_connections", ())] == 2
    assert got[("spool_ready", ())] == 1
    assert got[("spool_client_queue_depth_bytes", (("client", 'pub "1"'),))] == 12
    assert got[("spool_subscriptions_catching_up", ())] == 1
    assert got[("spool_queue_depth", (("queue", "work"),))] == 7
    assert got[("spool_queue_inactive", (("queue", "work"),))] == 40
    assert got[("spool_queue_deferred_acks", (("queue", "work"),))] == 2
    assert got[("spool_queue_leased", (("queue", "work"),))] == 4
    assert got[("spool_queue_oldest_lease_age_seconds", (("queue", "work"),))] == 1.5
    assert got[("spool_queue_oldest_undelivered_age_seconds", (("queue", "work"),))] == 8.0
    assert got[("spool_queue_stuck", (("queue", "work"),))] == 1
    assert got[("spool_queue_enqueued_total", (("queue", "work"),))] == 20
    assert got[("spool_queue_removed_total", (("queue", "work"), ("reason", "acked")))] == 12
    assert got[("spool_queue_dead_lettered_total", (("queue", "work"),))] == 3
    clients = (("topic", "/spool/events/clients"),)
    assert got[("spool_event_topic_messages_total", clients)] == 11
    assert got[("spool_event_topic_dropped_total", clients)] == 2
    assert got[("spool_event_topic_refused_total", clients)] == 1
    assert got[("spool_delayed_pending", ())] == 6
    assert got[("spool_delayed_delivered_total", ())] == 40
    assert got[("spool_spills_total", ())] == 4
    assert got[("spool_catch_ups_total", ())] == 3
    assert got[("spool_catch_up_seconds_total", ())] == 2.5
    assert got[("spool_disconnects_total", (("cause", "slow_client_stalled"),))] == 2
    assert got[("spool_disconnects_total", (("cause", "client"),))] == 9
    assert got[("spool_topic_messages_in_total", (("topic", "orders"),))] == 5
    assert got[("spool_subscription_seconds_behind", (("client", "sub"), ("sub_id", "1")))] == 0.5
    assert got[("spool_transport_connections", (("transport", "websocket-json"),))] == 2
    assert got[("spool_txlog_durable_seq", ())] == 4
    assert got[("spool_fsync_latency_seconds", (("quantile", "0.99"),))] == 0.0015
    assert got[("spool_fsync_latency_seconds_count", ())] == 3
    assert got[("spool_persisted_ack_latency_seconds_count", ())] == 2
    assert got[("spool_persisted_ack_latency_seconds_bucket", (("le", "0.001"),))] == 1
    assert got[("spool_persisted_ack_latency_seconds_bucket", (("le", "+Inf"),))] == 2
    assert any(name.startswith("process_") for name, _ in got)
    out_b = (("direction", "out"), ("link", "b"))
    assert got[("spool_replication_messages_total", out_b)] == 9
    assert got[("spool_replication_acked_position", out_b)] == 4
    assert got[("spool_replication_seconds_behind", out_b)] == 0.25
    assert got[("spool_replication_connected", out_b)] == 1
    assert got[("spool_replication_connected", (("direction", "in"), ("link", "c")))] == 0
    assert got[("spool_replication_sync", (("link", "b"),))] == 1
    assert got[("spool_replication_disconnects_total", (("link", "b"),))] == 3
    broker.msgs_in = 9
    broker.delayed = None  # no transaction log: no delayed delivery, no family
    again = samples(generate_latest(registry).decode())
    assert again[("spool_messages_in_total", ())] == 9
    assert not any(name.startswith("spool_delayed_") for name, _ in again)
    broker.events.close()


def test_registries_are_independent() -> None:
    a, b = ScrapedBroker(), ScrapedBroker()
    ra, rb = make_registry(a), make_registry(b)
    generate_latest(ra)
    assert (a.scrapes, b.scrapes) == (1, 0)
    generate_latest(rb)
    assert (a.scrapes, b.scrapes) == (1, 1)
    a.events.close()
    b.events.close()
