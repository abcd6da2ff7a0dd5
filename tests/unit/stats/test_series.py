"""Snapshot -> metric paths (pure)."""

from __future__ import annotations

from typing import Any

import pytest

from server.stats.histogram import LatencyHistogram
from server.stats.series import segment, snapshot_values


def snap(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "time": 0.0,
        "msgs_in": 0,
        "msgs_out": 0,
        "bytes_in": 0,
        "bytes_out": 0,
        "connections": 0,
        "subscriptions": 0,
        "clients": {},
        "topics": {},
        "subscriptions_detail": [],
        "txlog": None,
        "transports": {},
    }
    base.update(over)
    return base


def test_instance_counters_become_totals_and_rates() -> None:
    prev = snap(msgs_in=100, msgs_out=50, bytes_in=1000, bytes_out=500)
    cur = snap(
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
    prev = snap(
        clients={
            "a": {"msgs_in": 500, "msgs_out": 0, "bytes_in": 0, "bytes_out": 0, "queue_depth": 0}
        }
    )
    cur = snap(
        clients={
            "a": {"msgs_in": 30, "msgs_out": 0, "bytes_in": 0, "bytes_out": 0, "queue_depth": 7},
            "b/x": {"msgs_in": 10, "msgs_out": 20, "bytes_in": 0, "bytes_out": 0, "queue_depth": 0},
        }
    )
    values = snapshot_values(cur, prev, 10.0)
    assert values["clients/a/msgs_in_rate"] == 3.0  # reconnected: 30 new messages
    assert values["clients/a/queue_depth"] == 7
    assert values["clients/b%2Fx/msgs_out_rate"] == 2.0
    assert values["clients/b%2Fx/msgs_out"] == 20


def test_no_rates_without_elapsed_time() -> None:
    values = snapshot_values(snap(msgs_in=5), None, 0.0)
    assert values["instance/msgs_in"] == 5
    assert "instance/msgs_in_rate" not in values


def test_topics_subscriptions_transports_txlog() -> None:
    cur = snap(
        topics={"/audit/x": {"msgs_in": 40, "bytes_in": 400}},
        subscriptions_detail=[
            {
                "client": "c",
                "sub_id": "s1",
                "topic": "t",
                "state": "replaying",
                "position_seq": 1,
                "seconds_behind": 2.5,
            }
        ],
        transports={"websocket-json": {"connections": 4, "enabled": True}},
        txlog={
            "last_seq": 90,
            "durable_seq": 80,
            "bytes": 4096,
            "journals": 2,
            "appended": 90,
            "flushes": 30,
            "fsync_p50_ms": 0.2,
            "fsync_p99_ms": 0.9,
        },
    )
    prev = snap(
        txlog={
            "last_seq": 0,
            "durable_seq": 0,
            "bytes": 0,
            "journals": 1,
            "appended": 10,
            "flushes": 10,
        }
    )
    values = snapshot_values(cur, prev, 4.0)
    assert values["topics/%2Faudit%2Fx/msgs_in_rate"] == 10.0
    assert values["subscriptions/c/s1/seconds_behind"] == 2.5
    assert values["transports/websocket-json/connections"] == 4
    assert values["txlog/durable_seq"] == 80
    assert values["txlog/appended_rate"] == 20.0
    assert values["txlog/flushes_rate"] == 5.0
    assert values["txlog/fsync_p99_ms"] == 0.9


def test_persisted_ack_percentiles_of_the_interval() -> None:
    h = LatencyHistogram()
    for _ in range(99):
        h.observe(0.001)
    h.observe(0.1)
    values = snapshot_values(snap(), None, 1.0, h.snapshot())
    assert values["persisted_ack/count"] == 100
    assert values["persisted_ack/p50_ms"] == pytest.approx(1.0, rel=0.13)
    assert values["persisted_ack/p999_ms"] == pytest.approx(100.0, rel=0.13)
    empty = snapshot_values(snap(), None, 1.0, h.delta(h.snapshot()))
    assert empty["persisted_ack/count"] == 0
    assert "persisted_ack/p99_ms" not in empty


def test_segment_escapes_separators() -> None:
    assert segment("a/b c%") == "a%2Fb%20c%25"
