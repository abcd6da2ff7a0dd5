"""Prometheus exposition: a collector that reads the broker at scrape time.

Nothing is incremented on the hot path for Prometheus: the engine keeps its own plain
counters and the latency histogram, and :class:`SpoolCollector` turns one
``broker.metrics_snapshot()`` into metric families when ``/metrics`` is scraped (on the
event loop; the snapshot is cheap). Each app gets its own :class:`CollectorRegistry` from
:func:`make_registry`, so several brokers (tests) in one process never collide in the
global registry.

Families (``_total`` suffixes are added by the exposition format for counters)::

    spool_messages_in_total / spool_messages_out_total / spool_bytes_in_total / ..._out_total
    spool_connections, spool_subscriptions, spool_ready, spool_start_time_seconds
    spool_client_{messages,bytes}_{in,out}_total{client}, spool_client_queue_depth_bytes{client}
    spool_topic_messages_in_total{topic}, spool_topic_bytes_in_total{topic}
    spool_transport_connections{transport}, spool_transport_enabled{transport}
    spool_subscription_seconds_behind{client,sub_id}
    spool_txlog_last_seq, spool_txlog_durable_seq, spool_txlog_bytes, spool_txlog_journals,
    spool_txlog_appended_total, spool_txlog_flushes_total
    spool_fsync_latency_seconds{quantile}            (summary; count = flushes)
    spool_persisted_ack_latency_seconds_bucket{le}   (histogram)
    process_* / python_*                             (prometheus-client's collectors)
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Protocol

from prometheus_client import GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry

from server.stats.histogram import LatencyHistogram
from server.stats.source import MetricsSource


class PrometheusSource(MetricsSource, Protocol):
    """The broker as seen by the collector."""

    @property
    def ready(self) -> bool:
        """Recovery done and transports listening."""
        ...

    @property
    def started_at(self) -> float:
        """Wall-clock start time, epoch seconds."""
        ...


def _le(bound: float) -> str:
    """Bucket bound as the exposition writes it (``+Inf``, shortest round-trip repr)."""
    return "+Inf" if bound == float("inf") else repr(bound)


def _labelled(
    family: GaugeMetricFamily | CounterMetricFamily,
    items: Iterable[tuple[list[str], float]],
) -> GaugeMetricFamily | CounterMetricFamily:
    for labels, value in items:
        family.add_metric(labels, value)
    return family


class SpoolCollector(Collector):
    """Builds the ``spool_*`` families from one snapshot per scrape.

    Args:
        broker: the broker (``server.engine.Broker``).
    """

    def __init__(self, broker: PrometheusSource) -> None:
        self._broker = broker

    def describe(self) -> list[Metric]:
        # Empty on purpose: collect() reads a live broker; registering must not scrape it.
        return []

    def collect(self) -> Iterator[Metric]:
        broker = self._broker
        snap = broker.metrics_snapshot()
        yield GaugeMetricFamily(
            "spool_ready",
            "1 when recovery is done and transports listen",
            value=1.0 if broker.ready else 0.0,
        )
        yield GaugeMetricFamily(
            "spool_start_time_seconds", "Start time, epoch seconds", value=broker.started_at
        )
        for key, what in (
            ("msgs_in", "messages_in"),
            ("msgs_out", "messages_out"),
            ("bytes_in", "bytes_in"),
            ("bytes_out", "bytes_out"),
        ):
            yield CounterMetricFamily(
                f"spool_{what}", f"Total {what.replace('_', ' ')}", value=float(snap.get(key, 0))
            )
        yield GaugeMetricFamily(
            "spool_connections", "Connected clients", value=float(snap.get("connections", 0))
        )
        yield GaugeMetricFamily(
            "spool_subscriptions", "Active subscriptions", value=float(snap.get("subscriptions", 0))
        )
        yield from self._clients(snap.get("clients") or {})
        yield from self._topics(snap.get("topics") or {})
        yield from self._transports(snap.get("transports") or {})
        behind = GaugeMetricFamily(
            "spool_subscription_seconds_behind",
            "How far a bookmark subscription is behind live",
            labels=["client", "sub_id"],
        )
        for sub in snap.get("subscriptions_detail") or ():
            behind.add_metric(
                [str(sub["client"]), str(sub["sub_id"])], float(sub.get("seconds_behind", 0.0))
            )
        yield behind
        txlog = snap.get("txlog")
        if txlog:
            yield from self._txlog(txlog)
        histogram = snap.get("persisted_ack_latency")
        if isinstance(histogram, LatencyHistogram):
            yield self._ack_histogram(histogram)

    @staticmethod
    def _clients(clients: dict[str, Any]) -> Iterator[Metric]:
        for key, name, doc in (
            ("msgs_in", "spool_client_messages_in", "Messages received from the client"),
            ("msgs_out", "spool_client_messages_out", "Messages sent to the client"),
            ("bytes_in", "spool_client_bytes_in", "Bytes received from the client"),
            ("bytes_out", "spool_client_bytes_out", "Bytes sent to the client"),
        ):
            yield _labelled(
                CounterMetricFamily(name, doc, labels=["client"]),
                (([c], float(s.get(key, 0))) for c, s in clients.items()),
            )
        yield _labelled(
            GaugeMetricFamily(
                "spool_client_queue_depth_bytes",
                "Bytes buffered outbound for the client",
                labels=["client"],
            ),
            (([c], float(s.get("queue_depth", 0))) for c, s in clients.items()),
        )

    @staticmethod
    def _topics(topics: dict[str, Any]) -> Iterator[Metric]:
        yield _labelled(
            CounterMetricFamily(
                "spool_topic_messages_in", "Messages published to the topic", labels=["topic"]
            ),
            (([t], float(s.get("msgs_in", 0))) for t, s in topics.items()),
        )
        yield _labelled(
            CounterMetricFamily(
                "spool_topic_bytes_in", "Bytes published to the topic", labels=["topic"]
            ),
            (([t], float(s.get("bytes_in", 0))) for t, s in topics.items()),
        )

    @staticmethod
    def _transports(transports: dict[str, Any]) -> Iterator[Metric]:
        yield _labelled(
            GaugeMetricFamily(
                "spool_transport_connections", "Connections on the transport", labels=["transport"]
            ),
            (([n], float(s.get("connections", 0))) for n, s in transports.items()),
        )
        yield _labelled(
            GaugeMetricFamily(
                "spool_transport_enabled", "1 when the transport accepts", labels=["transport"]
            ),
            (([n], 1.0 if s.get("enabled") else 0.0) for n, s in transports.items()),
        )

    @staticmethod
    def _txlog(txlog: dict[str, Any]) -> Iterator[Metric]:
        for key, doc in (
            ("last_seq", "Last sequence appended to the transaction log"),
            ("durable_seq", "Last sequence fsynced to the transaction log"),
            ("bytes", "Bytes of journal files"),
            ("journals", "Journal files"),
        ):
            if key in txlog:
                yield GaugeMetricFamily(f"spool_txlog_{key}", doc, value=float(txlog[key]))
        for key, doc in (("appended", "Records appended"), ("flushes", "Group-commit fsyncs")):
            if key in txlog:
                yield CounterMetricFamily(f"spool_txlog_{key}", doc, value=float(txlog[key]))
        summary = Metric("spool_fsync_latency_seconds", "Journal fsync latency", "summary")
        for quantile, key in (("0.5", "fsync_p50_ms"), ("0.99", "fsync_p99_ms")):
            if txlog.get(key) is not None:
                summary.add_sample(
                    "spool_fsync_latency_seconds",
                    {"quantile": quantile},
                    float(txlog[key]) / 1000.0,
                )
        if "flushes" in txlog:
            summary.add_sample("spool_fsync_latency_seconds_count", {}, float(txlog["flushes"]))
        if summary.samples:
            yield summary

    @staticmethod
    def _ack_histogram(histogram: LatencyHistogram) -> Metric:
        return HistogramMetricFamily(
            "spool_persisted_ack_latency_seconds",
            "Publish arrival to persisted ack",
            buckets=[(_le(le), float(n)) for le, n in histogram.buckets()],
            sum_value=histogram.sum,
        )


def make_registry(broker: PrometheusSource) -> CollectorRegistry:
    """A fresh registry with the Spool collector and the process/platform/GC collectors."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SpoolCollector(broker))
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry
