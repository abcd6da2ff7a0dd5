"""Replication of an instance: its destinations, the links from its sources, the horizon.

:class:`Replication` is what the engine builds when the configuration has ``<Replication>``
or an ``amps-replication`` transport (server/engine.py), and what the admin surface reads
and acts on (server/operations.py). It owns:

- one :class:`~spool.server.replication.outbound.DestinationLink` per destination, started with
  the instance and stopped with it;
- the inbound links accepted on ``/replication`` (web/replication.py hands each new
  connection's first bytes to :meth:`Replication.open`, which tells a link from a
  bootstrap request), by source name: the same instance (its identity) connecting again
  replaces its previous link, another instance with that Name is refused
  (:meth:`check_identity`); and the links destinations' peers run back over the
  connections this instance dialed (one connection per pair: docs/replication.md
  "Passive destinations");
- the :class:`~spool.server.replication.horizon.SyncHorizon` persisted acks, flush acks and
  ``fully_durable`` subscriptions wait on;
- the state kept between runs (server/replication/state.py), saved by a once-a-second tick
  that also samples each link's send rate;
- the links' history (server/replication/history.py);
- what must be unique in a fabric: the client names a logon asks the linked instances
  about (server/replication/clientnames.py), the publishers found sharing an identity on
  the stream (server/replication/collisions.py), the conflicts list and its alerts;
- the fabric view the route trace reads (server/replication/fabricview.py, topology.py).

Admin actions: :meth:`downgrade` (releases at once the acks that waited for it, unless it
would go below ``Tuning/MinimumSyncDestinations``), :meth:`upgrade` (takes effect once the
destination has acknowledged everything logged when it was asked), :meth:`reconnect`.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Final, TypedDict

from spool.server.alerts import Alert
from spool.server.auth import UserAuthenticator
from spool.server.clock import Clock
from spool.server.config import Config, DestinationConfig, UserConfig
from spool.server.happenings import Happenings
from spool.server.lifecycle import Lifecycle
from spool.server.logons import LogonGuard
from spool.server.peer import Peer
from spool.server.ports import AckValue, LinkHappening
from spool.server.publishing import PublishPipeline
from spool.server.replication import state as state_file
from spool.server.replication.bootsource import BootstrapBusy, BootstrapSource, SourceContext
from spool.server.replication.clientnames import ClientNames
from spool.server.replication.collisions import CollisionWatch
from spool.server.replication.conflicts import ConflictInfo, Conflicts
from spool.server.replication.errors import (
    DestinationNotFound,
    LinkReplaced,
    NameConflict,
    NotAccepting,
    PeerShuttingDown,
)
from spool.server.replication.fabricview import FabricKnowledge, PeerLink
from spool.server.replication.frames import (
    Claim,
    Claimed,
    FabricEntry,
    Hello,
    Message,
    MessageType,
    PeerMessage,
    first_type,
)
from spool.server.replication.history import LinkEvent, LinkHistory
from spool.server.replication.horizon import SyncHorizon
from spool.server.replication.inbound import InboundContext, InboundLink
from spool.server.replication.outbound import DestinationLink, LinkContext
from spool.server.replication.state import ReplicationState
from spool.server.replication.syncstate import check_downgrade
from spool.server.replication.topology import Drops, DropsInfo, RouteTrace, drops_of, route_trace
from spool.server.replication.transport import (
    Connector,
    LinkTransport,
    SharedTransport,
    connect_websocket,
)
from spool.server.replication.validation import parse_summary, summarize
from spool.server.sow.memory import MemoryStore
from spool.server.stats.snapshot import LinkCounters
from spool.server.stats.source import EventSink
from spool.server.stats.writer import LinkSampleRow
from spool.server.txlog import TransactionLog

__all__ = ["DestinationInfo", "InboundInfo", "Replication", "ReplicationInfo"]

#: seconds between state saves and rate samples
TICK: Final = 1.0
#: seconds of samples a link's rate is computed over
RATE_WINDOW: Final = 5.0


class EventInfo(TypedDict):
    time: float
    event: str
    detail: str


class DestinationInfo(TypedDict):
    """A destination as ``GET /api/replication`` shows it (docs/admin-api.md)."""

    name: str
    group: str
    configured_sync_type: str
    effective_sync_type: str
    connected: bool
    status: str
    address: str | None
    addresses: list[str]
    passive: bool
    via: str | None
    incoming_from: str | None
    remote: str | None
    connected_since: float | None
    last_acked_position: int
    messages_behind: int
    seconds_behind: float
    msgs_per_sec_out: float
    msgs_out: int
    bytes_out: int
    disconnects: int
    passthrough: list[str]
    topics: list[str]
    drops: DropsInfo
    compression: str | None
    tls: bool
    client_certificate: bool
    last_error: str | None
    validation_failures: list[str]
    events: list[EventInfo]


class InboundInfo(TypedDict):
    """A source replicating to this instance."""

    name: str
    group: str
    sync_type: str | None
    connected: bool
    status: str
    address: str
    user: str | None
    tls: str | None
    certificate_subject: str | None
    connected_since: float
    last_acked_position: int
    received_position: int
    source_position: int
    messages_behind: int
    msgs_per_sec_in: float
    msgs_in: int
    bytes_in: int
    last_error: str | None
    events: list[EventInfo]


class ReplicationInfo(TypedDict):
    name: str
    group: str
    instance_id: str
    minimum_sync_destinations: int
    horizon: int
    durable_seq: int
    destinations: list[DestinationInfo]
    incoming: list[InboundInfo]
    conflicts: list[ConflictInfo]
    identity_checks: dict[str, int]


class _Rate:
    """Messages per second over the last few ticks."""

    def __init__(self) -> None:
        self._samples: deque[tuple[float, int]] = deque()
        self.value = 0.0

    def sample(self, now: float, count: int) -> None:
        samples = self._samples
        samples.append((now, count))
        while samples and now - samples[0][0] > RATE_WINDOW:
            samples.popleft()
        t0, c0 = samples[0]
        self.value = (count - c0) / (now - t0) if now > t0 and count >= c0 else 0.0


class Replication:
    """The replication side of one instance. Owned by the event loop.

    Args:
        config: the instance configuration.
        txlog: its transaction log.
        pipeline: its publish pipeline (inbound links record through it).
        auth: users and entitlements (inbound links authenticate against it).
        lifecycle: ready / stopping (inbound links are refused while not ready).
        clock: time.
        events: the event log.
        horizon: the sync horizon the instance's persisted acks wait on (built before the
            publish pipeline; the destinations join it here).
        connector: how destinations are dialed (tests pass an in-memory one).
        logons: the instance's logon throttle and counters (inbound links' password
            logons go through it, path ``replication``).
        rng: the dialers' jitter.
        happenings: told of each link event (server/happenings.py).
    """

    def __init__(
        self,
        config: Config,
        txlog: TransactionLog,
        pipeline: PublishPipeline,
        auth: UserAuthenticator,
        lifecycle: Lifecycle,
        clock: Clock,
        events: EventSink,
        horizon: SyncHorizon,
        *,
        connector: Connector = connect_websocket,
        rng: random.Random | None = None,
        logons: LogonGuard | None = None,
        happenings: Happenings | None = None,
    ) -> None:
        self.config = config
        self._happenings = happenings
        self._logons = logons
        self._txlog = txlog
        self._pipeline = pipeline
        self._auth = auth
        self._lifecycle = lifecycle
        self._clock = clock
        self._events = events
        self._connector = connector
        self._rng = rng if rng is not None else random.Random()
        self.horizon = horizon
        self.history = LinkHistory()
        #: names found in use twice (server/replication/conflicts.py)
        self.conflicts = Conflicts()
        #: every instance's routing configuration, as far as known (set at start)
        self.view: FabricKnowledge | None = None
        self._started_us = int(clock.time() * 1e6)
        #: publishers found sharing an identity on the replicated stream (the engine
        #: hands it to the publish pipeline)
        self.collisions = CollisionWatch(
            config.name, config.group, txlog, clock, events, self.conflicts
        )
        #: client names asked of the linked instances before a logon is granted
        self.client_names = ClientNames(
            config.name, clock, events, self._peer_links, self._logon_refused
        )
        self.summary = summarize(config)
        own = parse_summary(self.summary)
        #: what each destination does not get (server/replication/topology.py)
        self.drops: dict[str, Drops] = {d.name: drops_of(own, d) for d in own.destinations}
        self.destinations: dict[str, DestinationLink] = {}
        self.inbound: dict[str, InboundLink] = {}
        #: told of each source whose link sent everything the source held when its
        #: stream began (the queues' resync hold, server/queues/hold.py)
        self.on_resynced: Callable[[str], None] | None = None
        self._accepted: set[InboundLink] = set()
        #: the links destinations' peers run back over the connections they dialed
        self._reverse: dict[DestinationLink, InboundLink] = {}
        self._state = ReplicationState.new()
        self._state_path = state_file.state_path(config.data_directory, config.name)
        self._dirty = False
        self._rates: dict[str, _Rate] = {}
        self._tick: asyncio.Task[None] | None = None
        self._stopped = False
        replication = config.replication
        self._ack_interval = replication.ack_interval if replication is not None else 0.001
        self._minimum = config.tuning.minimum_sync_destinations
        #: told (with what happened) whenever failing over from here may have become
        #: safer or less safe: the client registry's failover notices
        self.failover_listeners: list[Callable[[str], None]] = []

    # -- life ---------------------------------------------------------------------------

    async def start(self) -> None:
        """After the log is open: positions, pins, the links, the warning."""
        saved, problem = await asyncio.to_thread(state_file.load, self._state_path)
        if problem is not None:
            self._events.emit("warning", "replication", "state_unreadable", detail=problem)
        txlog = self._txlog
        if saved is None or txlog.last_seq == 0:
            # a log that starts over is a new log to the instances that replicate to it
            # (the instance stays itself: its identity is kept)
            self._state = ReplicationState.new(saved.instance_id if saved else None)
            self._dirty = True
        else:
            self._state = saved
        self.view = FabricKnowledge(
            FabricEntry(self.config.name, self.config.group, self._state.instance_id,
                        self._started_us, self.summary)
        )  # fmt: skip
        ctx = LinkContext(
            config=self.config,
            txlog=txlog,
            clock=self._clock,
            events=self._events,
            connector=self._connector,
            rng=self._rng,
            summary=self.summary,
            changed=self._changed,
            settled_moved=self.horizon.recompute,
            record=self._record,
            failover_changed=self._failover_changed,
            instance_id=self.instance_id,
            identity=self.check_identity,
            peers=self,
            link_down=self.client_names.link_down,
            origins=self.collisions.origins,
            reverse=self._reverse_messages,
            reverse_gone=self._reverse_gone,
        )
        # a fence filled or released: the sources told it was held may resync
        txlog.add_fill_listener(self._fences_gone)
        for dest in self._destination_configs():
            link = DestinationLink(dest, ctx, self._state.destinations.get(dest.name))
            self.destinations[dest.name] = link
            self.horizon.add(link)
        for link in self.destinations.values():
            link.start()
        for name, drops in self.drops.items():
            if drops.anything:
                self._events.emit(
                    "warning", "replication", "destination_drops", destination=name,
                    detail=f"{name!r} does not get: " + "; ".join(drops.sentences()),
                )  # fmt: skip
        if not any(d.sync for d in self._destination_configs()):
            self._events.emit(
                "warning", "replication", "no_sync_destination",
                detail="this instance accepts publishes with no sync destination: a "
                "persisted ack means on this instance's disk only, so it is a single point "
                "of loss until a message reaches another instance",
            )  # fmt: skip
        self.horizon.recompute()
        self._tick = asyncio.get_running_loop().create_task(self._ticker(), name="spool-repl-tick")

    async def stop(self) -> None:
        """Close every link (peers are told the instance stops) and save the state.
        Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        tick, self._tick = self._tick, None
        if tick is not None:
            tick.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await tick
        for link in list(self._accepted):
            link.refuse(PeerShuttingDown(f"{self.config.name!r} is stopping"))
        await asyncio.gather(*(d.stop() for d in self.destinations.values()))
        for link in list(self._accepted):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(link.wait_closed(), 1.0)
        await self.collisions.stop()
        await self._save()

    def _destination_configs(self) -> tuple[DestinationConfig, ...]:
        replication = self.config.replication
        return replication.destinations if replication is not None else ()

    async def _ticker(self) -> None:
        while True:
            await self._clock.sleep(TICK)
            now = self._clock.monotonic()
            for name, link in self.destinations.items():
                self._rate(f"out/{name}").sample(now, link.msgs_out)
            for name, inbound in self.inbound.items():
                self._rate(f"in/{name}").sample(now, inbound.msgs_in)
            if self._dirty:
                await self._save()

    def _rate(self, key: str) -> _Rate:
        rate = self._rates.get(key)
        if rate is None:
            rate = self._rates[key] = _Rate()
        return rate

    def _changed(self) -> None:
        self._dirty = True

    async def _save(self) -> None:
        self._dirty = False
        for name, link in self.destinations.items():
            self._state.destinations[name] = link.saved()
        try:
            await asyncio.to_thread(state_file.save, self._state_path, self._state.encode())
        except OSError as exc:
            self._dirty = True
            self._events.emit("error", "replication", "state_not_saved", error=str(exc))

    # -- inbound ------------------------------------------------------------------------

    def accept(
        self,
        transport: LinkTransport,
        peer: Peer | None = None,
        *,
        channel: int = 0,
        lock: asyncio.Lock | None = None,
    ) -> InboundLink:
        """A websocket opened on ``/replication``: a new inbound link (the caller pushes
        its bytes into it and calls ``lost`` when it goes). ``peer``: what the listener
        knows of the far end (address, TLS, a verified client certificate's subject).

        ``channel`` 1: the link a destination's peer runs back over the connection this
        instance dialed to it (``transport`` that connection, shared, and ``lock`` its
        writers' lock); accepted without an ``amps-replication`` transport, since this
        instance dialed."""
        replication_transport = self.config.replication_transport

        def accepting() -> bool:
            name = replication_transport.name if replication_transport is not None else ""
            ready = self._lifecycle.ready and not self._lifecycle.stopping
            return ready and (bool(name) or channel == 1)

        ctx = InboundContext(
            config=self.config,
            txlog=self._txlog,
            pipeline=self._pipeline,
            auth=self._auth,
            clock=self._clock,
            events=self._events,
            summary=self.summary,
            log_id=lambda: self._state.log_id,
            accepting=accepting,
            register=self._register,
            unregister=self._unregister,
            record=self._record,
            ack_interval=self._ack_interval,
            logons=self._logons,
            instance_id=self.instance_id,
            identity=self.check_identity,
            peers=self,
            origins=self.collisions.origins,
            welcomed=self._offer_return,
            resynced=self._resynced,
        )
        link = InboundLink(
            ctx, transport, peer if peer is not None else Peer.parse(transport.remote),
            channel=channel, lock=lock,
        )  # fmt: skip
        self._accepted.add(link)
        return link

    # -- one connection, both ways ---------------------------------------------------------

    def _offer_return(self, link: InboundLink) -> None:
        """A source was welcomed: a destination of this instance for it may run back over
        its connection (docs/replication.md "Passive destinations")."""
        if link.channel == 0:
            for dest in self.destinations.values():
                dest.offer(link)

    async def _reverse_messages(
        self,
        dest: DestinationLink,
        messages: list[Message],
        transport: LinkTransport,
        lock: asyncio.Lock,
    ) -> None:
        """Messages of the second conversation of the connection ``dest`` dialed: the
        peer's link back to this instance. A hello starts a new one (its inbound link
        writes over the same connection)."""
        batch: list[Message] = []
        for message in messages:
            if isinstance(message, Hello):
                if batch:
                    await self._feed_reverse(dest, batch)
                    batch = []
                old = self._reverse.pop(dest, None)
                if old is not None:
                    old.lost()
                self._reverse[dest] = self.accept(
                    SharedTransport(transport), Peer.parse(transport.remote), channel=1,
                    lock=lock,
                )  # fmt: skip
            batch.append(message)
        if batch:
            await self._feed_reverse(dest, batch)

    async def _feed_reverse(self, dest: DestinationLink, messages: list[Message]) -> None:
        link = self._reverse.get(dest)
        if link is not None:  # none: what remains of an ended conversation (moot)
            await link.receive_messages(messages)

    def _reverse_gone(self, dest: DestinationLink, detail: str | None) -> None:
        link = self._reverse.pop(dest, None)
        if link is not None:
            link.lost(detail or "connection lost")

    def open(
        self,
        first: bytes,
        transport: LinkTransport,
        peer: Peer,
        sow_stores: Callable[[], Iterable[MemoryStore]],
        busy: Callable[[str], BootstrapBusy | None] | None,
    ) -> InboundLink | BootstrapSource:
        """A connection on ``/replication`` whose first bytes arrived (``first``: at
        least a whole message prefix, :func:`~spool.server.replication.frames.first_type`): the
        one place that tells its conversations apart, for the web endpoint
        (web/replication.py) and the tests' in-memory fabric alike. A ``bootstrap`` request
        is served even while this instance bootstraps itself (``busy`` answers it then;
        None: this instance has no bootstrap), since that is how two instances
        bootstrapping from each other find out; a ``repair`` request even while it starts
        (it may be repairing its own log, from the instance asking); anything else opens a
        link, once this instance is ready. The caller then feeds ``first`` and what follows to what it
        gets.

        Raises:
            NotAccepting: a link while this instance is not ready (bootstrapping).
        """
        if first_type(first) in (MessageType.BOOTSTRAP, MessageType.REPAIR):
            return self.bootstrap_source(transport, peer, sow_stores, busy or _not_busy)
        if not self._lifecycle.ready:
            raise NotAccepting(f"{self.config.name!r} is not accepting replication yet")
        return self.accept(transport, peer)

    def bootstrap_source(
        self,
        transport: LinkTransport,
        peer: Peer,
        sow_stores: Callable[[], Iterable[MemoryStore]],
        busy: Callable[[str], BootstrapBusy | None],
    ) -> BootstrapSource:
        """A websocket on ``/replication`` whose first message is a bootstrap request:
        serve that copy (server/replication/bootsource.py). ``busy``: what to answer while
        this instance bootstraps itself (None: it does not)."""
        ctx = SourceContext(
            config=self.config,
            txlog=self._txlog,
            auth=self._auth,
            logons=self._logons,
            clock=self._clock,
            events=self._events,
            log_id=lambda: self._state.log_id,
            sow_stores=sow_stores,
            busy=busy,
        )
        return BootstrapSource(ctx, transport, peer)

    # -- identities ---------------------------------------------------------------------

    def instance_id(self) -> str:
        """This instance's identity (kept in its replication state file)."""
        return self._state.instance_id

    def check_identity(self, name: str, instance_id: str, link: object, where: str) -> None:
        """A peer introduced itself as ``name`` with ``instance_id`` on ``link`` (at
        ``where``): refuse it when another live link is with an instance of that Name
        and another identity (two instances share a Name: loop protection by name would
        skip one of them). A link from the same instance again is no conflict (a
        reconnect replaces the old one).

        Raises:
            NameConflict: the conflict (logged as ``replication/duplicate_instance_name``
                and kept for ``GET /api/replication`` and the dashboard's alert).
        """
        if not instance_id:
            return
        other = None
        for dest in self.destinations.values():
            if (
                dest is not link
                and dest.connected
                and dest.remote_name == name
                and dest.remote_instance_id not in ("", instance_id)
            ):
                other = f"this instance's destination {dest.name!r} at {dest.where}"
        for inbound in self.inbound.values():
            if (
                inbound is not link
                and inbound.source == name
                and inbound.state != "closed"
                and inbound.instance_id not in ("", instance_id)
            ):
                other = f"the link from {inbound.remote}"
        if other is None:
            return
        detail = (
            f"an instance called {name!r} at {where} is not the {name!r} already linked "
            f"here ({other}): two instances share the Name, so loop protection by name "
            "would skip one of them; give each instance its own <Name>"
        )
        self._events.emit("error", "replication", "duplicate_instance_name", instance=name,
                          refused=where, linked=other, detail=detail)  # fmt: skip
        self.conflicts.report("instance_name", name, detail, self._clock.time())
        raise NameConflict(detail)

    # -- the fabric view -----------------------------------------------------------------

    def view_message(self) -> tuple[int, PeerMessage]:
        """What links send their peers: the fabric view (server/replication/fabricview.py)."""
        view = self.view
        assert view is not None, "the view is built at start, before any link"
        return view.changes, view.message()

    def peer_received(self, message: PeerMessage, link: PeerLink) -> None:
        """A peer's message: a view is merged (a changed view goes to every link), a
        claim of a client name answered, an answer handed to the logon waiting for it."""
        if isinstance(message, Claim):
            link.send_peer(self.client_names.answer(message))
        elif isinstance(message, Claimed):
            self.client_names.answered(message, link)
        elif (view := self.view) is not None and view.merge(message.entries):
            for dest in self.destinations.values():
                dest.share_view()
            for inbound in list(self.inbound.values()):
                inbound.share_view()

    def _peer_links(self) -> list[PeerLink]:
        """The live links, to ask the linked instances about a client name."""
        links: list[PeerLink] = [d for d in self.destinations.values() if d.streaming]
        links.extend(i for i in self.inbound.values() if i.welcomed)
        return links

    def route(self, topic: str) -> RouteTrace:
        """Where a message of ``topic`` published here goes (``GET /api/fabric/route``):
        the routing rules applied over the fabric view, this instance's own links with
        their effective sync type, the instance that answers each, and whether they are
        connected now."""
        me = self.config.name
        view = self.view
        summaries = view.summaries() if view is not None else {me: parse_summary(self.summary)}
        dests = self.destinations.values()
        return route_trace(
            summaries, me, topic,
            sync_types={(me, d.name): d.sync.effective for d in dests},
            remote_names={(me, d.name): d.remote_name for d in dests if d.remote_log_id},
            connected={(me, d.name): d.connected for d in dests},
        )  # fmt: skip

    def first_hops(self, topic: str) -> list[str]:
        """The instances a message of ``topic`` published here goes to directly: the
        instances of :meth:`route` one hop away, from this instance's own links alone
        (no trace over the fabric view), cheap enough to ask for every topic of a list."""
        log = self.config.transaction_log
        if log is None or not log.records(topic):
            return []
        return sorted({
            d.remote_name if d.remote_log_id else d.name
            for d in self.destinations.values()
            if d.route.blocks_for(topic) is not None
        })  # fmt: skip

    def _logon_refused(self, name: str, why: str) -> None:
        """A logon here was refused: the name is held at another instance."""
        detail = f"a logon here was refused: {why}"
        self.conflicts.report("client_name", name, detail, self._clock.time())

    def alerts(self) -> list[Alert]:
        """The conditions every dashboard page shows (server/alerts.py)."""
        return self.conflicts.alerts(self._clock.time())

    def _fences_gone(self, first_seq: int, last_seq: int) -> None:
        """A fence was filled or released: each source told its intervals were held here
        resyncs when it withheld something the log still lacks
        (:meth:`InboundLink.resync_if_withheld`)."""
        for link in list(self.inbound.values()):
            if link.resync_if_withheld():
                self._events.emit(
                    "info", "replication", "resync_after_fence", source=link.source,
                    first_seq=first_seq, last_seq=last_seq,
                )  # fmt: skip

    def _resynced(self, source: str) -> None:
        if self.on_resynced is not None:
            self.on_resynced(source)

    def _register(self, link: InboundLink) -> None:
        old = self.inbound.get(link.source)
        if old is not None and old is not link:
            old.refuse(LinkReplaced(f"a newer link from {link.source!r} took over"))
        self.inbound[link.source] = link

    def _unregister(self, link: InboundLink) -> None:
        self.client_names.link_down(link)
        self._accepted.discard(link)
        if self.inbound.get(link.source) is link:
            del self.inbound[link.source]

    # -- admin --------------------------------------------------------------------------

    def _destination(self, name: str) -> DestinationLink:
        link = self.destinations.get(name)
        if link is None:
            raise DestinationNotFound(name)
        return link

    def downgrade(self, name: str) -> None:
        """Persisted acks stop waiting for ``name`` (at once).

        Raises:
            DestinationNotFound: no such destination.
            SyncChangeRefused: configured async, already async, or below the floor.
        """
        link = self._destination(name)
        check_downgrade((d.sync for d in self.destinations.values()), name, self._minimum)
        link.sync.downgrade()
        self._sync_event(link, "downgraded", "persisted acks no longer wait for it")
        # clients hear it before the acks this releases (docs/protocol.md)
        self._failover_changed(f"destination {name!r} downgraded: persisted acks no longer "
                               "wait for it")  # fmt: skip
        self.horizon.recompute()

    def upgrade(self, name: str) -> None:
        """Persisted acks wait for ``name`` again once it has caught up.

        Raises:
            DestinationNotFound: no such destination.
            SyncChangeRefused: configured async, already sync, or already upgrading.
        """
        link = self._destination(name)
        target = self._txlog.durable_seq
        link.sync.upgrade(target)
        self._sync_event(link, "upgrading", f"becomes sync once it has acknowledged up to {target}")
        if link.connected and link.sync.caught_up(link.settled_for_upgrade()):
            self._sync_event(link, "upgraded", "caught up: persisted acks wait for it again")
            self._failover_changed(f"destination {name!r} upgraded: it is sync again")
        self.horizon.recompute()

    def reconnect(self, name: str) -> None:
        """Drop the link and dial again from the top of its addresses.

        Raises:
            DestinationNotFound: no such destination.
        """
        link = self._destination(name)
        link.reconnect()
        self._sync_event(link, "reconnect", "requested by an operator")

    def _sync_event(self, link: DestinationLink, event: str, detail: str) -> None:
        self._events.emit("info", "replication", f"destination_{event}", destination=link.name,
                          detail=detail)  # fmt: skip
        self._record(LinkEvent(self._clock.time(), link.name, "out", event, detail))
        link.announce_sync()

    def _record(self, event: LinkEvent) -> None:
        """A link event: kept in the history, and told to the happenings bus with the
        link's state after it."""
        self.history.record(event)
        happenings = self._happenings
        if happenings is None or not happenings.links:
            return
        if event.direction == "out":
            out = self.destinations.get(event.link)
            remote = out.remote_name if out is not None else None
            connected = out is not None and out.connected
            sync_type: str | None = out.sync.effective if out is not None else None
        else:
            inbound = self.inbound.get(event.link)
            remote = event.link
            connected = event.event not in ("disconnected", "refused")
            sync_type = inbound.sync_type if inbound is not None else None
        happenings.emit(LinkHappening(
            event=event.event, time_us=int(event.time * 1_000_000),
            direction="out" if event.direction == "out" else "in", link=event.link,
            remote=remote, connected=connected, sync_type=sync_type, detail=event.detail,
        ))  # fmt: skip

    def info(self) -> ReplicationInfo:
        """Everything ``GET /api/replication`` shows."""
        return {
            "name": self.config.name,
            "group": self.config.group,
            "instance_id": self._state.instance_id,
            "minimum_sync_destinations": self._minimum,
            "horizon": self.horizon.seq,
            "durable_seq": self._txlog.durable_seq,
            "destinations": [self._destination_info(d) for d in self.destinations.values()],
            "incoming": [self._inbound_info(i) for i in self.inbound.values()],
            "conflicts": self.conflicts.all(),
            "identity_checks": {
                "checked": self.collisions.checked,
                "collisions": self.collisions.collisions,
                "unchecked": self.collisions.unchecked,
            },
        }

    def link_samples(self) -> list[LinkSampleRow]:
        """Every link's state now, for the per-link history (the sampler's tick)."""
        rows: list[LinkSampleRow] = []
        for d in self.destinations.values():
            rows.append(
                ("out", d.name, d.connected, d.sync.effective, d.messages_behind(),
                 round(d.seconds_behind(), 3), round(self._rate(f"out/{d.name}").value, 1),
                 d.acked)
            )  # fmt: skip
        for name, i in self.inbound.items():
            rows.append(
                ("in", name, i.state == "streaming", None,
                 max(0, i.source_last - i.upto), None,
                 round(self._rate(f"in/{name}").value, 1), i.acked)
            )  # fmt: skip
        return rows

    def _events_of(self, direction: str, name: str) -> list[EventInfo]:
        return [
            {"time": e.time, "event": e.event, "detail": e.detail}
            for e in self.history.recent(direction, name)
        ]

    def _destination_info(self, link: DestinationLink) -> DestinationInfo:
        cfg = link.config
        address = f"{link.address[0]}:{link.address[1]}" if link.address is not None else None
        incoming = link.via == "incoming" and link.connected
        return {
            "name": link.name,
            "group": cfg.group,
            "configured_sync_type": link.sync.configured,
            "effective_sync_type": link.sync.effective,
            "connected": link.connected,
            "status": link.status,
            "address": address if link.connected and not incoming else None,
            "addresses": [f"{h}:{p}" for h, p in cfg.transport.addresses],
            "passive": cfg.passive,
            "via": link.via if link.connected else None,
            "incoming_from": link.where if incoming else None,
            "remote": link.remote_name if link.remote_log_id else None,
            "connected_since": link.connected_since,
            "last_acked_position": link.acked,
            "messages_behind": link.messages_behind(),
            "seconds_behind": round(link.seconds_behind(), 3),
            "msgs_per_sec_out": round(self._rate(f"out/{link.name}").value, 1),
            "msgs_out": link.msgs_out,
            "bytes_out": link.bytes_out,
            "disconnects": link.disconnects,
            "passthrough": list(cfg.passthrough),
            "topics": [t.name for t in cfg.topics],
            "drops": self.drops[link.name].info(),
            "compression": cfg.transport.compression,
            "tls": cfg.transport.tls,
            "client_certificate": cfg.transport.certificate is not None,
            "last_error": link.last_error,
            "validation_failures": list(link.validation_failures),
            "events": self._events_of("out", link.name),
        }

    def _inbound_info(self, link: InboundLink) -> InboundInfo:
        return {
            "name": link.source,
            "group": link.source_group,
            "sync_type": link.sync_type,
            "connected": link.state != "closed",
            "status": link.state,
            "address": link.remote,
            "user": link.user.name if link.user is not None else None,
            "tls": link.peer.tls_version,
            "certificate_subject": link.peer.client_subject,
            "connected_since": link.connected_since,
            "last_acked_position": link.acked,
            "received_position": link.upto,
            "source_position": link.source_last,
            "messages_behind": max(0, link.source_last - link.upto),
            "msgs_per_sec_in": round(self._rate(f"in/{link.source}").value, 1),
            "msgs_in": link.msgs_in,
            "bytes_in": link.bytes_in,
            "last_error": link.last_error,
            "events": self._events_of("in", link.source),
        }

    def counters(self) -> dict[str, LinkCounters]:
        """Per link, for the metrics snapshot."""
        out: dict[str, LinkCounters] = {}
        for name, link in self.destinations.items():
            out[f"out/{name}"] = {
                "direction": "out",
                "connected": link.connected,
                "sync": link.sync.holds_acks,
                "msgs": link.msgs_out,
                "bytes": link.bytes_out,
                "acked": link.acked,
                "messages_behind": link.messages_behind(),
                "seconds_behind": link.seconds_behind(),
                "disconnects": link.disconnects,
            }
        for name, inbound in self.inbound.items():
            out[f"in/{name}"] = {
                "direction": "in",
                "connected": inbound.state != "closed",
                "sync": False,
                "msgs": inbound.msgs_in,
                "bytes": inbound.bytes_in,
                "acked": inbound.acked,
                "messages_behind": max(0, inbound.source_last - inbound.upto),
                "seconds_behind": 0.0,
                "disconnects": 0,
            }
        return out

    def drain_history(self) -> list[LinkEvent]:
        """The link events not yet written to the stats database."""
        return self.history.drain()

    # -- the logon ack ------------------------------------------------------------------

    def failover_fields(self, user: UserConfig | None) -> Mapping[str, AckValue]:
        """What a client's logon ack says about failing over from this instance.

        ``failover``: ``safe`` when every destination that takes the client's topics holds
        persisted acks now (effective sync type sync) and there is at least one, else
        ``unsafe``; ``async_links``: those that do not (configured async, downgraded or
        still upgrading); ``down_links``: those not connected now (a sync one holds the
        acks until it is back, so failover stays safe; an async one falls behind). The
        client's topics are what its user may read or write; a pattern topic block is
        assumed to take some of them (docs/replication.md).
        """
        concerned = [d for d in self.destinations.values() if self._concerns(d.config, user)]
        not_sync = [d.name for d in concerned if not d.sync.holds_acks]
        down = [d.name for d in concerned if not d.connected]
        safe = bool(concerned) and not not_sync
        return {
            "failover": "safe" if safe else "unsafe",
            "async_links": ",".join(not_sync),
            "down_links": ",".join(down),
        }

    def _failover_changed(self, detail: str) -> None:
        for listener in self.failover_listeners:
            listener(detail)

    def _concerns(self, dest: DestinationConfig, user: UserConfig | None) -> bool:
        auth = self._auth
        if not auth.enabled or user is None:
            return True
        for topic in dest.topics:
            if topic.is_regex:
                return True
            if auth.can_write(user, topic.name) or auth.can_read(user, topic.name):
                return True
        return False


def _not_busy(_requester: str) -> BootstrapBusy | None:
    """What an instance without a bootstrap of its own answers a requester: not busy."""
    return None
