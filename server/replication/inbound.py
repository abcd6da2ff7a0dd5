"""A link from a source: authenticate it, check it, record what it sends, ack back.

The web layer (web/replication.py) accepts a websocket on ``/replication`` and pushes its
bytes into :meth:`InboundLink.receive`. On the hello the link checks the protocol version,
that this instance is not stopping, the source's Name and expected Group, and its
credentials (with ``<Users>``, the user whose Write entitlements then apply to every
replicated record), and welcomes it with this instance's identity, holdings and
configuration summary. Each ``data`` batch is decompressed (in a thread) and published
through the instance's publish pipeline as runs, keeping each record's bookmark and
appending the source to its path (de-duplicated by bookmark); ``upto`` positions are
acknowledged once durable here, conflated. A refusal by the pipeline ends the link: the
source keeps the records and sends them again, so nothing is lost. One connection may
carry a link each way (``channel`` 0 or 1). See docs/replication.md "A link's life" and
"Passive destinations: one connection, both ways".
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import zstandard

from spool.server.auth import UserAuthenticator
from spool.server.clock import Clock
from spool.server.config import Config, UserConfig
from spool.server.logons import LogonGuard
from spool.server.peer import Peer
from spool.server.ports import Origin, PublishRun, Traffic
from spool.server.protocol.errors import NotEntitled, ProtocolFailure
from spool.server.publishing import PublishPipeline
from spool.server.replication.errors import (
    GroupMismatch,
    LinkRefused,
    NameConflict,
    NotAccepting,
    NotEntitledToReplicate,
    PeerShuttingDown,
    ProtocolRefusal,
    ReconnectRequested,
    RecordRefused,
    ReplicationProtocolError,
    VersionMismatch,
)
from spool.server.replication.fabricview import PeerExchange, share_view
from spool.server.replication.frames import (
    PROTOCOL_VERSION,
    Data,
    Hello,
    Holdings,
    Message,
    Origins,
    PeerMessage,
    Run,
    decode_runs,
)
from spool.server.replication.history import LinkEvent
from spool.server.replication.hops import format_hop
from spool.server.replication.linkauth import authenticate_peer
from spool.server.replication.protocol import (
    Carried,
    DataReceived,
    Event,
    HelloReceived,
    LinkClosed,
    LinkProtocol,
    PeerReceived,
    Side,
    State,
    StreamStarted,
    SyncNoticed,
)
from spool.server.replication.replies import FailureReplies
from spool.server.replication.transport import LinkLost, LinkTransport, LinkWriter, SharedTransport
from spool.server.stats.source import EventSink
from spool.server.txlog import RecordKind, TransactionLog
from spool.server.txlog.publishers.holdings import lacks_any, with_fenced

__all__ = ["InboundContext", "InboundLink"]

#: bytes of received batches waiting to be recorded before the link stops reading
BACKLOG_BYTES: Final = 8 << 20


@dataclass(slots=True)
class InboundContext:
    """What an inbound link needs from its instance."""

    config: Config
    txlog: TransactionLog
    pipeline: PublishPipeline
    auth: UserAuthenticator
    clock: Clock
    events: EventSink
    summary: dict[str, object]
    log_id: Callable[[], str]
    accepting: Callable[[], bool]
    register: Callable[[InboundLink], None]
    unregister: Callable[[InboundLink], None]
    record: Callable[[LinkEvent], None]
    ack_interval: float
    #: this instance's identity (the welcome carries it)
    instance_id: Callable[[], str]
    #: refuses (NameConflict) a source whose Name another live link's peer has, with
    #: another identity: (name, instance id, this link, where it is)
    identity: Callable[[str, str, object, str], None]
    #: the fabric view to send, and where the peer's messages go
    peers: PeerExchange
    #: where this instance's records of each publisher came from (the welcome says it)
    origins: Callable[[], Origins]
    #: a source was welcomed (a destination of this instance may run back over it)
    welcomed: Callable[[InboundLink], None]
    #: the source (by name) sent everything it held when the stream began, and all of
    #: it was recorded here (:attr:`InboundLink.resynced`)
    resynced: Callable[[str], None] = lambda _source: None
    logons: LogonGuard | None = None


class InboundLink:
    """One source replicating to this instance. Owned by the event loop.

    Args:
        ctx: the instance's parts.
        transport: the accepted websocket.

    Attributes:
        source, source_group: who the hello said it is.
        remote: the connection's address.
        state: the protocol's state name.
        connected_since: wall time of the connection.
        msgs_in, bytes_in: records and bytes received.
        upto: how far the source's log was sent (its seq).
        acked: the last position acknowledged to it.
        source_last: the source's durable seq when the stream began.
        last_error: why the link ended, once it has.
    """

    def __init__(
        self,
        ctx: InboundContext,
        transport: LinkTransport,
        peer: Peer,
        *,
        channel: int = 0,
        lock: asyncio.Lock | None = None,
    ) -> None:
        self._ctx = ctx
        self._transport = transport
        #: the far end as the listener saw it (address; TLS and a verified client subject)
        self.peer = peer
        #: 0: a connection the source dialed to this instance (it may carry a link of this
        #: instance back: :meth:`attach`); 1: the second conversation of a connection this
        #: instance dialed (the source runs its link back over it)
        self.channel = channel
        self.protocol = LinkProtocol(Side.DESTINATION, channel=channel, carries=channel == 0)
        self.write_lock = lock if lock is not None else asyncio.Lock()
        self._writer = LinkWriter(self.protocol.data_to_send, transport, self.write_lock)
        self._sink: Callable[[Message | None], None] | None = None
        #: why the connection went away (None: it has not), for a link back over it
        self.gone: str | None = None
        self.remote = transport.remote
        self.source = ""
        self.source_group = ""
        #: the source instance's identity, from its hello
        self.instance_id = ""
        self.user: UserConfig | None = None
        self.connected_since = ctx.clock.time()
        self.traffic = Traffic()
        self.upto = 0
        self.acked = 0
        self.source_last = 0
        #: every record the source held when the stream began was examined and what
        #: was for this instance recorded here (``upto`` reached ``source_last``)
        self.resynced = False
        #: the link's effective sync type as the source last told it (None: not yet)
        self.sync_type: str | None = None
        self.last_error: str | None = None
        #: the fences' intervals the welcome claimed as held (:meth:`resync_if_withheld`)
        self.claimed: list[tuple[int, int, int]] = []
        self._view_sent = 0
        self._hop = ""
        self._origin: Origin | None = None
        self._replies = FailureReplies()
        self._queue: deque[Data] = deque()
        self._queued_bytes = 0
        self._room = asyncio.Event()
        self._room.set()
        self._work = asyncio.Event()
        self._pending: deque[tuple[int, int]] = deque()  # (local target seq, upto)
        self._ackable = 0
        self._ack_wake = asyncio.Event()
        self._closed = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._decompressor = zstandard.ZstdDecompressor()
        ctx.txlog.add_durable_listener(self._durable)

    @property
    def state(self) -> str:
        return self.protocol.state.value

    @property
    def msgs_in(self) -> int:
        return self.traffic.msgs_in

    @property
    def bytes_in(self) -> int:
        return self.traffic.bytes_in

    # -- from the web layer ---------------------------------------------------------------

    async def receive(self, data: bytes) -> None:
        """Bytes from the source; waits while too much is waiting to be recorded."""
        self.traffic.bytes_in += len(data)
        self.protocol.receive_data(data)
        self._handle(self.protocol.events_received())
        self._writer.write_soon()
        if not self._room.is_set():
            await self._room.wait()

    async def receive_messages(self, messages: list[Message]) -> None:
        """Messages of this link read off a connection this instance dialed (its second
        conversation); waits like :meth:`receive`."""
        for message in messages:
            self.protocol.receive_message(message)
        self._handle(self.protocol.events_received())
        self._writer.write_soon()
        if not self._room.is_set():
            await self._room.wait()

    # -- a link of this instance back over this connection (ReturnConnection) ------------

    @property
    def tls(self) -> bool:
        return self.peer.tls_version is not None

    @property
    def carrying(self) -> bool:
        """Whether a link of this instance may run back over this connection now."""
        return self.channel == 0 and self.welcomed

    @property
    def pipe(self) -> LinkTransport:
        return SharedTransport(self._transport)

    def attach(self, sink: Callable[[Message | None], None]) -> None:
        self._sink = sink

    def detach(self, sink: Callable[[Message | None], None]) -> None:
        if self._sink is sink:
            self._sink = None

    def lost(self, detail: str = "connection lost") -> None:
        """The websocket went away (``detail``: why, when the endpoint knows)."""
        self.gone = detail
        self.protocol.connection_lost(LinkRefused(detail))
        self._handle(self.protocol.events_received())

    async def wait_closed(self) -> None:
        await self._closed.wait()

    @property
    def welcomed(self) -> bool:
        """Whether the source was welcomed and the link is not closed."""
        return self.protocol.state in (State.WELCOMED, State.STREAMING)

    @property
    def peer_name(self) -> str:
        """The instance at the other end (the source)."""
        return self.source

    def send_peer(self, message: PeerMessage) -> bool:
        """Send a peer message (server/replication/peerframes.py) once welcomed."""
        if not self.welcomed:
            return False
        self.protocol.send_peer(message)
        self._writer.write_soon()
        return True

    def share_view(self) -> None:
        """Send the fabric view when the source has not had the latest one (welcomed)."""
        self._view_sent = share_view(self._ctx.peers, self, self._view_sent)

    def resync_if_withheld(self) -> bool:
        """A fence this link's welcome claimed as held was filled or released: when the
        log lacks a sequence of what was claimed (an inexact fence's over-approximation,
        a released fence), the source withheld it from its resync, so the link ends and
        the source resyncs at once (docs/replication.md "Resync on connect"). Returns
        whether it did."""
        if not self.welcomed or not self.claimed:
            return False
        txlog = self._ctx.txlog
        if not lacks_any(with_fenced(txlog.publishers.holdings(), txlog.fences), self.claimed):
            return False
        self.claimed = []
        self.refuse(
            ReconnectRequested(
                "fenced records claimed as held here were repaired or released: "
                "resync what this instance still lacks"
            )
        )
        return True

    def refuse(self, error: LinkRefused) -> None:
        """End the link (an operator, the instance stopping, a newer link of the source)."""
        self.protocol.refuse(error)
        self._handle(self.protocol.events_received())
        self._writer.write_soon()

    # -- events -----------------------------------------------------------------------------

    def _handle(self, events: list[Event]) -> None:
        for event in events:
            if isinstance(event, HelloReceived):
                self._spawn(self._handshake(event.hello))
            elif isinstance(event, StreamStarted):
                self.source_last = event.stream.source_last
                self.upto = max(self.upto, event.stream.start - 1)
                self._check_resynced()
                self._spawn(self._apply_loop())
                self._spawn(self._ack_loop())
                self._event("streaming", f"resync from {event.stream.start} "
                            f"(source log at {event.stream.source_last})")  # fmt: skip
            elif isinstance(event, SyncNoticed):
                if self.sync_type is not None and event.effective != self.sync_type:
                    self._event("sync", f"the source made this link {event.effective}")
                self.sync_type = event.effective
            elif isinstance(event, DataReceived):
                data = event.data
                self._queue.append(data)
                self._queued_bytes += len(data.payload)
                if self._queued_bytes > BACKLOG_BYTES:
                    self._room.clear()
                self._work.set()
            elif isinstance(event, PeerReceived):
                self._ctx.peers.peer_received(event.message, self)
            elif isinstance(event, Carried):
                # the other conversation: a link of this instance running back over this
                # connection (nobody attached: it just ended; what it said is moot)
                if self._sink is not None:
                    self._sink(event.message)
            elif isinstance(event, LinkClosed):
                self._finish(event)

    async def _authenticate(self, hello: Hello) -> UserConfig:
        """The source's user (server/replication/linkauth.py)."""
        ctx = self._ctx
        return await authenticate_peer(
            ctx.auth, ctx.logons, self.peer, name=hello.name, user=hello.user,
            secret=hello.secret,
        )  # fmt: skip

    async def _handshake(self, hello: Hello) -> None:
        ctx = self._ctx
        cfg = ctx.config
        self.source = hello.name
        self.source_group = hello.group
        try:
            if hello.version != PROTOCOL_VERSION:
                raise VersionMismatch(
                    f"protocol version {hello.version}, this instance speaks {PROTOCOL_VERSION}"
                )
            if not ctx.accepting():
                raise NotAccepting(f"{cfg.name!r} is not accepting replication now")
            if hello.name == cfg.name:
                raise NameConflict(
                    f"the source calls itself {hello.name!r}, this instance's own Name: names "
                    "are unique in a replication fabric"
                )
            if hello.expect_group != cfg.group:
                raise GroupMismatch(
                    f"{hello.name!r} has destination {hello.destination!r} in Group "
                    f"{hello.expect_group!r}, but {cfg.name!r} is in Group {cfg.group!r}; set "
                    f"<Group>{cfg.group}</Group> in its Destination, or this instance's Group"
                )
            if ctx.auth.enabled:
                self.user = await self._authenticate(hello)
            ctx.identity(hello.name, hello.instance_id, self, self.remote)
        except LinkRefused as exc:
            self.last_error = f"{exc.reason}: {exc.detail}"
            ctx.events.emit(
                "warning", "replication", "inbound_refused", source=hello.name,
                remote=self.remote, reason=exc.reason, detail=exc.detail,
            )  # fmt: skip
            self.refuse(exc)
            return
        if self.protocol.state is State.CLOSED:
            return
        self.instance_id = hello.instance_id
        self._hop = format_hop(hello.name, hello.group)
        self._origin = Origin(
            kind="replication",
            name=hello.name,
            user=self.user,
            replies=self._replies,
            traffic=self.traffic,
        )
        ctx.register(self)
        # fenced records count as held: the repair writes them back in place
        fences = ctx.txlog.fences
        holdings: Holdings = with_fenced(ctx.txlog.publishers.holdings(), fences)
        self.claimed = [i for f in fences for i in f.identities]
        self.protocol.welcome(
            name=cfg.name,
            group=cfg.group,
            log_id=ctx.log_id(),
            holdings=holdings,
            validation=ctx.summary,
            instance_id=ctx.instance_id(),
            origins=ctx.origins(),
            lost_since=ctx.txlog.lost_since_us,
        )
        self.share_view()
        ctx.welcomed(self)
        self._writer.write_soon()
        # an instance without users has no user to name
        user = f" as user {self.user.name}" if self.user is not None else ""
        self._event("connected", f"from {self.remote}{user}")

    def _finish(self, event: LinkClosed) -> None:
        if self._closed.is_set():
            return
        error = event.error
        self.last_error = f"{error.reason}: {error.detail}"
        if event.by_peer and not isinstance(error, PeerShuttingDown) and error.reason != "refused":
            self._ctx.events.emit(
                "warning", "replication", "inbound_closed_by_source", source=self.source,
                reason=error.reason, detail=error.detail,
            )  # fmt: skip
        self._event("disconnected", self.last_error)
        sink, self._sink = self._sink, None
        if sink is not None:
            sink(None)
        self._ctx.unregister(self)
        self._ctx.txlog.remove_durable_listener(self._durable)
        self._closed.set()
        self._room.set()
        self._work.set()
        self._ack_wake.set()
        asyncio.get_running_loop().create_task(self._close_transport())

    async def _close_transport(self) -> None:
        with contextlib.suppress(LinkLost):
            await self._writer.write()
        with contextlib.suppress(Exception):
            await self._transport.close(1000, self.last_error or "")
        for task in self._tasks:
            if task is not asyncio.current_task():
                task.cancel()

    # -- recording ----------------------------------------------------------------------

    async def _apply_loop(self) -> None:
        """Record the batches in the order they came."""
        while not self._closed.is_set():
            if not self._queue:
                self._work.clear()
                await self._work.wait()
                continue
            data = self._queue.popleft()
            self._queued_bytes -= len(data.payload)
            if self._queued_bytes <= BACKLOG_BYTES:
                self._room.set()
            try:
                if data.compressed:
                    runs = await asyncio.to_thread(self._inflate, data)
                else:
                    runs = decode_runs(data.payload, data.count)
            except (ReplicationProtocolError, zstandard.ZstdError) as exc:
                self.refuse(ProtocolRefusal(f"a data batch is malformed: {exc}"))
                return
            if self._closed.is_set():
                return
            self._publish(runs)
            failures = self._replies.failures
            if failures:
                self._refuse_for(failures[0])
                return
            self.upto = data.upto
            self._pending.append((self._ctx.txlog.last_seq, data.upto))
            self._durable(self._ctx.txlog.durable_seq)
            self._check_resynced()

    def _check_resynced(self) -> None:
        if not self.resynced and self.upto >= self.source_last:
            self.resynced = True
            self._ctx.resynced(self.source)

    def _inflate(self, data: Data) -> list[Run]:
        """Decompress and decode a batch (worker thread)."""
        raw = self._decompressor.decompress(data.payload, max_output_size=1 << 30)
        return decode_runs(raw, data.count)

    def _publish(self, runs: list[Run]) -> None:
        """Each run of the batch through the pipeline, keeping its publisher's bookmarks
        and with the source appended to its path."""
        origin = self._origin
        assert origin is not None
        pipeline = self._ctx.pipeline
        hop = (self._hop,)
        for run in runs:
            seqs: list[int | None] = [*run.pub_seqs]
            pipeline.publish(
                origin,
                PublishRun(
                    topic=run.topic,
                    pub_hash=run.pub_hash,
                    pub_seqs=seqs,
                    bodies=run.bodies,
                    acks=[],
                    corr_ids=run.corr_ids,
                    sow_keys=run.sow_keys,
                    kind=RecordKind(run.kind),
                    path=run.path + hop,
                ),
            )
            if self._replies.failures:
                return

    def _refuse_for(self, failure: ProtocolFailure) -> None:
        if isinstance(failure, NotEntitled):
            user = self.user.name if self.user is not None else None
            error: LinkRefused = NotEntitledToReplicate(
                f"user {user!r} of the link from {self.source!r} may not publish: "
                f"{failure.detail or failure.reason}; give it a <Write> entitlement for the "
                "replicated topics"
            )
        else:
            error = RecordRefused(f"{failure.reason}: {failure.detail or ''}".rstrip(": "))
        self._ctx.events.emit(
            "error", "replication", "inbound_record_refused", source=self.source,
            reason=error.reason, detail=error.detail,
        )  # fmt: skip
        self.refuse(error)

    # -- acks ---------------------------------------------------------------------------

    def _durable(self, durable: int) -> None:
        pending = self._pending
        ackable = self._ackable
        while pending and pending[0][0] <= durable:
            ackable = pending.popleft()[1]
        if ackable > self._ackable:
            self._ackable = ackable
            self._ack_wake.set()

    async def _ack_loop(self) -> None:
        interval = self._ctx.ack_interval
        while not self._closed.is_set():
            await self._ack_wake.wait()
            self._ack_wake.clear()
            position = self._ackable
            if position <= self.acked or self.protocol.state is not State.STREAMING:
                continue
            self.protocol.ack(position)
            self.acked = position
            try:
                await self._writer.write()
            except LinkLost:
                return
            if interval:
                await self._ctx.clock.sleep(interval)

    # -- helpers ------------------------------------------------------------------------

    def _spawn(self, coro: object) -> None:
        assert asyncio.iscoroutine(coro)
        task = asyncio.get_running_loop().create_task(coro)
        task.add_done_callback(self._task_done)
        self._tasks.append(task)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        """A link task that fails is a bug: say so, and end the link (the source resends)."""
        if task.cancelled() or task.exception() is None:
            return
        exc = task.exception()
        self._ctx.events.emit(
            "error", "replication", "inbound_failed", source=self.source,
            error=f"{type(exc).__name__}: {exc}",
        )  # fmt: skip
        self.refuse(RecordRefused(f"internal error: {type(exc).__name__}: {exc}"))

    def _event(self, event: str, detail: str) -> None:
        ctx = self._ctx
        level = "warning" if event == "disconnected" else "info"
        ctx.events.emit(level, "replication", f"inbound_{event}", source=self.source,
                        remote=self.remote, detail=detail)  # fmt: skip
        ctx.record(LinkEvent(ctx.clock.time(), self.source or self.remote, "in", event, detail))
