"""The broker engine: the composition root of one Spool instance.

:class:`Broker` builds the parts, wires them through the seams of server/ports.py, starts
and stops them in order, and holds the command table. It implements no path itself; each
path has its own module (docs/architecture.md has the map)::

    transport -> Session (connection) -> Dispatcher (one connection's command order)
        runs of publishes -> PublishPipeline -> TransactionLog.append_many
                                             -> appended stages: FanOut -> Router -> Sessions
        the command table (CommandTable: routes by topic kind) -> ClientRegistry (logon),
                             QueueService (queue subscriptions and acks), SowService
                             (SOW commands and subscriptions), SubscriptionService
                             (plain and bookmark subscriptions), DurableAcks (flush)
    group commit -> durability horizon -> DurableAcks (persisted, flush acks)
                                       -> replay cursors (bookmark subscriptions)
    Operations (REST admin, actions) -> reads and actions over the parts
    Actions -> scheduled and on-demand administration, through Operations
    BrokerPublisher -> the instance's own messages, through the publish pipeline
    Metrics -> one typed snapshot for the sampler, Prometheus and the dashboard

One asyncio event loop owns all broker state (no locks). Blocking work (fsync, file scans,
SQLite, scrypt) runs in threads owned by the parts, which report back to the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable, Mapping
from typing import Final

from spool.server import __version__
from spool.server.acks import DurableAcks, LocalHorizon
from spool.server.actions import Actions
from spool.server.actions.onpublish import PublishTriggers
from spool.server.actions.webhooks import WebhookPort
from spool.server.alertrules import AlertRules
from spool.server.auth import UserAuthenticator
from spool.server.brokerpublish import BrokerPublisher
from spool.server.clients import ClientRegistry
from spool.server.clock import SYSTEM_CLOCK, Clock
from spool.server.commandtable import CommandTable
from spool.server.config import EVENTS_CLIENTS, EVENTS_SUBSCRIPTIONS, Config
from spool.server.delayed.checkpoint import checkpoint_name as delayed_checkpoint
from spool.server.delayed.service import DelayedDelivery
from spool.server.dispatch import CommandHandler, Dispatcher
from spool.server.eventlog import ConsoleFormat, EventLog
from spool.server.eventtopics import EventTopics
from spool.server.fanout import FanOut
from spool.server.happenings import Happenings
from spool.server.lifecycle import Lifecycle
from spool.server.logons import LogonGuard
from spool.server.metrics import Metrics
from spool.server.operations import Operations
from spool.server.peer import Peer
from spool.server.ports import DurabilityHorizon
from spool.server.publishing import PublishPipeline
from spool.server.queues.service import QueueService
from spool.server.quotas import Quotas
from spool.server.replication.bootstrap import Bootstrapper
from spool.server.replication.errors import BootstrapFailed
from spool.server.replication.horizon import SyncHorizon
from spool.server.replication.repair import Repairer
from spool.server.replication.service import Replication
from spool.server.replication.state import load as load_replication_state
from spool.server.replication.state import state_path
from spool.server.replication.transport import Connector, connect_websocket
from spool.server.router import Router
from spool.server.scryptpool import ScryptPool
from spool.server.session import Session, Transport
from spool.server.sow import SowService
from spool.server.spills import Spills
from spool.server.stalls import StallWatch
from spool.server.stats.host import FilesystemUsage, filesystem_usage
from spool.server.stats.sampler import Sampler
from spool.server.subscriptions import SubscriptionService
from spool.server.throttle import LogonThrottle, ThrottlePolicy
from spool.server.tls.listener import TlsListener
from spool.server.topics import TopicTable
from spool.server.txlog import FileSeam, TransactionLog, TxlogError

#: how long a graceful stop waits for what was appended to become durable (seconds)
_DRAIN_DURABLE_TIMEOUT = 5.0
#: event-log level of the transaction log's events (server/txlog/events.py); others: info
_TXLOG_LEVELS: Final[dict[str, str]] = {
    "flush_failed": "error",  # a write outage began: publishes are refused
    "unwritten_at_close": "error",
    "writes_resumed": "warning",
    "recovery_truncated": "warning",
    "recovery_lost_unnamed": "error",  # durable records lost that no peer can be asked for
    "preallocation_failed": "warning",
    "cache_write_failed": "warning",
    "journal_damaged": "error",  # records of a journal are not readable
    "journal_fenced": "error",  # ... and their seqs are held until a repair
    "fence_failed": "error",
    "own_floor_failed": "error",  # a restart may reuse one of its own bookmarks
    "index_damaged": "warning",  # an index file failed its CRC (rebuilt from its journal)
}


class Broker:
    """One Spool instance's engine.

    Args:
        config: the instance configuration.
        clock: the time source every part uses.
        console_log: also log events to the console.
        console_format: how they look there: ``json`` lines, or ``text`` for a person at a
            terminal (the event log file is JSON lines always).
        files: the file seam journal writes go through (None: the real one; fault tests
            inject write and fsync failures here).
        connector: how replication links dial their destinations (tests link in-process
            brokers with an in-memory one).
        webhooks: what posts the webhooks of actions (tests answer with a fake); None:
            threads of the actions' own, with real HTTP clients.

    Attributes:
        config: the instance configuration.
        clock: the time source every part uses.
        lifecycle: ready / stopping.
        events: the event log.
        happenings: the broker's own life (clients, subscriptions, links) for the parts
            that publish or act on it (server/happenings.py).
        auth: users and entitlements (password checks on their own bounded pool).
        logons: the logon throttle and counters, shared by the websocket logon and the
            dashboard login.
        tls: the listener's TLS (certificate pair, reloads, expiry), None in plain text.
        txlog: the transaction log (None when not configured).
        replication: destinations, inbound links, the sync horizon (None when the instance
            does not replicate).
        operations: the admin surface (web/admin.py, the dashboard, the actions).
        actions: the configured actions (server/actions).
    """

    def __init__(
        self,
        config: Config,
        *,
        clock: Clock = SYSTEM_CLOCK,
        console_log: bool = True,
        console_format: ConsoleFormat = "json",
        files: FileSeam | None = None,
        connector: Connector = connect_websocket,
        webhooks: WebhookPort | None = None,
    ) -> None:
        self.config = config
        self.clock = clock
        self.lifecycle = Lifecycle(started_at=clock.time())
        self.events = EventLog(
            config.data_directory, config.name, console=console_log,
            console_format=console_format, clock=clock,
        )  # fmt: skip
        #: the broker's own life told to the parts that publish or act on it
        self.happenings = Happenings(self.events, clock)
        tuning = config.tuning
        self.auth = UserAuthenticator(config.users, ScryptPool(tuning.password_check_threads))
        self.logons = LogonGuard(
            LogonThrottle(
                ThrottlePolicy(
                    tuning.logon_failures_per_address,
                    tuning.logon_failures_per_user,
                    tuning.logon_failure_window,
                    tuning.logon_failures_per_address_user,
                ),
                clock,
            ),
            self.events,
            clock,
        )
        self.tls: TlsListener | None = None
        if config.tls is not None:
            self.tls = TlsListener(config.tls, clock, self.events)
        self.txlog: TransactionLog | None = None
        if config.transaction_log is not None:
            self.txlog = TransactionLog(
                config.transaction_log, config.name, clock=clock, on_event=self._txlog_event,
                files=files, track_gaps=config.replicates,
                scrub_interval=config.tuning.journal_scrub_interval,
                scrub_rate=config.tuning.journal_scrub_rate,
            )  # fmt: skip
        txlog = self.txlog
        # the local fsync: what the replication push and durable stages follow
        local = LocalHorizon(txlog) if txlog is not None else None
        # what persisted acks and fully_durable subscriptions wait for: with replication,
        # the local fsync and every destination whose effective sync type is sync
        sync = SyncHorizon(txlog) if txlog is not None and config.replicates else None
        horizon: DurabilityHorizon | None = sync if sync is not None else local
        # what replicated acks follow: every destination, sync or async (the local fsync
        # without replication)
        replicated = sync.replicated if sync is not None else local
        self.acks = DurableAcks(
            horizon, (lambda: txlog.last_seq) if txlog is not None else (lambda: 0), clock,
            replicated,
        )  # fmt: skip
        self.router = Router()
        self.spills = Spills(txlog, self.auth, self.events, clock) if txlog is not None else None
        self.fanout = FanOut(self.router, self.auth, clock, self.spills)
        #: the event topics that are on: only their own messages are published there
        reserved = config.event_topics.topics
        self.topics = TopicTable(self._records, reserved=reserved)
        #: what one connection and one user may hold at once (the registry, made below,
        #: knows a user's connections)
        self.quotas = Quotas(config.tuning, lambda user: self.clients.sessions_of(user))
        self.subscriptions = SubscriptionService(
            config, self.router, txlog, horizon, self.auth, self.events, clock, self.spills,
            quotas=self.quotas,
        )  # fmt: skip
        self.stalls = StallWatch(
            lambda: self.clients.sessions, config.tuning.slow_client_timeout, clock, self.events
        )
        self.sow = SowService(
            config, txlog, self.subscriptions, self.auth, self.events, clock, self.happenings
        )
        self.queues = QueueService(
            config, txlog, self.subscriptions, self.auth, self.events, clock, self.happenings
        )
        #: the on-publish triggers of actions: a stage only when one is configured
        self.publish_triggers = PublishTriggers(config, txlog, clock, self.events)
        on_publish = (self.publish_triggers,) if self.publish_triggers.configured else ()
        # durable stages (SOW files) follow the local fsync; acks wait on ``horizon``
        #: delayed delivery (publishes with ``deliver_at`` / ``deliver_after``): needs a log
        self.delayed: DelayedDelivery | None = None
        if txlog is not None and config.transaction_log is not None:
            self.delayed = DelayedDelivery(
                txlog, config.name, clock, self.events,
                config.transaction_log.journal_directory / delayed_checkpoint(config.name),
            )  # fmt: skip
        recovering = (self.delayed,) if self.delayed is not None else ()
        self.pipeline = PublishPipeline(
            self.topics, txlog, local, self.acks, self.auth, self.events,
            stages=(self.sow.stage, self.queues.stage, self.fanout, *on_publish, *recovering),
        )  # fmt: skip
        self.sow.attach(self.pipeline)
        if self.delayed is not None:
            self.delayed.attach(self.pipeline)
        #: the instance as a publisher (actions, the queues' dead letters, event topics)
        broker = BrokerPublisher(self.pipeline, txlog, config.name, reserved=reserved)
        self.queues.dead_letters = broker.publish_now
        #: the event topics that are on (``<EventTopics>``), a sink of the happenings
        self.event_topics: EventTopics | None = None
        events_cfg = config.event_topics
        if events_cfg.enabled:
            self.event_topics = EventTopics(
                events_cfg.topics, max_per_second=events_cfg.max_events_per_second,
                sow_interval=events_cfg.sow_stats_interval, instance=config.name,
                group=config.group, publish=broker.publish_events, clock=clock,
                events=self.events, sow_stats=self.sow.topic_infos,
            )  # fmt: skip
            self.happenings.add(self.event_topics)
        self.replication: Replication | None = None
        if txlog is not None and sync is not None:
            self.replication = Replication(
                config, txlog, self.pipeline, self.auth, self.lifecycle, clock, self.events, sync,
                connector=connector, logons=self.logons, happenings=self.happenings,
            )  # fmt: skip
        replication = self.replication
        if replication is not None:
            # replicated queues: an instance with a live link into this one is online
            self.queues.peers = replication.inbound.keys
            replication.on_resynced = self.queues.resynced
        #: the bootstrap of an empty instance (``<Bootstrap>``), None without one
        self.bootstrapper: Bootstrapper | None = None
        if config.bootstrap is not None and txlog is not None:
            self.bootstrapper = Bootstrapper(
                config, config.bootstrap, txlog, self.pipeline, lambda: list(self.sow.topics),
                clock, self.events, connector, self.auth,
            )  # fmt: skip
        self._bootstrapping: asyncio.Task[None] | None = None
        #: the repair of fenced records from the destinations (server/replication/repair.py)
        self.repairer: Repairer | None = None
        repl_cfg = config.replication
        if replication is not None and txlog is not None and repl_cfg and repl_cfg.destinations:
            self.repairer = Repairer(config, txlog, clock, self.events, connector, self.auth)
        #: the catch-ups of the SOW and queues after repairs (:meth:`_repaired`)
        self._refolds: set[asyncio.Task[None]] = set()
        #: the start-up waits for a repair of fenced records (not ready meanwhile; the
        #: /replication endpoint serves repair requests, peers may be repairing too)
        self.starting_repair = False
        self.clients = ClientRegistry(
            config, self.auth, txlog, self.acks, self.lifecycle, self.events, clock, self.logons,
            self.happenings,
            logon_fields=replication.failover_fields if replication is not None else None,
            name_claims=replication.client_names if replication is not None else None,
        )  # fmt: skip
        if replication is not None:
            replication.failover_listeners.append(self.clients.failover_changed)
            replication.client_names.held_here = self.clients.holds
            replication.collisions.name_of = self.clients.name_of
            self.pipeline.watch = replication.collisions
        self.clients.on_close.append(self.queues.drop_all)
        self.clients.on_close.append(self.sow.drop_all)
        self.clients.on_close.append(self.subscriptions.drop_all)
        self.clients.on_close.append(self.acks.forget)
        self.metrics = Metrics(
            self.clients,
            self.topics,
            self.pipeline,
            txlog,
            self.acks,
            tuple(t.name for t in config.transports),
            clock,
            self.logons,
            self.auth.pool,
            self.tls,
            config.plaintext_exposed,
            spills=self.spills,
            replication=replication.counters if replication is not None else None,
            queues=self.queues.counters if self.queues.enabled else None,
            event_topics=self.event_topics.counters if self.event_topics is not None else None,
            delayed=self.delayed.counters if self.delayed is not None else None,
        )
        self.operations = Operations(
            config,
            clock,
            self.events,
            self.auth,
            self.lifecycle,
            self.clients,
            self.subscriptions,
            self.metrics,
            self.acks,
            txlog,
            self.tls,
            self.logons,
            broker,
            replication,
            sow=self.sow,
            queues=self.queues,
            event_topics=self.event_topics,
            delayed=self.delayed,
        )
        self.operations.bootstrap = self.bootstrapper
        self.operations.repairer = self.repairer
        #: the operator's alert rules (``Admin/Alerts``), evaluated on their own timer
        self.alert_rules = AlertRules(
            config.admin.alert_rules, self.metrics.snapshot, self._journal_disk, clock,
            self.events,
        )  # fmt: skip
        self.operations.alert_rules = self.alert_rules
        self.actions = Actions(
            config, self.operations, clock, publish_triggers=self.publish_triggers,
            webhooks=webhooks,
        )  # fmt: skip
        if self.actions.happenings_sink is not None:  # client or link triggers
            self.happenings.add(self.actions.happenings_sink)
        #: the command table and its routing rule (server/commandtable.py): every
        #: command but ``publish`` and ``heartbeat``, which the dispatcher runs itself (the
        #: publish pipeline, the connection's heartbeat); subscribe-like commands go to the
        #: queues, the SOW or the subscriptions by the kind of their topic
        self.command_table = CommandTable(
            self.clients, self.acks, self.subscriptions, self.sow, self.queues,
            self.happenings, clock,
        )  # fmt: skip
        self.commands: Mapping[str, CommandHandler] = self.command_table.handlers
        self._sampler: Sampler | None = None

    # -- lifecycle -----------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        """Recovery is done and clients are served."""
        return self.lifecycle.ready

    @property
    def stopping(self) -> bool:
        return self.lifecycle.stopping

    async def start(self) -> None:
        """Start in order; clients are served only after the last step."""
        cfg = self.config
        self.events.emit(
            "info", "instance", "starting", name=cfg.name, group=cfg.group,
            version=__version__, pid=os.getpid(),
            config=str(cfg.source_path) if cfg.source_path else "<embedded>",
        )  # fmt: skip
        # 1. the transaction log: recover (damage is fenced, a torn tail cut; what a
        #    destination acknowledged was durable: a torn tail keeps those seqs fenced)
        txlog = self.txlog
        if txlog is not None:
            known = await asyncio.to_thread(self._acknowledged) if cfg.replicates else 0
            report = await txlog.open(known_durable=known)
            self.events.emit("info", "txlog", "recovered", **report.to_dict())
            if cfg.replicates and cfg.replication is not None:
                # acks of replicated queues the log lost (or never had) may be held by
                # the sources: the queues hold what they may have acked until they
                # resent it (server/queues/hold.py)
                lost = txlog.lost_since_us is not None
                if lost or not txlog.last_seq:
                    self.queues.resync_wait(
                        "lost tail" if lost else "empty log",
                        [d.name for d in cfg.replication.destinations],
                    )  # fmt: skip
        # 1b. fenced records: the peers are asked for them before the state is rebuilt
        #     from the log (the instance is not ready meanwhile, for a bounded time)
        repairer = self.repairer
        if repairer is not None and txlog is not None and txlog.fences:
            wait = cfg.tuning.journal_repair_wait
            if wait > 0:
                self.starting_repair = True
                self._bootstrapping = asyncio.get_running_loop().create_task(
                    self._restore_after_repair(repairer, wait), name="spool-start-repair"
                )
                return
        await self._restore()

    def _acknowledged(self) -> int:
        """The highest position of this log a replication destination acknowledged (in
        the replication state file; 0 without one), read in a thread."""
        cfg = self.config
        state, _problem = load_replication_state(state_path(cfg.data_directory, cfg.name))
        if state is None:
            return 0
        return max((a.acked for a in state.destinations.values()), default=0)

    async def _restore_after_repair(self, repairer: Repairer, wait: float) -> None:
        """Start-up step 1b, then the rest of the start-up: what cannot be repaired in
        ``wait`` seconds stays fenced and is repaired in the background."""
        try:
            repaired = await repairer.repair_at_start(wait)
            if not repaired:
                self.events.emit(
                    "error", "txlog", "start_with_fences",
                    fences=len(self.txlog.fences) if self.txlog is not None else 0,
                    detail="starting with fenced records: the repair goes on in the background",
                )  # fmt: skip
        finally:
            self.starting_repair = False
        await self._restore()

    async def _restore(self) -> None:
        """Start-up steps 2 to 4, then the rest (:meth:`_serve`)."""
        # 2. SOW files: load what persistent topics kept
        await self.sow.open()
        # 3. publish stages rebuild their state from the journal (SOW, queues: from
        #    their checkpoint); fenced records are not there to rebuild from
        #    (server/txlog/damage/fences.py)
        await self.queues.load_checkpoint()
        if self.delayed is not None:
            await self.delayed.load_checkpoint()
        await self.pipeline.recover()
        for first, last in self.pipeline.recovery_skipped:
            self.events.emit(
                "error", "txlog", "recovery_skipped_fence", first_seq=first, last_seq=last,
                detail="the SOW and queues were rebuilt without these fenced records; "
                "they are taken in when a repair writes them back",
            )  # fmt: skip
        if self.pipeline.unfolded and self.txlog is not None:
            # the queues' pins and checkpoints hold from them until they are taken in
            self.queues.unfolded(self.pipeline.unfolded)
            self.txlog.add_fill_listener(self._repaired)
        self.sow.recovered()
        self.queues.recovered()
        if self.delayed is not None:
            self.delayed.recovered()
        # 4. bootstrap (an empty instance with <Bootstrap>): the copy runs while the web
        #    server is up (its progress on the dashboard and /api/bootstrap) but the
        #    instance is not ready: clients and replication links are refused until the
        #    rest of the start-up runs after it (server/replication/bootstrap.py)
        boot = self.bootstrapper
        if boot is not None and await boot.needed():
            self._bootstrapping = asyncio.get_running_loop().create_task(
                self._serve_after(boot), name="spool-bootstrap"
            )
            return
        await self._serve()

    def _repaired(self, first_seq: int, last_seq: int) -> None:
        """A repair wrote fenced records back (or an operator released them): the ranges
        the start-up rebuild went past that the log holds again are taken into the SOW
        and queues (:meth:`PublishPipeline.refold`; one at a time, in order)."""
        if self.lifecycle.stopping or not self.pipeline.unfolded:
            return
        task = asyncio.get_running_loop().create_task(self._refold(), name="spool-refold")
        self._refolds.add(task)
        task.add_done_callback(self._refolds.discard)

    async def _refold(self) -> None:
        pipeline = self.pipeline
        try:
            done = await pipeline.refold()
        except TxlogError as exc:  # the log closed or failed under it: a restart reads it
            self.events.emit(
                "error", "txlog", "refold_failed", error=f"{type(exc).__name__}: {exc}",
                unfolded=len(pipeline.unfolded),
            )  # fmt: skip
            return
        # the seqs an operator released came back as nothing: their queue records are
        # lost (a range repaired in part may have some); a range that reads as nothing
        # otherwise was taken by retention, lost the same way
        txlog = self.txlog
        released: list[tuple[int, int]] = []
        for first, last, records, _ in done.ranges:
            given_up = txlog.released_in(first, last) if txlog is not None else []
            released += given_up or ([] if records else [(first, last)])
        self.queues.unfolded(pipeline.unfolded, released)
        for first, last, records, changes in done.ranges:
            self.events.emit(
                "info", "txlog", "state_refolded", first_seq=first, last_seq=last,
                records=records, changes=changes, unfolded=len(pipeline.unfolded),
            )  # fmt: skip
        for first, last in done.deferred:
            self.events.emit(
                "warning", "txlog", "refold_deferred", first_seq=first, last_seq=last,
                detail="records after these repaired ones are damaged now: the SOW and "
                "queues take them in once those are repaired too",
            )  # fmt: skip

    async def _serve_after(self, boot: Bootstrapper) -> None:
        """The rest of the start-up once the bootstrap is done; a bootstrap that cannot
        finish (a mutual bootstrap) stops the instance instead: it must never serve an
        incomplete state."""
        try:
            await boot.run()
        except BootstrapFailed as exc:
            self.lifecycle.request_shutdown(f"bootstrap failed: {exc}")
            return
        except Exception as exc:  # a bug: say so and stop rather than hang unready
            self.events.emit(
                "error", "replication", "bootstrap_failed", detail=f"{type(exc).__name__}: {exc}"
            )
            self.lifecycle.request_shutdown(f"bootstrap failed: {type(exc).__name__}: {exc}")
            return
        await self._serve()

    async def _serve(self) -> None:
        """Start-up steps 5 to 11: replication, the sampler, TLS, the slow-client watch,
        actions, the scrub; then clients are served."""
        cfg = self.config
        # 5. replication: positions, pins, the links to the destinations
        if self.replication is not None:
            await self.replication.start()
        # 6. the statistics sampler
        self._sampler = Sampler(
            self.operations, cfg, self.clock,
            link_events=self.replication.drain_history if self.replication else None,
            link_samples=self.replication.link_samples if self.replication else None,
        )  # fmt: skip
        await self._sampler.start()
        self.operations.sampler = self._sampler
        # 6b. the operator's alert rules (server/alertrules.py)
        self.alert_rules.start()
        # 7. TLS: say what is served, watch its expiry; or say the listener is plain text
        if self.tls is not None:
            self.tls.start()
        elif cfg.plaintext_exposed:
            self.events.emit(
                "warning", "instance", "plaintext_listener", address=cfg.admin.address,
                detail="AllowPlaintext: passwords, tokens and messages cross the network "
                "without TLS unless a TLS-terminating proxy is in front",
            )  # fmt: skip
        # 8. the slow-client watch (SlowClientTimeout)
        self.stalls.start()
        # 9. actions: the on-startup ones run to their end, then schedules and watchers
        await self.actions.start()
        # 10. the scrub of the transaction log: a first pass now, then on its schedule;
        #     the repair of what it fences goes on while fences remain
        if self.txlog is not None:
            self.txlog.start_scrub()
        if self.repairer is not None:
            self.repairer.start()
        # 11. event topics: what happened while starting goes out now, the SOW samples begin
        if self.event_topics is not None:
            self._warn_event_readers(self.event_topics.topics)
            self.event_topics.start()
        # 12. serve
        self.lifecycle.ready = True
        self.events.emit("info", "instance", "started", name=cfg.name)

    def _warn_event_readers(self, topics: frozenset[str]) -> None:
        """Name the users who are not admins and may read the event topics that show
        other users' clients and subscriptions (docs/protocol.md "Event topics",
        docs/security.md)."""
        watched = sorted(topics & {EVENTS_CLIENTS, EVENTS_SUBSCRIPTIONS})
        if not self.auth.enabled or not watched:
            return
        for user in self.config.users:
            readable = [t for t in watched if not user.admin and self.auth.can_read(user, t)]
            if readable:
                self.events.emit(
                    "warning", "instance", "event_topics_readable", user=user.name,
                    topics=readable,
                    detail="this user is not an admin and may read what other users' "
                    "clients and subscriptions do: narrow its <Read> if that is not meant",
                )  # fmt: skip

    async def drain(self) -> None:
        """Shutdown step 1: refuse new work, close every client with ``shutting down``,
        end the replication links."""
        if self.lifecycle.stopping:
            return
        # 1. refuse new connections and commands; a bootstrap in progress stops (its
        #    marker makes the next start resume it)
        self.lifecycle.stopping = True
        if self._bootstrapping is not None and not self._bootstrapping.done():
            self._bootstrapping.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._bootstrapping
        self.lifecycle.ready = False
        self.events.emit("info", "instance", "stopping", clients=len(self.clients.sessions))
        # 2. the on-shutdown actions, while clients are still connected (bounded)
        await self.actions.shutdown()
        # 3. let persisted acks for everything already appended go out
        if self.txlog is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(
                    self.txlog.wait_durable(self.txlog.last_seq), _DRAIN_DURABLE_TIMEOUT
                )
        # 4. close every client after what it has buffered
        await self.clients.close_all()
        # 5. tell the replication peers this instance stops (before the web server drops
        #    their connections), and save the positions
        if self.replication is not None:
            with contextlib.suppress(Exception):
                await self.replication.stop()

    async def stop(self) -> None:
        """Shut down in order: 1. clients and replication links, 2. actions, 3. SOW queries
        and expirations, 4. sampler, 5. transaction log, 6. SOW files, 7. event log."""
        # 1. clients: drain outbound and close with "shutting down"; replication links end;
        #    no more password checks, no more expiry watch, nothing left to watch for slow
        #    clients
        await self.drain()
        if self.repairer is not None:
            await self.repairer.stop()
        for task in list(self._refolds):  # a restart reads the records they were taking in
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.auth.pool.close()
        if self.tls is not None:
            await self.tls.stop()
        await self.stalls.stop()
        # 2. actions: no more triggers; runs in progress finish (bounded), are recorded
        await self.actions.stop()
        # 3. SOW and queues: no more query streams, expirations or lease timers (they
        #    append to the log)
        await self.sow.close()
        await self.queues.close()
        if self.delayed is not None:
            await self.delayed.close()
        #    event topics: what the drain told of (clients leaving) goes out, then nothing
        if self.event_topics is not None:
            await self.event_topics.close()
        self.happenings.close()
        # 4. statistics sampler: last sample, close the database; no more alert rules
        await self.alert_rules.stop()
        self.operations.sampler = None
        if self._sampler is not None:
            with contextlib.suppress(Exception):
                await self._sampler.stop()
        # 5. transaction log: final group commit and fsync
        if self.txlog is not None:
            await self.txlog.close()
        # 6. SOW files: write what the last commit covered, close them
        await self.sow.close_files()
        self.events.emit("info", "instance", "stopped", name=self.config.name)
        # 7. event log: flush its file
        self.events.close()

    # -- connections ---------------------------------------------------------------------

    def transport_accepting(self, name: str) -> bool:
        """Whether the transport takes new connections now."""
        return self.clients.transport_accepting(name)

    def connect(
        self,
        transport: Transport,
        transport_name: str = "websocket-json",
        peer: Peer | None = None,
    ) -> Session:
        """A new client connection; the caller feeds it frames and awaits its close.

        ``peer`` is what the transport knows of the far end (address, TLS, a verified
        client certificate); without it the address is read from ``transport.remote``.
        """
        session = self.clients.connect(transport, transport_name, peer)
        session.handler = Dispatcher(
            session, self.pipeline, self.commands, self.lifecycle, self.events, self.clock
        )
        session.start()
        return session

    # -- helpers -------------------------------------------------------------------------

    def _records(self, topic: str) -> bool:
        """Whether the transaction log records ``topic`` (a replicated queue's name: its
        acks and transfers from other instances are recorded on it)."""
        return self.txlog is not None and (
            self.subscriptions.records(topic) or self.queues.stage.takes_events(topic)
        )

    @property
    def _journal_disk(self) -> Callable[[], FilesystemUsage] | None:
        """The transaction log's file system now (blocking), for ``disk_free`` rules."""
        txlog = self.config.transaction_log
        if txlog is None:
            return None
        directory = txlog.journal_directory
        return lambda: filesystem_usage(directory)

    def _txlog_event(self, event: str, fields: dict[str, object]) -> None:
        self.events.emit(_TXLOG_LEVELS.get(event, "info"), "txlog", event, **fields)
        if event == "journal_fenced" and self.repairer is not None:
            # damage found while running (the scrub, a read): ask the peers now, not at
            # the repair loop's next wake
            self.repairer.request()
