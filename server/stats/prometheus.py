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
    spool_subscriptions_catching_up, spool_spills_total, spool_catch_ups_total,
    spool_catch_up_seconds_total                     (live subscriptions after a burst)
    spool_disconnects_total{cause}
    spool_txlog_last_seq, spool_txlog_durable_seq, spool_txlog_bytes, spool_txlog_journals,
    spool_txlog_appended_total, spool_txlog_flushes_total
    spool_fsync_latency_seconds{quantile}            (summary; count = flushes)
    spool_persisted_ack_latency_seconds_bucket{le}   (histogram)
    spool_replication_{messages,bytes}_total{link,direction}  (sent out / received in)
    spool_replication_{connected,acked_position,messages_behind,seconds_behind}{link,direction}
    spool_replication_sync{link}, spool_replication_disconnects_total{link}  (destinations)
    spool_logon_{succeeded,failures,refused}_total{path}, spool_logon_blocked{kind}
    spool_password_checks_total, spool_password_check_seconds_total,
    spool_password_checks_pending
    spool_tls_enabled, spool_tls_certificate_not_after_seconds,
    spool_tls_certificate_reloads_total, spool_plaintext_listener
    spool_delayed_pending, spool_delayed_delivered_total  (delayed delivery; with a log)
    spool_alert_firing{rule}, spool_alert_value{rule}  (alert rules: server/metrics.py)
    process_* / python_*                             (prometheus-client's collectors)
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Literal, Protocol

from prometheus_client import GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry

from spool.server.stats.histogram import LatencyHistogram
from spool.server.stats.series import QueueGauge
from spool.server.stats.snapshot import (
    ClientCounters,
    DelayedCounters,
    EventTopicCounters,
    LinkCounters,
    QueueCounters,
    SecurityCounters,
    SpillCounters,
    TopicCounters,
    TransportCounters,
    TxlogCounters,
)
from spool.server.stats.source import MetricsSource


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


_ClientCounter = Literal["msgs_in", "msgs_out", "bytes_in", "bytes_out"]


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
        broker: what is scraped (``spool.server.operations.Operations``).
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
        for count, what in (
            (snap["msgs_in"], "messages_in"),
            (snap["msgs_out"], "messages_out"),
            (snap["bytes_in"], "bytes_in"),
            (snap["bytes_out"], "bytes_out"),
        ):
            yield CounterMetricFamily(
                f"spool_{what}", f"Total {what.replace('_', ' ')}", value=float(count)
            )
        yield GaugeMetricFamily(
            "spool_connections", "Connected clients", value=float(snap["connections"])
        )
        yield GaugeMetricFamily(
            "spool_subscriptions", "Active subscriptions", value=float(snap["subscriptions"])
        )
        yield from self._clients(snap["clients"])
        yield from self._topics(snap["topics"])
        yield from self._transports(snap["transports"])
        behind = GaugeMetricFamily(
            "spool_subscription_seconds_behind",
            "How far a bookmark subscription is behind live",
            labels=["client", "sub_id"],
        )
        for sub in snap["subscriptions_detail"]:
            behind.add_metric([str(sub["client"]), sub["sub_id"]], float(sub["seconds_behind"]))
        yield behind
        yield from self._spills(snap["spills"])
        yield _labelled(
            CounterMetricFamily(
                "spool_disconnects", "Connections ended, by cause", labels=["cause"]
            ),
            (([cause], float(n)) for cause, n in snap["disconnects"].items()),
        )
        txlog = snap["txlog"]
        if txlog is not None:
            yield from self._txlog(txlog)
        yield self._ack_histogram(snap["persisted_ack_latency"])
        yield from self._replication(snap["replication"])
        yield from self._queues(snap["queues"])
        yield from self._event_topics(snap["event_topics"])
        delayed = snap["delayed"]
        if delayed is not None:
            yield from self._delayed(delayed)
        yield from self._security(snap["security"])

    @staticmethod
    def _security(sec: SecurityCounters) -> Iterator[Metric]:
        for per_path, name, doc in (
            (sec["logon_succeeded"], "spool_logon_succeeded", "Logons that succeeded"),
            (sec["logon_failures"], "spool_logon_failures", "Logons checked and refused"),
            (
                sec["logon_refused"],
                "spool_logon_refused",
                "Logons refused unchecked (throttle, full password-check pool)",
            ),
        ):
            yield _labelled(
                CounterMetricFamily(name, doc, labels=["path"]),
                (([path], float(n)) for path, n in per_path.items()),
            )
        yield _labelled(
            GaugeMetricFamily(
                "spool_logon_blocked",
                "Addresses and user names whose logons are refused now",
                labels=["kind"],
            ),
            (
                (["address"], float(sec["blocked_addresses"])),
                (["user"], float(sec["blocked_users"])),
            ),
        )
        yield CounterMetricFamily(
            "spool_password_checks",
            "Password checks (scrypt) run",
            value=float(sec["password_checks"]),
        )
        yield CounterMetricFamily(
            "spool_password_check_seconds",
            "Thread time spent checking passwords",
            value=sec["password_check_seconds"],
        )
        yield GaugeMetricFamily(
            "spool_password_checks_pending",
            "Password checks queued or running",
            value=float(sec["password_checks_pending"]),
        )
        yield GaugeMetricFamily(
            "spool_tls_enabled", "1 when the listener serves TLS", value=float(sec["tls_enabled"])
        )
        yield GaugeMetricFamily(
            "spool_plaintext_listener",
            "1 when the listener is reachable from other machines without TLS (AllowPlaintext)",
            value=float(sec["plaintext_exposed"]),
        )
        if sec["tls_not_after"] is not None:
            yield GaugeMetricFamily(
                "spool_tls_certificate_not_after_seconds",
                "When the served certificate expires, epoch seconds",
                value=sec["tls_not_after"],
            )
            yield CounterMetricFamily(
                "spool_tls_certificate_reloads",
                "Certificate reloads (SIGHUP, admin action)",
                value=float(sec["tls_reloads"]),
            )

    @staticmethod
    def _clients(clients: dict[str, ClientCounters]) -> Iterator[Metric]:
        counters: tuple[tuple[str, str, _ClientCounter], ...] = (
            ("spool_client_messages_in", "Messages received from the client", "msgs_in"),
            ("spool_client_messages_out", "Messages sent to the client", "msgs_out"),
            ("spool_client_bytes_in", "Bytes received from the client", "bytes_in"),
            ("spool_client_bytes_out", "Bytes sent to the client", "bytes_out"),
        )
        for name, doc, key in counters:
            yield _labelled(
                CounterMetricFamily(name, doc, labels=["client"]),
                (([c], float(s[key])) for c, s in clients.items()),
            )
        yield _labelled(
            GaugeMetricFamily(
                "spool_client_queue_depth_bytes",
                "Bytes buffered outbound for the client",
                labels=["client"],
            ),
            (([c], float(s["queue_depth"])) for c, s in clients.items()),
        )

    @staticmethod
    def _topics(topics: dict[str, TopicCounters]) -> Iterator[Metric]:
        yield _labelled(
            CounterMetricFamily(
                "spool_topic_messages_in", "Messages published to the topic", labels=["topic"]
            ),
            (([t], float(s["msgs_in"])) for t, s in topics.items()),
        )
        yield _labelled(
            CounterMetricFamily(
                "spool_topic_bytes_in", "Bytes published to the topic", labels=["topic"]
            ),
            (([t], float(s["bytes_in"])) for t, s in topics.items()),
        )

    @staticmethod
    def _transports(transports: dict[str, TransportCounters]) -> Iterator[Metric]:
        yield _labelled(
            GaugeMetricFamily(
                "spool_transport_connections", "Connections on the transport", labels=["transport"]
            ),
            (([n], float(s["connections"])) for n, s in transports.items()),
        )
        yield _labelled(
            GaugeMetricFamily(
                "spool_transport_enabled", "1 when the transport accepts", labels=["transport"]
            ),
            (([n], 1.0 if s["enabled"] else 0.0) for n, s in transports.items()),
        )

    @staticmethod
    def _queues(queues: dict[str, QueueCounters]) -> Iterator[Metric]:
        if not queues:
            return
        gauges: tuple[tuple[QueueGauge, str, str], ...] = (
            ("depth", "spool_queue_depth", "Messages in the queue"),
            ("backlog", "spool_queue_backlog", "Messages waiting for a consumer"),
            ("held", "spool_queue_held",
             "Messages held back until records this instance lacks come back"),
            ("leased", "spool_queue_leased", "Messages delivered and not acked yet"),
            ("consumers", "spool_queue_consumers", "Queue subscriptions"),
            ("oldest_lease_age", "spool_queue_oldest_lease_age_seconds",
             "Age of the oldest current lease"),
            ("oldest_message_age", "spool_queue_oldest_message_age_seconds",
             "Age of the oldest message in the queue"),
            ("oldest_undelivered_age", "spool_queue_oldest_undelivered_age_seconds",
             "Age of the oldest message waiting for a consumer (not leased)"),
            ("stuck", "spool_queue_stuck",
             "1 while the oldest waiting message is older than StuckMessageAge and "
             "consumers have room"),
            ("inactive", "spool_queue_inactive",
             "Messages beyond TargetQueueDepth, waiting in the transaction log"),
            ("deferred_acks", "spool_queue_deferred_acks",
             "Acks of inactive messages, applied when they are reached"),
        )  # fmt: skip
        for key, metric, doc in gauges:
            yield _labelled(
                GaugeMetricFamily(metric, doc, labels=["queue"]),
                (([q], float(c[key])) for q, c in queues.items()),
            )
        yield _labelled(
            CounterMetricFamily("spool_queue_enqueued", "Messages that entered the queue",
                                labels=["queue"]),
            (([q], float(c["enqueued"])) for q, c in queues.items()),
        )  # fmt: skip
        yield _labelled(
            CounterMetricFamily("spool_queue_removed", "Messages that left the queue, by reason",
                                labels=["queue", "reason"]),
            (([q, r], float(n)) for q, c in queues.items() for r, n in c["removed"].items()),
        )  # fmt: skip
        yield _labelled(
            CounterMetricFamily("spool_queue_dead_lettered",
                                "Messages the queue published to its dead-letter topic",
                                labels=["queue"]),
            (([q], float(c["dead_lettered"])) for q, c in queues.items()),
        )  # fmt: skip

    @staticmethod
    def _event_topics(topics: dict[str, EventTopicCounters]) -> Iterator[Metric]:
        if not topics:
            return
        counters: tuple[tuple[Literal["published", "dropped", "refused"], str, str], ...] = (
            ("published", "spool_event_topic_messages",
             "Messages the broker published to an event topic"),
            ("dropped", "spool_event_topic_dropped",
             "Happenings over MaxEventsPerSecond, not published to their event topic"),
            ("refused", "spool_event_topic_refused",
             "Event topic messages the publish path refused"),
        )  # fmt: skip
        for key, metric, doc in counters:
            yield _labelled(
                CounterMetricFamily(metric, doc, labels=["topic"]),
                (([t], float(c[key])) for t, c in topics.items()),
            )

    @staticmethod
    def _delayed(delayed: DelayedCounters) -> Iterator[Metric]:
        # no per-topic family: a topic label per delayed topic is unbounded cardinality
        # (GET /api/delayed has the counts per topic)
        yield GaugeMetricFamily(
            "spool_delayed_pending",
            "Delayed messages stored and not delivered yet",
            value=float(delayed["pending"]),
        )
        yield CounterMetricFamily(
            "spool_delayed_delivered",
            "Delayed messages delivered at their due time",
            value=float(delayed["delivered"]),
        )

    @staticmethod
    def _spills(spills: SpillCounters) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "spool_subscriptions_catching_up",
            "Live subscriptions reading the transaction log after a burst",
            value=float(spills["catching_up"]),
        )
        yield CounterMetricFamily(
            "spool_spills",
            "Times a live subscription left the live path to catch up from the log",
            value=float(spills["spills"]),
        )
        yield CounterMetricFamily(
            "spool_catch_ups",
            "Catch-ups that ended back on the live path",
            value=float(spills["rejoins"]),
        )
        yield CounterMetricFamily(
            "spool_catch_up_seconds",
            "Time live subscriptions spent catching up from the log",
            value=float(spills["seconds"]),
        )

    @staticmethod
    def _txlog(txlog: TxlogCounters) -> Iterator[Metric]:
        for key, doc, gauge in (
            ("last_seq", "Last sequence appended to the transaction log", txlog["last_seq"]),
            ("durable_seq", "Last sequence fsynced to the transaction log", txlog["durable_seq"]),
            ("bytes", "Bytes of journal files", txlog["bytes"]),
            ("journals", "Journal files", txlog["journals"]),
            (
                "refusing_writes",
                "1 while a write outage lasts: publishes refused, the write retried",
                txlog["refusing_writes"],
            ),
            (
                "preallocation_shortfall",
                "1 while fewer preallocated journal files than configured are ready",
                txlog["preallocation_shortfall"],
            ),
            (
                "damaged_ranges",
                "Damaged ranges of journals found and not fenced yet",
                txlog["damaged_ranges"],
            ),
            (
                "fenced_ranges",
                "Fenced ranges: damaged or missing records held in place until repaired",
                txlog["fenced_ranges"],
            ),
            ("fenced_records", "Local seqs the fenced ranges hold", txlog["fenced_records"]),
        ):
            yield GaugeMetricFamily(f"spool_txlog_{key}", doc, value=float(gauge))
        for key, doc, count in (
            ("appended", "Records appended", txlog["appended"]),
            ("flushes", "Group-commit fsyncs", txlog["flushes"]),
            (
                "write_outages",
                "Write outages begun (a journal write or fsync failed)",
                txlog["write_outages"],
            ),
            ("write_retries", "Writes retried during write outages", txlog["write_retries"]),
            (
                "scrub_bytes",
                "Journal bytes read back and checked by the scrub",
                txlog["scrub_bytes"],
            ),
            ("scrub_passes", "Scrubs of every journal completed", txlog["scrub_passes"]),
        ):
            yield CounterMetricFamily(f"spool_txlog_{key}", doc, value=float(count))
        summary = Metric("spool_fsync_latency_seconds", "Journal fsync latency", "summary")
        for quantile, ms in (("0.5", txlog["fsync_p50_ms"]), ("0.99", txlog["fsync_p99_ms"])):
            summary.add_sample(
                "spool_fsync_latency_seconds", {"quantile": quantile}, float(ms) / 1000.0
            )
        summary.add_sample("spool_fsync_latency_seconds_count", {}, float(txlog["flushes"]))
        yield summary

    @staticmethod
    def _replication(links: dict[str, LinkCounters]) -> Iterator[Metric]:
        rows = [(key.partition("/"), link) for key, link in links.items()]
        both = ["link", "direction"]
        for family, name, doc, key in (
            (CounterMetricFamily, "spool_replication_messages",
             "Records sent to a destination (out) or received from a source (in)", "msgs"),
            (CounterMetricFamily, "spool_replication_bytes", "Bytes of those records", "bytes"),
            (GaugeMetricFamily, "spool_replication_acked_position",
             "Local seq a destination acknowledged (out) / seq acked to a source (in)", "acked"),
            (GaugeMetricFamily, "spool_replication_messages_behind",
             "Records not acknowledged yet", "messages_behind"),
            (GaugeMetricFamily, "spool_replication_seconds_behind",
             "Age of the oldest record not acknowledged", "seconds_behind"),
        ):  # fmt: skip
            yield _labelled(
                family(name, doc, labels=both),
                (([n, d], float(link[key])) for (d, _, n), link in rows),  # type: ignore[literal-required]
            )
        yield _labelled(
            GaugeMetricFamily("spool_replication_connected", "1 while the link is up", labels=both),
            (([n, d], 1.0 if link["connected"] else 0.0) for (d, _, n), link in rows),
        )
        outs = [(n, link) for (d, _, n), link in rows if d == "out"]
        yield _labelled(
            GaugeMetricFamily(
                "spool_replication_sync",
                "1 when persisted acks wait for the destination (effective sync type)",
                labels=["link"],
            ),
            (([n], 1.0 if link["sync"] else 0.0) for n, link in outs),
        )
        yield _labelled(
            CounterMetricFamily(
                "spool_replication_disconnects", "Streaming links that ended", labels=["link"]
            ),
            (([n], float(link["disconnects"])) for n, link in outs),
        )

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
