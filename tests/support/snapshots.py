"""Complete metrics snapshots for tests, built with keyword overrides.

The stats series, the Prometheus collector and the dashboard's live feed read a
:class:`~spool.server.stats.snapshot.MetricsSnapshot` by key without defaults, so a test feeds
them the whole shape, as :meth:`spool.server.metrics.Metrics.snapshot` builds it: every field
is here with a neutral default (no traffic, no clients, no transaction log), and a test
names only what it is about::

    metrics_snapshot(msgs_in=300, clients={"a": client_counters(queue_depth=7)})
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from spool.server.stats.histogram import LatencyHistogram
from spool.server.stats.snapshot import (
    ClientCounters,
    DelayedCounters,
    EventTopicCounters,
    LinkCounters,
    MetricsSnapshot,
    QueueCounters,
    SecurityCounters,
    SpillCounters,
    SubscriptionLag,
    TopicCounters,
    TransportCounters,
    TxlogCounters,
)

EPOCH = 1_700_000_000.0
"""The default ``time`` of a snapshot (epoch seconds)."""


def client_counters(
    *,
    msgs_in: int = 0,
    msgs_out: int = 0,
    bytes_in: int = 0,
    bytes_out: int = 0,
    queue_depth: int = 0,
) -> ClientCounters:
    """One client's counters."""
    return {
        "msgs_in": msgs_in,
        "msgs_out": msgs_out,
        "bytes_in": bytes_in,
        "bytes_out": bytes_out,
        "queue_depth": queue_depth,
    }


def topic_counters(*, msgs_in: int = 0, bytes_in: int = 0) -> TopicCounters:
    """One topic's counters."""
    return {"msgs_in": msgs_in, "bytes_in": bytes_in}


def subscription_lag(
    client: str | None = "c",
    sub_id: str = "1",
    *,
    topic: str = "t",
    state: str = "live",
    position_seq: int = 0,
    seconds_behind: float = 0.0,
) -> SubscriptionLag:
    """Where one subscription stands."""
    return {
        "client": client,
        "sub_id": sub_id,
        "topic": topic,
        "state": state,
        "position_seq": position_seq,
        "seconds_behind": seconds_behind,
    }


def txlog_counters(
    *,
    last_seq: int = 0,
    durable_seq: int = 0,
    bytes: float = 0.0,
    journals: float = 1.0,
    appended: float = 0.0,
    flushes: float = 0.0,
    fsync_p50_ms: float = 0.0,
    fsync_p99_ms: float = 0.0,
    refusing_writes: bool = False,
    write_outages: float = 0.0,
    write_retries: float = 0.0,
    preallocation_shortfall: bool = False,
    damaged_ranges: float = 0.0,
    fenced_ranges: float = 0.0,
    fenced_records: float = 0.0,
    scrub_bytes: float = 0.0,
    scrub_passes: float = 0.0,
) -> TxlogCounters:
    """The transaction log's counters."""
    return {
        "last_seq": last_seq,
        "durable_seq": durable_seq,
        "bytes": bytes,
        "journals": journals,
        "appended": appended,
        "flushes": flushes,
        "fsync_p50_ms": fsync_p50_ms,
        "fsync_p99_ms": fsync_p99_ms,
        "refusing_writes": refusing_writes,
        "write_outages": write_outages,
        "write_retries": write_retries,
        "preallocation_shortfall": preallocation_shortfall,
        "damaged_ranges": damaged_ranges,
        "fenced_ranges": fenced_ranges,
        "fenced_records": fenced_records,
        "scrub_bytes": scrub_bytes,
        "scrub_passes": scrub_passes,
    }


def transport_counters(*, connections: int = 0, enabled: bool = True) -> TransportCounters:
    """One transport."""
    return {"connections": connections, "enabled": enabled}


def link_counters(
    *,
    direction: str = "out",
    connected: bool = True,
    sync: bool = True,
    msgs: int = 0,
    bytes: int = 0,
    acked: int = 0,
    messages_behind: int = 0,
    seconds_behind: float = 0.0,
    disconnects: int = 0,
) -> LinkCounters:
    """One replication link."""
    return {
        "direction": direction,
        "connected": connected,
        "sync": sync,
        "msgs": msgs,
        "bytes": bytes,
        "acked": acked,
        "messages_behind": messages_behind,
        "seconds_behind": seconds_behind,
        "disconnects": disconnects,
    }


def spill_counters(
    *, catching_up: int = 0, spills: int = 0, rejoins: int = 0, seconds: float = 0.0
) -> SpillCounters:
    """The catch-up reads of live subscriptions."""
    return {"catching_up": catching_up, "spills": spills, "rejoins": rejoins, "seconds": seconds}


def security_counters(
    *,
    logon_failures: Mapping[str, int] | None = None,
    logon_refused: Mapping[str, int] | None = None,
    tls_not_after: float | None = None,
) -> SecurityCounters:
    """Logons and TLS: no logons yet, plain text unless ``tls_not_after`` is given."""
    zero = {"websocket": 0, "dashboard": 0}
    return {
        "logon_succeeded": dict(zero),
        "logon_failures": dict(logon_failures or zero),
        "logon_refused": dict(logon_refused or zero),
        "blocked_addresses": 0,
        "blocked_users": 0,
        "password_checks": 0,
        "password_check_seconds": 0.0,
        "password_checks_pending": 0,
        "tls_enabled": tls_not_after is not None,
        "tls_not_after": tls_not_after,
        "tls_reloads": 0,
        "plaintext_exposed": False,
    }


def metrics_snapshot(
    *,
    time: float = EPOCH,
    msgs_in: int = 0,
    msgs_out: int = 0,
    bytes_in: int = 0,
    bytes_out: int = 0,
    connections: int = 0,
    subscriptions: int = 0,
    clients: Mapping[str, ClientCounters] | None = None,
    topics: Mapping[str, TopicCounters] | None = None,
    subscriptions_detail: Iterable[SubscriptionLag] = (),
    txlog: TxlogCounters | None = None,
    persisted_ack_latency: LatencyHistogram | None = None,
    transports: Mapping[str, TransportCounters] | None = None,
    replication: Mapping[str, LinkCounters] | None = None,
    security: SecurityCounters | None = None,
    spills: SpillCounters | None = None,
    disconnects: Mapping[str, int] | None = None,
    queues: Mapping[str, QueueCounters] | None = None,
    event_topics: Mapping[str, EventTopicCounters] | None = None,
    delayed: DelayedCounters | None = None,
) -> MetricsSnapshot:
    """A complete snapshot; every field not given is empty (a fresh histogram for acks)."""
    return {
        "time": time,
        "msgs_in": msgs_in,
        "msgs_out": msgs_out,
        "bytes_in": bytes_in,
        "bytes_out": bytes_out,
        "connections": connections,
        "subscriptions": subscriptions,
        "clients": dict(clients or {}),
        "topics": dict(topics or {}),
        "subscriptions_detail": list(subscriptions_detail),
        "txlog": txlog,
        "persisted_ack_latency": (
            persisted_ack_latency if persisted_ack_latency is not None else LatencyHistogram()
        ),
        "transports": dict(transports or {}),
        "replication": dict(replication or {}),
        "security": security if security is not None else security_counters(),
        "spills": spills if spills is not None else spill_counters(),
        "disconnects": dict(disconnects or {}),
        "queues": dict(queues or {}),
        "event_topics": dict(event_topics or {}),
        "delayed": delayed,
    }
