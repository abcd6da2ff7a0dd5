"""The catalogue of stats series: how a ``metrics_snapshot()`` becomes metric paths.

Pure functions (no I/O, no clock) so the mapping is tested on its own. Counters become both
the cumulative value and a per-second rate over the sampling interval; a counter that went
down (a client reconnected under the same name, the broker restarted) counts from zero
again, as Prometheus ``rate()`` does. Names inside paths are percent-encoded
(:func:`segment`), so ``topics/%2Faudit%2Fx/msgs_in_rate`` is topic ``/audit/x``.

Paths (docs/admin-api.md has the full table)::

    instance/{msgs_in,msgs_out,bytes_in,bytes_out}[_rate]  instance/{connections,subscriptions}
    clients/C/{msgs_in,msgs_out,bytes_in,bytes_out}[_rate]  clients/C/queue_depth
    topics/T/{msgs_in,bytes_in}[_rate]
    subscriptions/C/S/seconds_behind
    transports/N/connections
    txlog/{last_seq,durable_seq,bytes,journals}  txlog/{appended,flushes}_rate
    txlog/fsync_{p50,p99}_ms
    persisted_ack/{count,mean_ms,p50_ms,p90_ms,p99_ms,p999_ms}   (per interval)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import quote

from server.stats.histogram import HistogramSnapshot

COUNTERS: Final = ("msgs_in", "msgs_out", "bytes_in", "bytes_out")
TOPIC_COUNTERS: Final = ("msgs_in", "bytes_in")
ACK_PERCENTILES: Final = (("p50_ms", 50.0), ("p90_ms", 90.0), ("p99_ms", 99.0), ("p999_ms", 99.9))


def segment(name: str) -> str:
    """A name made safe to be one segment of a metric path."""
    return quote(name, safe="")


def _counter(
    out: dict[str, float],
    base: str,
    key: str,
    current: Mapping[str, Any],
    previous: Mapping[str, Any] | None,
    elapsed: float,
) -> None:
    value = current.get(key)
    if value is None:
        return
    now = float(value)
    before = float(previous.get(key, 0)) if previous is not None else 0.0
    delta = now - before if now >= before else now
    out[f"{base}/{key}"] = now
    if elapsed > 0:
        out[f"{base}/{key}_rate"] = delta / elapsed


def snapshot_values(
    current: Mapping[str, Any],
    previous: Mapping[str, Any] | None,
    elapsed: float,
    ack_delta: HistogramSnapshot | None = None,
) -> dict[str, float]:
    """Metric path -> value for one sampling tick.

    Args:
        current: this tick's ``broker.metrics_snapshot()``.
        previous: the previous tick's snapshot (None: rates count from zero).
        elapsed: seconds between the two snapshots (rates are skipped when not positive).
        ack_delta: persisted-ack latencies observed during the interval.
    """
    out: dict[str, float] = {}
    for key in COUNTERS:
        _counter(out, "instance", key, current, previous, elapsed)
    for key in ("connections", "subscriptions"):
        if key in current:
            out[f"instance/{key}"] = float(current[key])

    prev_clients: Mapping[str, Any] = (previous or {}).get("clients") or {}
    for name, stats in (current.get("clients") or {}).items():
        base = f"clients/{segment(name)}"
        for key in COUNTERS:
            _counter(out, base, key, stats, prev_clients.get(name), elapsed)
        if "queue_depth" in stats:
            out[f"{base}/queue_depth"] = float(stats["queue_depth"])

    prev_topics: Mapping[str, Any] = (previous or {}).get("topics") or {}
    for topic, stats in (current.get("topics") or {}).items():
        base = f"topics/{segment(topic)}"
        for key in TOPIC_COUNTERS:
            _counter(out, base, key, stats, prev_topics.get(topic), elapsed)

    for sub in current.get("subscriptions_detail") or ():
        base = f"subscriptions/{segment(str(sub['client']))}/{segment(str(sub['sub_id']))}"
        out[f"{base}/seconds_behind"] = float(sub.get("seconds_behind", 0.0))

    for name, stats in (current.get("transports") or {}).items():
        out[f"transports/{segment(name)}/connections"] = float(stats.get("connections", 0))

    txlog = current.get("txlog")
    if txlog:
        for key in ("last_seq", "durable_seq", "bytes", "journals"):
            if key in txlog:
                out[f"txlog/{key}"] = float(txlog[key])
        prev_txlog = (previous or {}).get("txlog")
        for key in ("appended", "flushes"):
            if key in txlog and elapsed > 0:
                now = float(txlog[key])
                before = float(prev_txlog.get(key, 0)) if prev_txlog else 0.0
                out[f"txlog/{key}_rate"] = (now - before if now >= before else now) / elapsed
        for key in ("fsync_p50_ms", "fsync_p99_ms"):
            if txlog.get(key) is not None:
                out[f"txlog/{key}"] = float(txlog[key])

    security = current.get("security")
    if security:
        prev_security = (previous or {}).get("security") or {}
        for key in ("logon_failures", "logon_refused"):
            now_total = float(sum(security.get(key, {}).values()))
            out[f"security/{key}"] = now_total
            if elapsed > 0:
                before = float(sum((prev_security.get(key) or {}).values()))
                delta = now_total - before if now_total >= before else now_total
                out[f"security/{key}_rate"] = delta / elapsed
        if security.get("tls_not_after") is not None:
            days = (float(security["tls_not_after"]) - float(current.get("time", 0.0))) / 86400
            out["security/tls_expires_in_days"] = days

    if ack_delta is not None:
        out["persisted_ack/count"] = float(ack_delta.count)
        if ack_delta.count:
            out["persisted_ack/mean_ms"] = ack_delta.mean * 1000.0
            for name, p in ACK_PERCENTILES:
                out[f"persisted_ack/{name}"] = ack_delta.percentile(p) * 1000.0
    return out
