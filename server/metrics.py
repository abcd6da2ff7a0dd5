"""What the broker counts, gathered into one typed snapshot.

The counters live where the work happens (the publish pipeline, each connection's traffic,
the topic table, the log, the persisted-ack histogram); :meth:`Metrics.snapshot` reads them
all at one moment, on the loop, without I/O, for the stats sampler, the Prometheus
collector and the dashboard's live feed (server/stats/snapshot.py has the shape).
:class:`AlertRuleGauges` adds the operator's alert rules to ``/metrics``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Final, get_args

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from spool.server.acks import DurableAcks
from spool.server.alertrules import AlertRules
from spool.server.clients import ClientRegistry
from spool.server.clock import Clock
from spool.server.logons import LogonGuard
from spool.server.publishing import PublishPipeline
from spool.server.scryptpool import ScryptPool
from spool.server.session import DisconnectCause
from spool.server.spills import Spills
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
from spool.server.subscription import SessionSubscription
from spool.server.tls.listener import TlsListener
from spool.server.topics import TopicTable
from spool.server.txlog import TransactionLog

#: every cause a connection can end with, so each is counted from zero
DISCONNECT_CAUSES: Final[tuple[str, ...]] = get_args(DisconnectCause)


class Metrics:
    """Reads the counters of an instance's parts.

    Args:
        clients: the connections (their traffic, subscriptions, queue depth).
        topics: the topic table (per-topic counters).
        pipeline: the instance's publish counters.
        txlog: the transaction log, or None.
        acks: the persisted-ack latency histogram.
        transports: the configured transports' names.
        clock: the snapshot's time and the subscriptions' lag.
        replication: the replication links' counters, when the instance replicates.
        logons: logon outcomes and the throttle.
        passwords: the password-check pool.
        tls: the listener's TLS, or None.
        plaintext_exposed: the listener is off loopback without TLS (AllowPlaintext).
        spills: the catch-up reads of live subscriptions (None without a log).
        delayed: delayed delivery's counters (None without a log).
    """

    def __init__(
        self,
        clients: ClientRegistry,
        topics: TopicTable,
        pipeline: PublishPipeline,
        txlog: TransactionLog | None,
        acks: DurableAcks,
        transports: tuple[str, ...],
        clock: Clock,
        logons: LogonGuard,
        passwords: ScryptPool,
        tls: TlsListener | None,
        plaintext_exposed: bool = False,
        spills: Spills | None = None,
        *,
        replication: Callable[[], dict[str, LinkCounters]] | None = None,
        queues: Callable[[], dict[str, QueueCounters]] | None = None,
        event_topics: Callable[[], dict[str, EventTopicCounters]] | None = None,
        delayed: Callable[[], DelayedCounters] | None = None,
    ) -> None:
        self._delayed = delayed
        self._queues = queues
        self._event_topics = event_topics
        self._plaintext_exposed = plaintext_exposed
        self._logons = logons
        self._passwords = passwords
        self._tls = tls
        self._spills = spills
        self._clients = clients
        self._topics = topics
        self._pipeline = pipeline
        self._txlog = txlog
        self._acks = acks
        self._transports = transports
        self._clock = clock
        self._replication = replication

    def seconds_behind(self, sub: SessionSubscription) -> float:
        """How far behind the durable end of the log a bookmark subscription's position is,
        or a live one's while it catches up after a burst (0 when caught up, and for live
        subscriptions on the live path)."""
        progress = sub.progress
        txlog = self._txlog
        reading = sub.bookmark is not None or progress.feed.catching_up
        if not reading or txlog is None or not progress.position_time_us:
            return 0.0
        if progress.position_seq >= txlog.durable_seq:
            return 0.0
        return max(0.0, self._clock.time() - progress.position_time_us / 1e6)

    def snapshot(self) -> MetricsSnapshot:
        """Every counter now (cheap: no I/O, one pass over the connections)."""
        registry = self._clients
        msgs_out = registry.msgs_out_closed
        bytes_out = registry.bytes_out_closed
        clients: dict[str, ClientCounters] = {}
        subs = 0
        detail: list[SubscriptionLag] = []
        for s in registry.sessions:
            t = s.traffic
            msgs_out += t.msgs_out
            bytes_out += t.bytes_out
            subs += len(s.subs)
            if s.name is not None:
                clients[s.name] = {
                    "msgs_in": t.msgs_in,
                    "msgs_out": t.msgs_out,
                    "bytes_in": t.bytes_in,
                    "bytes_out": t.bytes_out,
                    "queue_depth": s.queue_depth,
                }
            for sub in s.subs.values():
                detail.append(
                    {
                        "client": s.name,
                        "sub_id": sub.sub_id,
                        "topic": sub.topic,
                        "state": sub.progress.state,
                        "position_seq": sub.progress.position_seq,
                        "seconds_behind": self.seconds_behind(sub),
                    }
                )
        txlog_counters: TxlogCounters | None = None
        if self._txlog is not None:
            st = self._txlog.stats()
            txlog_counters = {
                "last_seq": self._txlog.last_seq,
                "durable_seq": self._txlog.durable_seq,
                "bytes": st.get("disk_bytes", 0),
                "journals": st.get("journals", 0),
                "appended": st.get("appended", 0),
                "flushes": st.get("flushes", 0),
                "fsync_p50_ms": st.get("fsync_p50_ms", 0.0),
                "fsync_p99_ms": st.get("fsync_p99_ms", 0.0),
                "refusing_writes": self._txlog.write_outage is not None,
                "write_outages": st.get("write_outages", 0.0),
                "write_retries": st.get("write_retries", 0.0),
                "preallocation_shortfall": self._txlog.preallocation_shortfall is not None,
                "damaged_ranges": st.get("damaged_ranges", 0.0),
                "fenced_ranges": st.get("fenced_ranges", 0.0),
                "fenced_records": st.get("fenced_records", 0.0),
                "scrub_bytes": st.get("scrub_bytes", 0.0),
                "scrub_passes": st.get("scrub_passes", 0.0),
            }
        topics: dict[str, TopicCounters] = {
            t.name: {"msgs_in": t.msgs_in, "bytes_in": t.bytes_in} for t in self._topics
        }
        transports: dict[str, TransportCounters] = {
            name: {
                "connections": registry.transport_connections(name),
                "enabled": registry.transport_enabled(name),
            }
            for name in self._transports
        }
        return {
            "time": self._clock.time(),
            "msgs_in": self._pipeline.msgs_in,
            "msgs_out": msgs_out,
            "bytes_in": self._pipeline.bytes_in,
            "bytes_out": bytes_out,
            "connections": len(registry.sessions),
            "subscriptions": subs,
            "clients": clients,
            "topics": topics,
            "subscriptions_detail": detail,
            "txlog": txlog_counters,
            "persisted_ack_latency": self._acks.latency,
            "transports": transports,
            "replication": self._replication() if self._replication is not None else {},
            "security": self.security(),
            "spills": self._spill_counters(),
            "queues": self._queues() if self._queues is not None else {},
            "event_topics": self._event_topics() if self._event_topics is not None else {},
            "delayed": self._delayed() if self._delayed is not None else None,
            "disconnects": {
                cause: registry.disconnects.get(cause, 0) for cause in DISCONNECT_CAUSES
            },
        }

    def _spill_counters(self) -> SpillCounters:
        spills = self._spills
        if spills is None:
            return {"catching_up": 0, "spills": 0, "rejoins": 0, "seconds": 0.0}
        return {
            "catching_up": spills.catching_up,
            "spills": spills.spills,
            "rejoins": spills.rejoins,
            "seconds": spills.seconds(),
        }

    def security(self) -> SecurityCounters:
        """Logon outcomes, password checks and the TLS certificate's expiry."""
        logons = self._logons.counters()
        pool = self._passwords
        tls = self._tls
        return {
            "logon_succeeded": logons["succeeded"],
            "logon_failures": logons["failures"],
            "logon_refused": logons["refused"],
            "blocked_addresses": logons["blocked_addresses"],
            "blocked_users": logons["blocked_users"],
            "password_checks": pool.checks,
            "password_check_seconds": pool.busy_seconds,
            "password_checks_pending": pool.pending,
            "tls_enabled": tls is not None,
            "tls_not_after": tls.certificate.not_after if tls is not None else None,
            "tls_reloads": tls.reloads if tls is not None else 0,
            "plaintext_exposed": self._plaintext_exposed,
        }


class AlertRuleGauges(Collector):
    """``spool_alert_firing{rule}`` (1 while the rule fires) and ``spool_alert_value{rule}``
    (its last value, in the unit of its threshold; absent before one could be read).

    Args:
        rules: the instance's alert rules (server/alertrules.py).
    """

    def __init__(self, rules: AlertRules) -> None:
        self._rules = rules

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        firing = GaugeMetricFamily(
            "spool_alert_firing", "1 while the alert rule fires", labels=["rule"]
        )
        value = GaugeMetricFamily(
            "spool_alert_value", "The alert rule's last value (its threshold's unit)",
            labels=["rule"],
        )  # fmt: skip
        for name, fires, last in self._rules.gauges():
            firing.add_metric([name], 1.0 if fires else 0.0)
            if last is not None:
                value.add_metric([name], last)
        yield firing
        yield value
