"""The admin surface of an instance: the reads and actions REST and the actions share.

``web/admin.py`` is a thin HTTP layer over :class:`Operations`; the scheduled and on-demand
actions (server/actions) call the same methods, never the web layer. Reads copy broker
state on the loop; actions that touch files (journals, the stats database, file-system
usage) do their I/O in threads. Results are the JSON shapes of docs/admin-api.md, typed.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal, TypedDict

from spool.server import __version__, speedups
from spool.server.acks import DurableAcks
from spool.server.alertrules import AlertRules, RuleInfo
from spool.server.alerts import Alert, txlog_alerts
from spool.server.auth import UserAuthenticator
from spool.server.brokerpublish import BrokerPublisher, DerivedOutcome, Published
from spool.server.clients import ClientRegistry
from spool.server.clock import Clock
from spool.server.config import STATS_SOW, Config, UserConfig
from spool.server.config.model import REDRIVE_MAX, QueueConfig
from spool.server.delayed.service import DelayedDelivery, PendingMessage
from spool.server.engine_errors import (
    ClientNotFound,
    DelayedNotConfigured,
    NoTransactionLog,
    PinNotFound,
    PublishRefused,
    StatsUnavailable,
    TlsNotConfigured,
)
from spool.server.eventlog import EventLog
from spool.server.eventtopics import EventTopics
from spool.server.expr import compile_filter
from spool.server.lifecycle import Lifecycle
from spool.server.logons import LogonGuard
from spool.server.metrics import Metrics
from spool.server.queues.errors import QueueNotEntitled, QueueNotFound
from spool.server.queues.redrive import PREVIEW, Redriver, RedriveRefused, letter_dict
from spool.server.queues.redrive import select as select_letters
from spool.server.queues.service import QueueService
from spool.server.replication.bootstrap import Bootstrapper, BootstrapProgress
from spool.server.replication.errors import ReplicationNotConfigured
from spool.server.replication.fabric import FabricGraph, fabric_graph, fabric_route
from spool.server.replication.repair import Repairer
from spool.server.replication.service import Replication, ReplicationInfo
from spool.server.replication.topology import RouteTrace
from spool.server.session import Session
from spool.server.sow import SowCompaction, SowKeys, SowService, SowTopicInfo
from spool.server.sow.memory import MemoryStore
from spool.server.stats.actionruns import ActionRunRow, StoredRun
from spool.server.stats.host import FilesystemUsage, filesystem_usage
from spool.server.stats.sampler import Sampler
from spool.server.stats.snapshot import MetricsSnapshot
from spool.server.stats.timeparse import format_time
from spool.server.subscriptions import SubscriptionService
from spool.server.tls.certificate import CertificateDict
from spool.server.tls.listener import TlsListener, TlsStatus
from spool.server.txlog import TransactionLog
from spool.server.txlog.append.outage import WriteOutageDict
from spool.server.txlog.append.space import ShortfallDict
from spool.server.txlog.errors import JournalNotFound
from spool.server.txlog.retention.pins import Pin, PinInfo
from spool.server.txlog.storage.files import Compression
from spool.server.txlog.storage.journal import JournalInfo

JournalAction = Literal["archive", "compress", "remove"]
JOURNAL_ACTIONS: tuple[JournalAction, ...] = ("archive", "compress", "remove")


class InstanceInfo(TypedDict):
    name: str
    group: str
    version: str
    pid: int
    uptime: float
    config_path: str | None
    data_dir: str
    start_time: str
    ready: bool
    alerts: list[Alert]
    extensions: speedups.Status


class ClientInfo(TypedDict):
    name: str | None
    user: str | None
    remote_addr: str
    connected_since: str
    msgs_in: int
    msgs_out: int
    bytes_in: int
    bytes_out: int
    queue_depth: int
    last_persisted_seq: int
    subscriptions: int
    version: str
    tls: str | None
    certificate: str | None
    origin: str | None


class SubscriptionInfo(TypedDict):
    client: str | None
    sub_id: str
    topic: str
    filter: str | None
    bookmark_kind: str
    bookmark: str | None
    options: str
    state: str
    position: str
    position_seq: int
    delivered: int
    seconds_behind: float


class TransportInfo(TypedDict):
    name: str
    type: str
    address: str
    enabled: bool
    connections: int
    tls: bool


class LogonPolicyInfo(TypedDict):
    failures_per_address_user: int
    failures_per_address: int
    failures_per_user: int
    window_s: float
    password_check_threads: int


class LogonsReport(TypedDict):
    """``GET /api/logons``: outcomes per path, the throttle now, the password pool."""

    policy: LogonPolicyInfo
    succeeded: dict[str, int]
    failures: dict[str, int]
    refused: dict[str, int]
    blocked_addresses: int
    blocked_users: int
    password_checks: int
    password_checks_pending: int
    recent_failures: list[dict[str, object]]


class ListenerInfo(TypedDict):
    """``GET /api/tls``: the listener's security, with or without TLS."""

    address: str
    tls: TlsStatus | None
    plaintext: bool
    plaintext_exposed: bool
    allow_plaintext: bool


class JournalDict(TypedDict):
    id: int
    path: str
    state: str
    size: int
    data_bytes: int
    compression: str | None
    records: int
    first_seq: int
    last_seq: int
    first_bookmark: str | None
    last_bookmark: str | None
    first_time: str | None
    last_time: str | None
    pinned_by: str | None


class TxlogTotals(TypedDict):
    files: int
    bytes: int
    first_seq: int
    last_seq: int
    durable_seq: int


class FlushLatency(TypedDict):
    p50: float
    p99: float


class PinDict(TypedDict):
    owner: str
    seq: int
    admin: bool


class PinTaken(TypedDict):
    owner: str
    seq: int
    first_seq: int
    durable_seq: int


class DelayedTopic(TypedDict):
    topic: str
    pending: int


class DelayedSummary(TypedDict):
    pending: int
    next_due: str | None
    next_due_us: int | None
    delivered: int
    waiting: bool
    topics: list[DelayedTopic]


class DelayedMessage(TypedDict):
    due: str
    due_us: int
    seq: int
    topic: str
    bookmark: str


class DelayedPage(TypedDict):
    messages: list[DelayedMessage]
    next_after: str | None


class TransactionLogInfo(TypedDict):
    journals: list[JournalDict]
    totals: TxlogTotals
    flush_latency_ms: FlushLatency
    stats: dict[str, float]
    write_outage: WriteOutageDict | None
    preallocation: ShortfallDict | None
    damage: list[dict[str, object]]
    fences: list[dict[str, object]]
    scrub: dict[str, object]
    repair: dict[str, object] | None


class Operations:
    """Reads and actions over an instance's parts (no HTTP here).

    Attributes:
        config, clock, events, auth, lifecycle: the instance's own.
        sampler: the statistics sampler (set by the engine once started; None before).
    """

    def __init__(
        self,
        config: Config,
        clock: Clock,
        events: EventLog,
        auth: UserAuthenticator,
        lifecycle: Lifecycle,
        clients: ClientRegistry,
        subscriptions: SubscriptionService,
        metrics: Metrics,
        acks: DurableAcks,
        txlog: TransactionLog | None,
        tls: TlsListener | None = None,
        logons: LogonGuard | None = None,
        publisher: BrokerPublisher | None = None,
        replication: Replication | None = None,
        *,
        sow: SowService,
        queues: QueueService | None = None,
        event_topics: EventTopics | None = None,
        delayed: DelayedDelivery | None = None,
    ) -> None:
        self._publisher = publisher
        self._delayed = delayed
        self._event_topics = event_topics
        self._tls = tls
        self._logons = logons
        self.config = config
        self.clock = clock
        self.events = events
        self.auth = auth
        self.lifecycle = lifecycle
        self._clients = clients
        self._subscriptions = subscriptions
        self._metrics = metrics
        self._acks = acks
        self._txlog = txlog
        self._replication = replication
        self._sow = sow
        self._queues = queues
        #: the queues' redrives (made at the first one)
        self._redriver: Redriver | None = None
        self.sampler: Sampler | None = None
        #: the instance's bootstrap (``<Bootstrap>``), set by the engine
        self.bootstrap: Bootstrapper | None = None
        #: the repair of fenced records from the destinations (None: no destination)
        self.repairer: Repairer | None = None
        #: the operator's alert rules (``Admin/Alerts``), set by the engine
        self.alert_rules: AlertRules | None = None
        #: retention pins taken over the admin API (a Spark stream's), by owner
        self._admin_pins: dict[str, Pin] = {}

    # -- the instance -------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        return self.lifecycle.ready

    @property
    def stopping(self) -> bool:
        return self.lifecycle.stopping

    @property
    def started_at(self) -> float:
        return self.lifecycle.started_at

    def event_topics(self) -> list[dict[str, object]]:
        """``GET /api/event_topics``: each event topic that is on, with whether the log
        records it, its counters and its budget."""
        topics = self._event_topics
        if topics is None:
            return []
        cfg = self.config.event_topics
        tl = self.config.transaction_log
        counters = topics.counters()
        return [
            {
                "topic": name, "recorded": tl is not None and tl.records(name),
                **counters[name], "max_events_per_second": cfg.max_events_per_second,
                "interval": cfg.sow_stats_interval if name == STATS_SOW else None,
            }
            for name in sorted(topics.topics)
        ]  # fmt: skip

    def metrics_snapshot(self) -> MetricsSnapshot:
        """Every counter now (server/stats/snapshot.py)."""
        return self._metrics.snapshot()

    def instance_info(self) -> InstanceInfo:
        cfg = self.config
        started = self.lifecycle.started_at
        return {
            "name": cfg.name,
            "group": cfg.group,
            "version": __version__,
            "pid": os.getpid(),
            "uptime": round(self.clock.time() - started, 3),
            "config_path": str(cfg.source_path) if cfg.source_path else None,
            "data_dir": str(cfg.data_directory),
            "start_time": _iso(started),
            "ready": self.lifecycle.ready,
            "alerts": self.alerts(),
            "extensions": speedups.status(),
        }

    def alerts(self) -> list[Alert]:
        """What every dashboard page shows in a banner now (server/alerts.py)."""
        boot = self.bootstrap
        booting = boot.progress.alerts() if boot is not None else []
        stuck = self._queues.alerts() if self._queues is not None else []
        repl = self._replication
        conflicts = repl.alerts() if repl is not None else []
        repairing = self.repairer.alerts() if self.repairer is not None else []
        rules = self.alert_rules.alerts() if self.alert_rules is not None else []
        return booting + txlog_alerts(self._txlog) + repairing + stuck + conflicts + rules

    def alert_rules_info(self) -> list[RuleInfo]:
        """The operator's alert rules and their states (``GET /api/alerts/rules``)."""
        return self.alert_rules.info() if self.alert_rules is not None else []

    def health(self) -> dict[str, object]:
        """``GET /healthz``: ``ok``, or ``degraded`` with the reasons (the ids and titles
        of the alerts of the error level: a stuck queue, a log refusing writes...). The
        process serves either way (a liveness probe: restarting would not help)."""
        errors = [a for a in self.alerts() if a["level"] == "error"]
        if not errors:
            return {"status": "ok"}
        return {
            "status": "degraded",
            "reasons": [{"id": a["id"], "title": a["title"]} for a in errors],
        }

    def fabric_info(self) -> FabricGraph:
        """The replication graph this instance sees (``GET /api/fabric``)."""
        repl = self._replication
        return fabric_graph(self.config, repl.info() if repl is not None else None)

    def fabric_route(self, topic: str) -> RouteTrace:
        """Where a message of ``topic`` published here goes (``GET /api/fabric/route``)."""
        return fabric_route(self.config, self._replication, topic)

    def first_hops(self, topic: str) -> list[str]:
        """The instances a message of ``topic`` published here goes to directly (the
        one-hop instances of :meth:`fabric_route`, from this instance's links alone)."""
        replication = self._replication
        return replication.first_hops(topic) if replication is not None else []

    def bootstrap_info(self) -> dict[str, object]:
        """The bootstrap's progress (``GET /api/bootstrap``; docs/bootstrap.md)."""
        boot = self.bootstrap
        if boot is None:
            return BootstrapProgress().to_dict()
        return boot.progress.to_dict()

    # -- clients ------------------------------------------------------------------------

    def _client_info(self, s: Session) -> ClientInfo:
        t = s.traffic
        return {
            "name": s.name,
            "user": s.user_name,
            "remote_addr": s.remote,
            "connected_since": _iso(s.connected_at),
            "msgs_in": t.msgs_in,
            "msgs_out": t.msgs_out,
            "bytes_in": t.bytes_in,
            "bytes_out": t.bytes_out,
            "queue_depth": s.queue_depth,
            "last_persisted_seq": self._acks.last_persisted(s),
            "subscriptions": len(s.subs),
            "version": s.version,
            "tls": s.peer.tls_version,
            "certificate": s.peer.client_subject,
            "origin": s.web_origin,
        }

    def clients_info(self) -> list[ClientInfo]:
        return [self._client_info(s) for s in self._clients.logged_on()]

    def client_info(self, name: str) -> ClientInfo | None:
        s = self._clients.by_name.get(name)
        return self._client_info(s) if s is not None else None

    async def disconnect_client(self, name: str, reason: str = "disconnected by admin") -> bool:
        s = self._clients.by_name.get(name)
        if s is None:
            return False
        await s.close(reason, cause="admin")
        return True

    # -- subscriptions ------------------------------------------------------------------

    def subscriptions_info(self) -> list[SubscriptionInfo]:
        out: list[SubscriptionInfo] = []
        for s in self._clients.sessions:
            for sub in s.subs.values():
                p = sub.progress
                out.append(
                    {
                        "client": s.name,
                        "sub_id": sub.sub_id,
                        "topic": sub.topic,
                        "filter": sub.filter_text,
                        "bookmark_kind": sub.bookmark_kind,
                        "bookmark": sub.bookmark,
                        "options": sub.options.raw,
                        "state": p.state,
                        "position": p.position,
                        "position_seq": p.position_seq,
                        "delivered": p.delivered,
                        "seconds_behind": round(self._metrics.seconds_behind(sub), 3),
                    }
                )
        return out

    def _session(self, client: str) -> Session:
        s = self._clients.by_name.get(client)
        if s is None:
            raise ClientNotFound(client)
        return s

    def pause_subscription(self, client: str, sub_id: str) -> None:
        """Pause a bookmark subscription of a client (``live`` ones are refused)."""
        self._subscriptions.pause(self._session(client), [sub_id])

    def resume_subscriptions(self, client: str, sub_ids: list[str]) -> None:
        """Resume bookmark subscriptions of a client; several resume together."""
        self._subscriptions.resume(self._session(client), sub_ids)

    # -- transports ---------------------------------------------------------------------

    def transports_info(self) -> list[TransportInfo]:
        return [
            {
                "name": t.name,
                "type": t.type,
                "address": t.address,
                "enabled": self._clients.transport_enabled(t.name),
                "connections": self._clients.transport_connections(t.name),
                "tls": self._tls is not None,
            }
            for t in self.config.transports
        ]

    def set_transport_enabled(self, name: str, enabled: bool) -> None:
        self._clients.set_transport_enabled(name, enabled)

    # -- security -----------------------------------------------------------------------

    def listener_info(self) -> ListenerInfo:
        """The listener's TLS (certificate, expiry, client certificates) or plain text."""
        cfg = self.config
        return {
            "address": cfg.admin.address,
            "tls": self._tls.status() if self._tls is not None else None,
            "plaintext": self._tls is None,
            "plaintext_exposed": cfg.plaintext_exposed,
            "allow_plaintext": cfg.allow_plaintext,
        }

    async def reload_tls(self, actor: str) -> CertificateDict:
        """Load the certificate pair again (SIGHUP and ``POST /api/tls/reload``): new
        handshakes use it, established connections keep theirs.

        Raises:
            TlsNotConfigured: the listener has no TLS.
            TlsError: the files cannot be used; the old pair keeps serving.
        """
        if self._tls is None:
            raise TlsNotConfigured("TLS is not configured on this instance")
        cert = await self._tls.reload(actor)
        return cert.as_dict()

    def logon_info(self) -> LogonsReport:
        """Logon outcomes, who is throttled now, and the password-check pool."""
        tuning = self.config.tuning
        snap = self._metrics.security()
        failures = [
            e
            for e in self.events.recent(500)
            if (e.get("category"), e.get("event"))
            in (("session", "auth_failure"), ("admin", "login_failed"), ("auth", "logon_throttled"))
        ][-20:]
        return {
            "policy": {
                "failures_per_address_user": tuning.logon_failures_per_address_user,
                "failures_per_address": tuning.logon_failures_per_address,
                "failures_per_user": tuning.logon_failures_per_user,
                "window_s": tuning.logon_failure_window,
                "password_check_threads": tuning.password_check_threads,
            },
            "succeeded": snap["logon_succeeded"],
            "failures": snap["logon_failures"],
            "refused": snap["logon_refused"],
            "blocked_addresses": snap["blocked_addresses"],
            "blocked_users": snap["blocked_users"],
            "password_checks": snap["password_checks"],
            "password_checks_pending": snap["password_checks_pending"],
            "recent_failures": failures,
        }

    # -- the transaction log ------------------------------------------------------------

    def transaction_log_info(self) -> TransactionLogInfo | None:
        txlog = self._txlog
        if txlog is None:
            return None
        journals = [journal_dict(j) for j in txlog.journals()]
        st = txlog.stats()
        return {
            "journals": journals,
            "totals": {
                "files": len(journals),
                "bytes": sum(j["size"] for j in journals),
                "first_seq": txlog.first_seq,
                "last_seq": txlog.last_seq,
                "durable_seq": txlog.durable_seq,
            },
            "flush_latency_ms": {
                "p50": st.get("fsync_p50_ms", 0.0),
                "p99": st.get("fsync_p99_ms", 0.0),
            },
            "stats": st,
            "write_outage": outage.to_dict() if (outage := txlog.write_outage) else None,
            "preallocation": (
                short.to_dict() if (short := txlog.preallocation_shortfall) else None
            ),
            "damage": [d.to_dict() for d in txlog.damage],
            "fences": [f.to_dict() for f in txlog.fences],
            "scrub": txlog.scrub_status.to_dict(),
            "repair": self.repairer.progress.to_dict() if self.repairer is not None else None,
        }

    def repair(self) -> dict[str, object] | None:
        """Ask the replication peers for the fenced records now (admin action); the
        repair's progress. None when there is no destination to ask."""
        repairer = self.repairer
        if repairer is None:
            return None
        repairer.request()
        self.events.emit("info", "txlog", "repair_requested", fences=len(self._txlog.fences)
                         if self._txlog is not None else 0)  # fmt: skip
        return repairer.progress.to_dict()

    async def release_fence(self, first_seq: int) -> dict[str, object] | None:
        """Accept the loss of a fenced range's records (admin action): its placeholders
        stay, released, and readers pass over them. None: no such fence.

        Raises:
            OSError: the journal could not be written (the fence stays).
        """
        txlog = self._txlog
        if txlog is None:
            return None
        try:
            fence = await txlog.release_fence(first_seq)
        except ValueError:
            return None
        self.events.emit(
            "warning", "txlog", "fence_released_by_operator", first_seq=fence.first_seq,
            last_seq=fence.last_seq, reason=fence.reason,
        )  # fmt: skip
        return fence.to_dict()

    def scrub(self) -> dict[str, object] | None:
        """Start a scrub of every journal now (admin action); the scrub's status, with
        ``started`` False when one was under way already. None without a transaction log.
        """
        txlog = self._txlog
        if txlog is None:
            return None
        started = txlog.scrub()
        self.events.emit("info", "txlog", "scrub_requested", started=started)
        return {"started": started, **txlog.scrub_status.to_dict()}

    def journal_state(self) -> tuple[list[JournalInfo], list[PinInfo]] | None:
        """Every journal (oldest first, then the preallocated files) and the live pins;
        None without a transaction log. What the journal actions decide on."""
        txlog = self._txlog
        if txlog is None:
            return None
        return txlog.journals(), txlog.pins()

    async def journal_action(
        self, action: JournalAction, journal_id: int, method: Compression = "zstd"
    ) -> list[JournalDict]:
        """Archive, compress (``method``) or remove a journal and every older one (files
        in threads).

        Raises:
            JournalNotFound, JournalActive, JournalPinned, TxlogClosed.
        """
        txlog = self._txlog
        if txlog is None:
            raise JournalNotFound(journal_id)
        if action == "archive":
            infos = await txlog.archive(journal_id)
        elif action == "compress":
            infos = await txlog.compress(journal_id, method)
        else:
            infos = await txlog.remove(journal_id)
        self.events.emit("info", "txlog", f"journal_{action}", journal=journal_id, files=len(infos))
        return [journal_dict(j) for j in infos]

    # -- replication --------------------------------------------------------------------

    def _repl(self) -> Replication:
        if self._replication is None:
            raise ReplicationNotConfigured(
                "this instance has no <Replication> nor amps-replication transport"
            )
        return self._replication

    def replication_info(self) -> ReplicationInfo:
        """Destinations and incoming links (docs/admin-api.md ``/api/replication``).

        Raises:
            ReplicationNotConfigured: the instance does not replicate.
        """
        return self._repl().info()

    def downgrade_destination(self, name: str) -> None:
        """Persisted acks stop waiting for a sync destination, at once.

        Raises:
            ReplicationNotConfigured, DestinationNotFound, SyncChangeRefused.
        """
        self._repl().downgrade(name)

    def upgrade_destination(self, name: str) -> None:
        """A downgraded destination becomes sync again once it has caught up.

        Raises:
            ReplicationNotConfigured, DestinationNotFound, SyncChangeRefused.
        """
        self._repl().upgrade(name)

    def reconnect_destination(self, name: str) -> None:
        """Drop a destination's link and dial it again from the top of its addresses.

        Raises:
            ReplicationNotConfigured, DestinationNotFound.
        """
        self._repl().reconnect(name)

    async def replication_events(
        self, t0: float, t1: float, link: str | None, direction: str | None, limit: int
    ) -> list[tuple[float, str, str, str, str]]:
        """Link events from the stats database (SQLite in a thread).

        Raises:
            ReplicationNotConfigured, StatsUnavailable.
        """
        self._repl()
        sampler = self.sampler
        store = sampler.store if sampler is not None else None
        if store is None:
            raise StatsUnavailable("the statistics database is not open")
        return await asyncio.to_thread(
            store.reader.link_events, t0, t1, link=link, direction=direction, limit=limit
        )

    async def link_history(
        self, t0: float, t1: float, link: str, direction: str, limit: int
    ) -> list[dict[str, object]]:
        """One link's sampled history from the stats database (SQLite in a thread).

        Raises:
            ReplicationNotConfigured, StatsUnavailable.
        """
        self._repl()
        sampler = self.sampler
        store = sampler.store if sampler is not None else None
        if store is None:
            raise StatsUnavailable("the statistics database is not open")
        return await asyncio.to_thread(
            store.reader.link_history, t0, t1, link=link, direction=direction, limit=limit
        )

    # -- retention pins taken over the admin API -----------------------------------------

    def _log(self) -> TransactionLog:
        if self._txlog is None:
            raise NoTransactionLog()
        return self._txlog

    def pins_info(self) -> list[PinDict]:
        """Every retention pin of the log, oldest seq first; ``admin``: taken over REST."""
        txlog = self._log()
        mine = {(owner, pin.seq) for owner, pin in self._admin_pins.items()}
        return [
            {"owner": p.owner, "seq": p.seq, "admin": (p.owner, p.seq) in mine}
            for p in txlog.pins()
        ]

    def take_pin(self, owner: str, seq: int) -> PinTaken:
        """Hold every record from ``seq`` on for ``owner`` (moves its pin if it has one).

        Pins taken here live in memory, like every pin of the log: after a restart of the
        instance their holders take them again (a Spark stream does at every trigger).
        """
        txlog = self._log()
        pin = self._admin_pins.get(owner)
        if pin is None:
            self._admin_pins[owner] = txlog.pin(owner, seq)
        else:
            pin.move(seq)
        return {
            "owner": owner,
            "seq": seq,
            "first_seq": txlog.first_seq,
            "durable_seq": txlog.durable_seq,
        }

    def release_pin(self, owner: str) -> None:
        """Release the admin pin of ``owner``.

        Raises:
            PinNotFound: no pin of that owner was taken over the admin API.
        """
        self._log()
        pin = self._admin_pins.pop(owner, None)
        if pin is None:
            raise PinNotFound(owner)
        pin.release()

    # -- the broker's own messages, the process ---------------------------------------

    async def publish(self, topic: str, body: bytes, corr_id: str = "") -> Published:
        """Publish ``body`` to ``topic`` (with correlation id ``corr_id``, ``""``: none) as
        the instance itself (an Origin of kind ``broker``) through the publish pipeline;
        returns once it is durable.

        Raises:
            PublishRefused: the pipeline's reason (a regex topic, txlog full...).
        """
        if self._publisher is None:
            raise PublishRefused("invalid topic", "this instance has no publish pipeline")
        return await self._publisher.publish(topic, body, corr_id)

    def publisher_last(self, pub_hash: int) -> int:
        """The highest sequence the log holds for publisher ``pub_hash`` (0: none, or no
        log)."""
        return self._txlog.publisher_last(pub_hash) if self._txlog is not None else 0

    def publish_derived(
        self,
        topic: str,
        pub_hash: int,
        pub_seqs: Sequence[int],
        bodies: Sequence[bytes],
        corr_ids: Sequence[str],
        *,
        action: str,
    ) -> DerivedOutcome:
        """Publish messages action ``action`` derived from others, under the derived
        identity ``pub_hash`` with the sequences ``pub_seqs``, without waiting for
        durability (:meth:`wait_durable` on the outcome's ``last_seq``): a re-run of the
        same sources stores nothing twice (:meth:`BrokerPublisher.publish_derived`).

        Raises:
            PublishRefused: the instance has no publish pipeline.
            ValueError: the batch is malformed (columns of different lengths, ids out
                of range).
        """
        if self._publisher is None:
            raise PublishRefused("invalid topic", "this instance has no publish pipeline")
        return self._publisher.publish_derived(
            topic, pub_hash, pub_seqs, bodies, corr_ids, action=action
        )

    async def wait_durable(self, seq: int) -> None:
        """Return once every record of the log up to ``seq`` is durable here (written and
        fsynced); at once for 0 (nothing was recorded) or without a log. A write outage
        does not end the wait: the log retries until the disk takes the records.

        Raises:
            TxlogClosed: the log closed before ``seq`` was durable.
        """
        if seq <= 0 or self._txlog is None:
            return
        await self._txlog.wait_durable(seq)

    def request_shutdown(self, reason: str) -> bool:
        """Stop the instance gracefully, as SIGTERM does (the host process acts on it).

        Returns:
            Whether a host process took the request (``spool serve`` does).
        """
        self.events.emit("warning", "instance", "shutdown_requested", reason=reason)
        return self.lifecycle.request_shutdown(reason)

    async def filesystem_usage(self, path: Path) -> FilesystemUsage:
        """Usage of the file system holding ``path`` (a ``statvfs`` in a thread)."""
        return await asyncio.to_thread(filesystem_usage, path)

    # -- the SOW ------------------------------------------------------------------------

    # -- queues -------------------------------------------------------------------------

    @property
    def has_queues(self) -> bool:
        return self._queues is not None and self._queues.enabled

    def queue_infos(self) -> list[dict[str, object]]:
        """Every queue (``GET /api/queues``)."""
        return [q.to_dict() for q in self._queues.infos()] if self._queues else []

    def queue_info(self, name: str) -> dict[str, object]:
        """One queue (:class:`~spool.server.queues.errors.QueueNotFound`: 404)."""
        from_service = self._queues
        if from_service is None:
            raise QueueNotFound(name)
        return from_service.info(name).to_dict()

    def queue_messages(
        self, name: str, after: int, limit: int, user: UserConfig | None
    ) -> dict[str, object]:
        """A page of a queue's waiting and leased messages, with why each is not being
        delivered (``GET /api/queues/{name}/messages``). It shows message data, so the
        caller must be entitled to read the queue (its topic) as a consumer would.

        Raises:
            QueueNotFound: no queue of that name (404).
            QueueNotEntitled: ``user`` may not read the queue (403).
        """
        queues = self._queues
        if queues is None or name not in queues.queues:
            raise QueueNotFound(name)
        if self.auth.enabled and not self.auth.can_read(user, name):
            raise QueueNotEntitled(user.name if user is not None else None, name)
        return queues.browse(name, after, limit).to_dict()

    def set_proxied_transfer(self, name: str, enabled: bool, by: str | None = None) -> int:
        """``POST /api/queues/{name}/enable_proxied_transfer`` (and disable), by user
        ``by`` (the event log says who): how many messages were taken over now. Refused
        (:class:`~spool.server.queues.errors.ProxiedTransferUnavailable`: 409) for a queue
        that is not replicated."""
        if self._queues is None:
            raise QueueNotFound(name)
        return self._queues.set_proxied_transfer(name, enabled, by)

    async def redrive_dead_letters(
        self,
        name: str,
        *,
        filter: str | None = None,
        limit: int = 100,
        target: str | None = None,
        user: UserConfig | None = None,
        by: str | None = None,
    ) -> dict[str, object]:
        """Send back up to ``limit`` of queue ``name``'s dead letters that match
        ``filter`` (read as the dead letter: ``/dead_letter/reason``, ``/message/...``)
        to ``target`` (None: each to its original topic), by user ``by``
        (``POST /api/queues/{name}/redrive``, docs/queues.md "Redrive").

        Raises:
            QueueNotFound: no such queue (404).
            QueueNotEntitled: ``user`` may not read the dead-letter topic (403).
            RedriveRefused: no dead-letter topic, not a keyed SOW topic, a target the log
                does not record or the user may not publish to (409).
            RedriveFailed: the log refused a message partway (503).
            BadFilter: the filter does not compile (400).
        """
        cfg, store = self._dead_letter_store(name, user)
        queues = self._queues
        assert queues is not None
        if target is not None and any(
            q.config.dead_letter is not None and q.config.dead_letter.topic == target
            for q in queues.queues.values()
        ):
            raise RedriveRefused(f"{target!r} is a dead-letter topic: redrive to a topic "
                                 "that a queue takes, or to the original topic")  # fmt: skip
        matches = compile_filter(filter, clock=self.clock) if filter else None
        txlog = self._txlog
        if self._redriver is None:
            if txlog is None or self._publisher is None:  # pragma: no cover - queues need both
                raise RedriveRefused("this instance cannot publish")
            tl = self.config.transaction_log
            self._redriver = Redriver(
                txlog, self._publisher.publish_now,
                tl.records if tl is not None else (lambda _topic: False), self.events,
                self.clock,
            )  # fmt: skip
        auth = self.auth
        done = await self._redriver.redrive(
            cfg, store.records(), matches=matches, limit=limit, target=target,
            may_write=lambda topic: not auth.enabled or auth.can_write(user, topic), by=by or "",
        )  # fmt: skip
        return done.to_dict()

    async def dead_letters(
        self,
        name: str,
        *,
        filter: str | None = None,
        limit: int = 100,
        redriven: bool = False,
        user: UserConfig | None = None,
    ) -> dict[str, object]:
        """Queue ``name``'s dead letters that match ``filter``, at most ``limit``, those
        sent back already too with ``redriven`` (``GET /api/queues/{name}/dead_letters``).
        Raises as :meth:`redrive_dead_letters` does (it reads the same topic)."""
        cfg, store = self._dead_letter_store(name, user)
        assert cfg.dead_letter is not None
        matches = compile_filter(filter, clock=self.clock) if filter else None
        found = await select_letters(
            name, cfg.dead_letter.topic, store.records(), matches, limit, redriven=redriven
        )
        return {
            "queue": name,
            "dead_letter_topic": cfg.dead_letter.topic,
            "letters": [letter_dict(letter, body, PREVIEW) for letter, body in found],
            "redrive_max": REDRIVE_MAX,
        }

    def _dead_letter_store(
        self, name: str, user: UserConfig | None
    ) -> tuple[QueueConfig, MemoryStore]:
        """Queue ``name``'s configuration and its dead-letter topic's SOW store, once the
        queue has one that is keyed and ``user`` may read it."""
        queues = self._queues
        if queues is None or name not in queues.queues:
            raise QueueNotFound(name)
        cfg = queues.queues[name].config
        dead = cfg.dead_letter
        if dead is None:
            raise RedriveRefused(f"queue {name!r} has no <DeadLetter>: it keeps no dead letters")
        rule = self._sow.topics.rule(dead.topic)
        store = self._sow.topics.store(dead.topic)
        if rule is None or store is None or not rule.keys:
            raise RedriveRefused(
                f"the dead-letter topic {dead.topic!r} of queue {name!r} is not a SOW topic "
                "with a <Key>: its dead letters are read from its records, and a redrive "
                "marks each one it sends back by replacing its record; add <SOW><Topic>"
                f"<Name>{dead.topic}</Name><Key>/dead_letter/bookmark</Key></Topic>"
            )
        if self.auth.enabled and not self.auth.can_read(user, dead.topic):
            raise QueueNotEntitled(user.name if user is not None else None, dead.topic)
        return cfg, store

    def release_queue_hold(self, by: str | None = None) -> int:
        """``POST /api/queues/release_hold``, by user ``by``: stop waiting for the
        replication sources to resend what this instance lost; the queue messages held
        for them are delivered (at least once). How many were freed (0: no such hold).
        """
        if self._queues is None:
            return 0
        return self._queues.release_hold(by)

    # -- delayed delivery ---------------------------------------------------------------

    @property
    def has_delayed(self) -> bool:
        """Whether delayed delivery runs here (it needs a transaction log)."""
        return self._delayed is not None

    def delayed_info(self) -> DelayedSummary:
        """The pending delayed messages counted, every topic's (``GET /api/delayed``
        leaves out the topics its user may not read).

        Raises:
            DelayedNotConfigured: no transaction log here (404).
        """
        info = self._delayed_service().info()
        return {
            "pending": info.pending,
            "next_due": _due_time(info.next_due_us) if info.next_due_us is not None else None,
            "next_due_us": info.next_due_us,
            "delivered": info.delivered,
            "waiting": info.waiting,
            "topics": [{"topic": t, "pending": n} for t, n in info.by_topic.items()],
        }

    async def delayed_messages(
        self, after: tuple[int, int] | None, limit: int, user: UserConfig | None
    ) -> DelayedPage:
        """A page of the pending delayed messages in due order, after the position
        ``after`` (``(due_us, seq)``; None: from the first), without bodies
        (``GET /api/delayed/messages``). Their bookmarks say which messages exist, so
        the messages of a topic ``user`` may not read are left out; the page then holds
        fewer than ``limit``, and ``next_after`` still moves past them.

        Raises:
            DelayedNotConfigured: no transaction log here (404).
        """
        # one more than asked: whether a next page exists, without an empty last page
        found = await self._delayed_service().upcoming(after, limit + 1)
        page = found[:limit]
        auth = self.auth
        return {
            "messages": [
                _delayed_message(m) for m in page
                if not auth.enabled or auth.can_read(user, m.topic)
            ],
            "next_after": f"{page[-1].due_us}:{page[-1].seq}" if len(found) > limit else None,
        }  # fmt: skip

    def _delayed_service(self) -> DelayedDelivery:
        if self._delayed is None:
            raise DelayedNotConfigured()
        return self._delayed

    def sow_topics(self) -> list[SowTopicInfo]:
        """Every SOW topic: records, bytes, key paths, file, last compaction
        (``GET /api/sow``)."""
        return self._sow.topic_infos()

    def sow_topic(self, topic: str) -> SowTopicInfo:
        """One SOW topic (:class:`~spool.server.sow.errors.SowTopicNotFound`: 404)."""
        return self._sow.topic_info(topic)

    def sow_keys(self, topic: str, *, after: str | None = None, limit: int = 1000) -> SowKeys:
        """A page of a SOW topic's keys, in store order."""
        return self._sow.keys(topic, after=after, limit=limit)

    async def delete_sow(
        self,
        topic: str,
        *,
        filter: str | None = None,
        keys: Sequence[str] | None = None,
        by: str,
    ) -> int:
        """Delete the records of SOW topic ``topic`` that ``filter`` matches, or those of
        ``keys`` (exactly one), as a client's ``sow_delete`` would, without a connection:
        logged when the topic is recorded (and so replicated), removed, ``oof`` to the
        subscribers that held them (:meth:`SowDeletes.delete_matching`). ``by`` names
        who asked (an action) where a refusal is reported. Returns how many went.

        Raises:
            InvalidTopic: not a SOW topic (or a regex).
            InvalidMessage: not exactly one of ``filter`` and ``keys``.
            BadFilter: the filter does not compile.
            ProtocolFailure: the log refused the removal part way (``txlog full``).
        """
        return await self._sow.deletes.delete_matching(topic, filter=filter, keys=keys, by=by)

    async def compact_sow(self, topic: str) -> SowCompaction:
        """Compact a persistent SOW topic's file (``POST /api/sow/{topic}/compact``);
        the file work runs in a thread."""
        result = await self._sow.compact(topic)
        self.events.emit("info", "sow", "sow_compact", **result)
        return result

    # -- statistics ---------------------------------------------------------------------

    async def truncate_stats(self, before: float) -> int:
        """Delete stats samples older than ``before`` (epoch seconds); how many went."""
        sampler = self.sampler
        store = sampler.store if sampler is not None else None
        if store is None:
            raise StatsUnavailable("the statistics database is not open")
        return await asyncio.to_thread(store.writer.truncate, before)

    async def record_action_run(self, row: ActionRunRow) -> int:
        """Store a finished action run in the stats database; its id.

        Raises:
            StatsUnavailable: the database is not open.
        """
        sampler = self.sampler
        store = sampler.store if sampler is not None else None
        if store is None:
            raise StatsUnavailable("the statistics database is not open")
        return await asyncio.to_thread(store.action_runs.append, row)

    async def action_runs(
        self, action: str | None, limit: int, before_id: int | None = None
    ) -> list[StoredRun]:
        """Stored action runs, newest first (of one action when given).

        Raises:
            StatsUnavailable: the database is not open.
        """
        sampler = self.sampler
        store = sampler.store if sampler is not None else None
        if store is None:
            raise StatsUnavailable("the statistics database is not open")
        return await asyncio.to_thread(store.action_runs.recent, action, limit, before_id)


def _due_time(us: int) -> str:
    """A due time as the API writes times (ISO-8601 UTC, milliseconds, ``Z``)."""
    return format_time(us / 1e6)


def _delayed_message(m: PendingMessage) -> DelayedMessage:
    return {"due": _due_time(m.due_us), "due_us": m.due_us, "seq": m.seq, "topic": m.topic,
            "bookmark": m.bookmark}  # fmt: skip


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds")


def _iso_us(us: int | None) -> str | None:
    if us is None:
        return None
    return datetime.fromtimestamp(us / 1e6, UTC).isoformat(timespec="microseconds")


def journal_dict(j: JournalInfo) -> JournalDict:
    """A journal as docs/admin-api.md shows it (times as ISO-8601 UTC)."""
    return {
        "id": j.id,
        "path": j.path,
        "state": j.state,
        "size": j.size_bytes,
        "data_bytes": j.data_bytes,
        "compression": j.compression,
        "records": j.records,
        "first_seq": j.first_seq,
        "last_seq": j.last_seq,
        "first_bookmark": j.first_bookmark,
        "last_bookmark": j.last_bookmark,
        "first_time": _iso_us(j.first_time_us),
        "last_time": _iso_us(j.last_time_us),
        "pinned_by": j.pinned_by,
    }
