"""Snapshot -> metric paths (pure)."""

from __future__ import annotations

import pytest

from spool.server.stats.histogram import LatencyHistogram
from spool.server.stats.series import segment, snapshot_values
from tests.support.snapshots import (
    client_counters,
    link_counters,
    metrics_snapshot,
    security_counters,
    spill_counters,
    subscription_lag,
    topic_counters,
    transport_counters,
    txlog_counters,
)


def test_instance_counters_become_totals_and_rates() -> None:
    prev = metrics_snapshot(msgs_in=100, msgs_out=50, bytes_in=1000, bytes_out=500)
    cur = metrics_snapshot(
        msgs_in=300, msgs_out=50, bytes_in=3000, bytes_out=900, connections=3, subscriptions=2
    )
    values = snapshot_values(cur, prev, 10.0)
    assert values["instance/msgs_in"] == 300
    assert values["instance/msgs_in_rate"] == 20.0
    assert values["instance/msgs_out_rate"] == 0.0
    assert values["instance/bytes_in_rate"] == 200.0
    assert values["instance/bytes_out_rate"] == 40.0
    assert values["instance/connections"] == 3
    assert values["instance/subscriptions"] == 2


def test_counter_reset_counts_from_zero_and_new_clients_from_zero() -> None:
    prev = metrics_snapshot(clients={"a": client_counters(msgs_in=500)})
    cur = metrics_snapshot(
        clients={
            "a": client_counters(msgs_in=30, queue_depth=7),
            "b/x": client_counters(msgs_in=10, msgs_out=20),
        }
    )
    values = snapshot_values(cur, prev, 10.0)
    assert values["clients/a/msgs_in_rate"] == 3.0  # reconnected: 30 new messages
    assert values["clients/a/queue_depth"] == 7
    assert values["clients/b%2Fx/msgs_out_rate"] == 2.0
    assert values["clients/b%2Fx/msgs_out"] == 20


def test_without_a_previous_snapshot_every_counter_counts_from_zero() -> None:
    cur = metrics_snapshot(
        msgs_in=40,
        topics={"t": topic_counters(msgs_in=8)},
        txlog=txlog_counters(appended=12.0),
    )
    values = snapshot_values(cur, None, 4.0)
    assert values["instance/msgs_in_rate"] == 10.0
    assert values["topics/t/msgs_in_rate"] == 2.0
    assert values["txlog/appended_rate"] == 3.0


def test_no_rates_without_elapsed_time() -> None:
    cur = metrics_snapshot(msgs_in=5, txlog=txlog_counters(appended=5.0))
    values = snapshot_values(cur, None, 0.0)
    assert values["instance/msgs_in"] == 5
    assert not [path for path in values if path.endswith("_rate")]


def test_topics_subscriptions_transports_txlog() -> None:
    cur = metrics_snapshot(
        topics={"/audit/x": topic_counters(msgs_in=40, bytes_in=400)},
        subscriptions_detail=[subscription_lag("c", "s1", state="replaying", seconds_behind=2.5)],
        transports={"websocket-json": transport_counters(connections=4)},
        txlog=txlog_counters(
            last_seq=90,
            durable_seq=80,
            bytes=4096.0,
            journals=2.0,
            appended=90.0,
            flushes=30.0,
            fsync_p50_ms=0.2,
            fsync_p99_ms=0.9,
        ),
    )
    prev = metrics_snapshot(txlog=txlog_counters(appended=10.0, flushes=10.0))
    values = snapshot_values(cur, prev, 4.0)
    assert values["topics/%2Faudit%2Fx/msgs_in_rate"] == 10.0
    assert values["subscriptions/c/s1/seconds_behind"] == 2.5
    assert values["transports/websocket-json/connections"] == 4
    assert values["txlog/durable_seq"] == 80
    assert values["txlog/appended_rate"] == 20.0
    assert values["txlog/flushes_rate"] == 5.0
    assert values["txlog/fsync_p99_ms"] == 0.9


def test_a_restarted_log_counts_its_appends_from_zero() -> None:
    prev = metrics_snapshot(txlog=txlog_counters(appended=1000.0, flushes=300.0))
    cur = metrics_snapshot(txlog=txlog_counters(appended=20.0, flushes=4.0))
    values = snapshot_values(cur, prev, 2.0)
    assert (values["txlog/appended_rate"], values["txlog/flushes_rate"]) == (10.0, 2.0)


def test_the_catalogue_of_paths() -> None:
    """Every path one snapshot of each kind of thing produces (docs/admin-api.md)."""
    h = LatencyHistogram()
    h.observe(0.001)
    cur = metrics_snapshot(
        clients={"a": client_counters()},
        topics={"t": topic_counters()},
        subscriptions_detail=[subscription_lag("a", "s")],
        transports={"ws": transport_counters()},
        txlog=txlog_counters(),
        security=security_counters(tls_not_after=1_800_000_000.0),
        disconnects={"slow_client_stalled": 0, "heartbeat": 2},
    )
    counters = ("msgs_in", "msgs_out", "bytes_in", "bytes_out")
    security = (
        *(f"security/{k}{r}" for k in ("logon_failures", "logon_refused") for r in ("", "_rate")),
    )
    assert set(snapshot_values(cur, cur, 1.0, h.snapshot())) == {
        *(f"instance/{k}{r}" for k in counters for r in ("", "_rate")),
        "instance/connections",
        "instance/subscriptions",
        *(f"clients/a/{k}{r}" for k in counters for r in ("", "_rate")),
        "clients/a/queue_depth",
        *(f"topics/t/{k}{r}" for k in ("msgs_in", "bytes_in") for r in ("", "_rate")),
        "subscriptions/a/s/seconds_behind",
        "transports/ws/connections",
        *(f"txlog/{k}" for k in ("last_seq", "durable_seq", "bytes", "journals")),
        "txlog/appended_rate",
        "txlog/flushes_rate",
        "txlog/fsync_p50_ms",
        "txlog/fsync_p99_ms",
        "spills/catching_up",
        *(f"spills/{k}{r}" for k in ("spills", "rejoins", "seconds") for r in ("", "_rate")),
        *(
            f"disconnects/{k}{r}"
            for k in ("slow_client_stalled", "heartbeat")
            for r in ("", "_rate")
        ),
        *(f"persisted_ack/{k}" for k in ("count", "mean_ms", "p50_ms", "p90_ms", "p99_ms")),
        "persisted_ack/p999_ms",
        *security,
        "security/tls_expires_in_days",
    }
    assert set(snapshot_values(metrics_snapshot(), None, 1.0)) == {
        *(f"instance/{k}{r}" for k in counters for r in ("", "_rate")),
        "instance/connections",
        "instance/subscriptions",
        *security,
    }


def test_persisted_ack_percentiles_of_the_interval() -> None:
    h = LatencyHistogram()
    for _ in range(99):
        h.observe(0.001)
    h.observe(0.1)
    values = snapshot_values(metrics_snapshot(), None, 1.0, h.snapshot())
    assert values["persisted_ack/count"] == 100
    assert values["persisted_ack/p50_ms"] == pytest.approx(1.0, rel=0.13)
    assert values["persisted_ack/p999_ms"] == pytest.approx(100.0, rel=0.13)
    empty = snapshot_values(metrics_snapshot(), None, 1.0, h.delta(h.snapshot()))
    assert empty["persisted_ack/count"] == 0
    assert "persisted_ack/p99_ms" not in empty


def test_segment_escapes_separators() -> None:
    assert segment("a/b c%") == "a%2Fb%20c%25"


def test_replication_links_become_series_per_direction_and_name() -> None:
    prev = metrics_snapshot(replication={"out/b": link_counters(msgs=100, bytes=1000)})
    cur = metrics_snapshot(
        replication={
            "out/b": link_counters(
                msgs=300, bytes=3000, acked=250, messages_behind=50, seconds_behind=1.5,
                disconnects=2, sync=False,
            ),
            "in/a.x": link_counters(direction="in", msgs=40, bytes=400, acked=39),
        }
    )  # fmt: skip
    values = snapshot_values(cur, prev, 10.0)
    assert values["replication/out/b/msgs_out"] == 300
    assert values["replication/out/b/msgs_out_rate"] == 20.0
    assert values["replication/out/b/bytes_out_rate"] == 200.0
    assert values["replication/out/b/messages_behind"] == 50
    assert values["replication/out/b/seconds_behind"] == 1.5
    assert values["replication/out/b/acked"] == 250
    assert values["replication/out/b/connected"] == 1.0
    assert values["replication/out/b/sync"] == 0.0
    assert values["replication/out/b/disconnects"] == 2
    assert values["replication/in/a.x/msgs_in_rate"] == 4.0  # a new link counts from zero
    assert "replication/in/a.x/sync" not in values


def test_security_series_sum_both_logon_paths_and_count_days_to_expiry() -> None:
    prev = metrics_snapshot(
        security=security_counters(logon_failures={"websocket": 3, "dashboard": 1})
    )
    cur = metrics_snapshot(
        time=1_700_000_000.0,
        security=security_counters(
            logon_failures={"websocket": 13, "dashboard": 1},
            logon_refused={"websocket": 90, "dashboard": 0},
            tls_not_after=1_700_000_000.0 + 14 * 86400,
        ),
    )
    values = snapshot_values(cur, prev, 10.0)
    assert values["security/logon_failures"] == 14
    assert values["security/logon_failures_rate"] == 1.0
    assert values["security/logon_refused_rate"] == 9.0
    assert values["security/tls_expires_in_days"] == 14.0
    plain = snapshot_values(metrics_snapshot(), None, 1.0)
    assert "security/tls_expires_in_days" not in plain


def test_spills_and_disconnects_by_cause() -> None:
    prev = metrics_snapshot(
        txlog=txlog_counters(),
        spills=spill_counters(spills=2, rejoins=1, seconds=3.0),
        disconnects={"slow_client_stalled": 1, "client": 5},
    )
    cur = metrics_snapshot(
        txlog=txlog_counters(),
        spills=spill_counters(catching_up=1, spills=6, rejoins=5, seconds=7.0),
        disconnects={"slow_client_stalled": 3, "client": 5},
    )
    values = snapshot_values(cur, prev, 2.0)
    assert values["spills/catching_up"] == 1
    assert (values["spills/spills"], values["spills/spills_rate"]) == (6, 2.0)
    assert values["spills/rejoins_rate"] == 2.0
    # seconds spent catching up per second: how many subscriptions caught up, on average
    assert values["spills/seconds_rate"] == 2.0
    assert (
        values["disconnects/slow_client_stalled"],
        values["disconnects/slow_client_stalled_rate"],
    ) == (3, 1.0)
    assert values["disconnects/client_rate"] == 0.0
    # without a transaction log nothing can spill: no spill series
    assert not [
        p for p in snapshot_values(metrics_snapshot(), None, 1.0) if p.startswith("spills/")
    ]


def test_queues_become_gauges_and_counter_rates() -> None:
    def q(enqueued: int, acked: int) -> dict[str, object]:
        return {"depth": 5, "backlog": 2, "held": 0, "leased": 3, "consumers": 1, "oldest_lease_age": 0.5,
                "oldest_message_age": 4.0, "oldest_undelivered_age": 3.0,
                "stuck": 0, "enqueued": enqueued, "removed": {"acked": acked},
                "dead_lettered": 0, "inactive": 0, "deferred_acks": 0}  # fmt: skip

    prev = metrics_snapshot(queues={"a/b": q(10, 4)})  # type: ignore[dict-item]
    cur = metrics_snapshot(queues={"a/b": q(30, 14)})  # type: ignore[dict-item]
    values = snapshot_values(cur, prev, 10.0)
    assert values["queues/a%2Fb/depth"] == 5 and values["queues/a%2Fb/leased"] == 3
    assert values["queues/a%2Fb/enqueued_rate"] == 2.0
    assert values["queues/a%2Fb/acked_rate"] == 1.0
    assert values["queues/a%2Fb/oldest_message_age"] == 4.0
