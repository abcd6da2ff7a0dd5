"""The catalogue of stats series: how a :class:`MetricsSnapshot` becomes metric paths.

Pure functions (no I/O, no clock) so the mapping is tested on its own. Counters become both
the cumulative value and a per-second rate over the sampling interval, by the rule of
:mod:`spool.server.stats.rates` (the one the dashboard's live feed uses too): a counter that went
down (a client reconnected under the same name, the broker restarted) counts from zero
again, as Prometheus ``rate()`` does. Names inside paths are percent-encoded
(:func:`segment`), so ``topics/%2Faudit%2Fx/msgs_in_rate`` is topic ``/audit/x``.

Paths (docs/admin-api.md has the full table)::

    instance/{msgs_in,msgs_out,bytes_in,bytes_out}[_rate]  instance/{connections,subscriptions}
    clients/C/{msgs_in,msgs_out,bytes_in,bytes_out}[_rate]  clients/C/queue_depth
    topics/T/{msgs_in,bytes_in}[_rate]
    subscriptions/C/S/seconds_behind
    spills/catching_up  spills/{spills,rejoins,seconds}[_rate]   (with a transaction log)
    disconnects/CAUSE[_rate]
    transports/N/connections
    txlog/{last_seq,durable_seq,bytes,journals}  txlog/{appended,flushes}_rate
    txlog/fsync_{p50,p99}_ms
    persisted_ack/{count,mean_ms,p50_ms,p90_ms,p99_ms,p999_ms}   (per interval)
    replication/out/D/{msgs_out,bytes_out}[_rate]  replication/in/S/{msgs_in,bytes_in}[_rate]
    replication/{out,in}/L/{messages_behind,seconds_behind,acked,connected}
    replication/out/D/{sync,disconnects}
    security/{logon_failures,logon_refused}[_rate]  security/tls_expires_in_days
    queues/Q/{depth,backlog,leased,consumers,oldest_lease_age,oldest_message_age}
    queues/Q/{oldest_undelivered_age,stuck}
    queues/Q/{enqueued,acked}[_rate]
"""

from __future__ import annotations

from typing import Final, Literal
from urllib.parse import quote

from spool.server.stats.histogram import HistogramSnapshot
from spool.server.stats.rates import rate
from spool.server.stats.snapshot import MetricsSnapshot

Counter = Literal["msgs_in", "msgs_out", "bytes_in", "bytes_out"]
"""A traffic counter of the instance and of each client."""
TopicCounter = Literal["msgs_in", "bytes_in"]
"""A traffic counter of each topic."""
TxlogGauge = Literal["last_seq", "durable_seq", "bytes", "journals"]
TxlogCounter = Literal["appended", "flushes"]
TxlogLatency = Literal["fsync_p50_ms", "fsync_p99_ms"]
SpillCounter = Literal["spills", "rejoins", "seconds"]
QueueGauge = Literal[
    "depth",
    "backlog",
    "held",
    "leased",
    "consumers",
    "oldest_lease_age",
    "oldest_message_age",
    "oldest_undelivered_age",
    "stuck",
    "inactive",
    "deferred_acks",
]

COUNTERS: Final[tuple[Counter, ...]] = ("msgs_in", "msgs_out", "bytes_in", "bytes_out")
TOPIC_COUNTERS: Final[tuple[TopicCounter, ...]] = ("msgs_in", "bytes_in")
QUEUE_GAUGES: Final[tuple[QueueGauge, ...]] = (
    "depth", "backlog", "leased", "consumers", "oldest_lease_age", "oldest_message_age",
    "oldest_undelivered_age", "stuck",
)  # fmt: skip
TXLOG_GAUGES: Final[tuple[TxlogGauge, ...]] = ("last_seq", "durable_seq", "bytes", "journals")
TXLOG_COUNTERS: Final[tuple[TxlogCounter, ...]] = ("appended", "flushes")
TXLOG_LATENCIES: Final[tuple[TxlogLatency, ...]] = ("fsync_p50_ms", "fsync_p99_ms")
SPILL_COUNTERS: Final[tuple[SpillCounter, ...]] = ("spills", "rejoins", "seconds")
ACK_PERCENTILES: Final = (("p50_ms", 50.0), ("p90_ms", 90.0), ("p99_ms", 99.0), ("p999_ms", 99.9))


def segment(name: str) -> str:
    """A name made safe to be one segment of a metric path."""
    return quote(name, safe="")


def _counter(
    out: dict[str, float], path: str, now: float, before: float | None, elapsed: float
) -> None:
    """Store a counter's cumulative value and, when time passed, its rate (``_rate``)."""
    out[path] = float(now)
    if elapsed > 0:
        out[f"{path}_rate"] = float(rate(now, before, elapsed))


def snapshot_values(
    current: MetricsSnapshot,
    previous: MetricsSnapshot | None,
    elapsed: float,
    ack_delta: HistogramSnapshot | None = None,
) -> dict[str, float]:
    """Metric path -> value for one sampling tick.

    Args:
        current: this tick's ``metrics_snapshot()``.
        previous: the previous tick's snapshot (None: every counter counts from zero).
        elapsed: seconds between the two snapshots (rates are skipped when not positive).
        ack_delta: persisted-ack latencies observed during the interval
            (:func:`spool.server.stats.rates.interval_histogram`).
    """
    out: dict[str, float] = {}
    before: float | None
    for key in COUNTERS:
        before = previous[key] if previous is not None else None
        _counter(out, f"instance/{key}", current[key], before, elapsed)
    out["instance/connections"] = float(current["connections"])
    out["instance/subscriptions"] = float(current["subscriptions"])

    prev_clients = previous["clients"] if previous is not None else {}
    for name, client in current["clients"].items():
        base = f"clients/{segment(name)}"
        prev_client = prev_clients.get(name)  # None: connected during the interval
        for key in COUNTERS:
            before = prev_client[key] if prev_client is not None else None
            _counter(out, f"{base}/{key}", client[key], before, elapsed)
        out[f"{base}/queue_depth"] = float(client["queue_depth"])

    prev_topics = previous["topics"] if previous is not None else {}
    for topic, counters in current["topics"].items():
        base = f"topics/{segment(topic)}"
        prev_topic = prev_topics.get(topic)  # None: first published to during the interval
        for tkey in TOPIC_COUNTERS:
            before = prev_topic[tkey] if prev_topic is not None else None
            _counter(out, f"{base}/{tkey}", counters[tkey], before, elapsed)

    for sub in current["subscriptions_detail"]:
        base = f"subscriptions/{segment(str(sub['client']))}/{segment(sub['sub_id'])}"
        out[f"{base}/seconds_behind"] = float(sub["seconds_behind"])

    if current["txlog"] is not None:  # only a transaction log can be read back from
        spills = current["spills"]
        prev_spills = previous["spills"] if previous is not None else None
        out["spills/catching_up"] = float(spills["catching_up"])
        for skey in SPILL_COUNTERS:
            before = prev_spills[skey] if prev_spills is not None else None
            _counter(out, f"spills/{skey}", spills[skey], before, elapsed)

    prev_disconnects = previous["disconnects"] if previous is not None else {}
    for cause, count in current["disconnects"].items():
        _counter(out, f"disconnects/{segment(cause)}", count, prev_disconnects.get(cause), elapsed)

    for name, transport in current["transports"].items():
        out[f"transports/{segment(name)}/connections"] = float(transport["connections"])

    txlog = current["txlog"]
    if txlog is not None:
        for gauge in TXLOG_GAUGES:
            out[f"txlog/{gauge}"] = float(txlog[gauge])
        prev_txlog = previous["txlog"] if previous is not None else None
        if elapsed > 0:
            # stored as rates only (docs/admin-api.md); the totals are spool_txlog_*_total
            for counter in TXLOG_COUNTERS:
                before = prev_txlog[counter] if prev_txlog is not None else None
                out[f"txlog/{counter}_rate"] = rate(txlog[counter], before, elapsed)
        for latency in TXLOG_LATENCIES:
            out[f"txlog/{latency}"] = float(txlog[latency])

    prev_links = previous["replication"] if previous is not None else {}
    for link_key, link in current["replication"].items():
        direction, _, name = link_key.partition("/")
        base = f"replication/{direction}/{segment(name)}"
        prev_link = prev_links.get(link_key)
        suffix = "out" if direction == "out" else "in"
        before = prev_link["msgs"] if prev_link is not None else None
        _counter(out, f"{base}/msgs_{suffix}", link["msgs"], before, elapsed)
        before = prev_link["bytes"] if prev_link is not None else None
        _counter(out, f"{base}/bytes_{suffix}", link["bytes"], before, elapsed)
        out[f"{base}/messages_behind"] = float(link["messages_behind"])
        out[f"{base}/seconds_behind"] = float(link["seconds_behind"])
        out[f"{base}/acked"] = float(link["acked"])
        out[f"{base}/connected"] = 1.0 if link["connected"] else 0.0
        if direction == "out":
            out[f"{base}/sync"] = 1.0 if link["sync"] else 0.0
            out[f"{base}/disconnects"] = float(link["disconnects"])
    prev_queues = previous["queues"] if previous is not None else {}
    for name, q in current["queues"].items():
        base = f"queues/{segment(name)}"
        for queue_gauge in QUEUE_GAUGES:
            out[f"{base}/{queue_gauge}"] = float(q[queue_gauge])
        prev_q = prev_queues.get(name)
        _counter(out, f"{base}/enqueued", q["enqueued"],
                 prev_q["enqueued"] if prev_q is not None else None, elapsed)  # fmt: skip
        _counter(out, f"{base}/acked", q["removed"].get("acked", 0),
                 prev_q["removed"].get("acked", 0) if prev_q is not None else None, elapsed)  # fmt: skip
    security = current["security"]
    prev_security = previous["security"] if previous is not None else None
    for path, per_path, prev_per_path in (
        (
            "security/logon_failures",
            security["logon_failures"],
            prev_security["logon_failures"] if prev_security is not None else None,
        ),
        (
            "security/logon_refused",
            security["logon_refused"],
            prev_security["logon_refused"] if prev_security is not None else None,
        ),
    ):
        total = float(sum(per_path.values()))
        before = float(sum(prev_per_path.values())) if prev_per_path is not None else None
        _counter(out, path, total, before, elapsed)
    not_after = security["tls_not_after"]
    if not_after is not None:
        out["security/tls_expires_in_days"] = (not_after - current["time"]) / 86400.0

    if ack_delta is not None:
        out["persisted_ack/count"] = float(ack_delta.count)
        if ack_delta.count:
            out["persisted_ack/mean_ms"] = ack_delta.mean * 1000.0
            for name, p in ACK_PERCENTILES:
                out[f"persisted_ack/{name}"] = ack_delta.percentile(p) * 1000.0
    return out
