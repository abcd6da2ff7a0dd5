"""One destination: its link's life, its position in the log, its sync type.

A :class:`DestinationLink` runs two tasks for as long as the instance runs: the **dial
loop** (:meth:`DestinationLink._run`: next address of the failover list, hello, welcome,
validation, where the resync starts, the stream, then acks until the link ends) and the
**pump** (:meth:`DestinationLink._pump`: reads the log from this destination's position
and sends what its routing takes, in log order, or only scans while disconnected to know
how far the destination is done). The resync starts from what the destination's holdings
lack, and re-examines the last :data:`RECHECK_RECORDS` records it acknowledged when it
lost a tail. The :attr:`settled` (every local seq up to it acknowledged or not for this
destination) feeds server/replication/horizon.py; acknowledged positions move the
destination's retention pin and are saved (server/replication/state.py). See
docs/replication.md "Resync on connect" and "The re-check of acknowledged records, and
its bound".
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import ssl
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Final

import zstandard

from spool.server.clock import TIME_EPSILON, Clock, sleep_or_wake
from spool.server.config import Config, DestinationConfig
from spool.server.replication.collisions import differing_origins
from spool.server.replication.dialer import Backoff, Dialer
from spool.server.replication.errors import (
    LinkRefused,
    NameConflict,
    PeerShuttingDown,
    ReconnectRequested,
    ReplicationProtocolError,
    ValidationFailed,
    ValidationReported,
)
from spool.server.replication.fabricview import PeerExchange, share_view
from spool.server.replication.frames import Message, Origins, PeerMessage
from spool.server.replication.history import LinkEvent
from spool.server.replication.hops import format_hop
from spool.server.replication.inflight import InFlight
from spool.server.replication.packing import pack_runs
from spool.server.replication.protocol import (
    Acked,
    Carried,
    Event,
    LinkClosed,
    LinkProtocol,
    PeerReceived,
    Side,
    State,
    Welcomed,
)
from spool.server.replication.routing import Held, Route, held_by
from spool.server.replication.state import AckedState
from spool.server.replication.syncstate import SyncState
from spool.server.replication.transport import (
    Connector,
    Dialed,
    LinkLost,
    LinkTlsFailed,
    LinkTransport,
    LinkWriter,
    ReturnConnection,
)
from spool.server.replication.validation import validate
from spool.server.stats.source import EventSink
from spool.server.tls.context import load_dial_context
from spool.server.tls.errors import TlsError
from spool.server.txlog import FencedRecords, Pin, TransactionLog
from spool.server.txlog.format.batch import RecordBatch

__all__ = ["DestinationLink", "LinkContext", "marker_wait"]

#: most records and bytes read per batch
BATCH_RECORDS: Final = 4096
BATCH_BYTES: Final = 1 << 20
#: how often an idle stream tells the destination how far the log was examined
MARKER_INTERVAL: Final = 0.05
#: how long a source waits for the welcome
WELCOME_TIMEOUT: Final = 10.0
#: zstd level of compressed links (fast: the link, not the ratio, is the point)
ZSTD_LEVEL: Final = 1
#: seconds before the time a destination lost records from that its resync starts at
#: (clocks differ between instances; records reach it a link's latency after here)
LOST_SLACK: Final = 600.0
#: records before the end of what a destination with the same log acknowledged that its
#: resync examines again when its holdings lack something there (a tail it lost to
#: damaged storage, cut at a record boundary: nothing tells it so). Bounded: records not
#: for it look lacking too, and every reconnect would read them again
RECHECK_RECORDS: Final = 10_000


@dataclass(slots=True)
class LinkContext:
    """What a destination's link needs from its instance."""

    config: Config
    txlog: TransactionLog
    clock: Clock
    events: EventSink
    connector: Connector
    rng: random.Random
    summary: dict[str, object]
    changed: Callable[[], None]
    settled_moved: Callable[[], None]
    record: Callable[[LinkEvent], None]
    #: this instance's identity (the hello carries it)
    instance_id: Callable[[], str]
    #: refuses (NameConflict) a peer whose Name another live link's peer has, with
    #: another identity: (name, instance id, this link, where it is)
    identity: Callable[[str, str, object, str], None]
    #: the fabric view to send, and where the peer's messages go
    peers: PeerExchange
    #: a streaming link ended (the claims it carried get no answer)
    link_down: Callable[[object], None]
    #: where this instance's records of each publisher came from (a resync compares them
    #: with the destination's)
    origins: Callable[[], Origins]
    #: messages of the second conversation of a connection this link dialed: the peer's
    #: link back to this instance (the link, the messages, the connection, its write lock)
    reverse: Callable[
        [DestinationLink, list[Message], LinkTransport, asyncio.Lock], Awaitable[None]
    ]
    #: that connection closed (the link back over it ends; the detail: why, when known)
    reverse_gone: Callable[[DestinationLink, str | None], None]
    #: the safety of failing over from this instance may have changed (what happened)
    failover_changed: Callable[[str], None] = lambda _detail: None


class _Stream:
    """A streaming connection.

    ``returning``: the destination's log is not the one this source knew (it started over
    empty, or was never seen): its resync gives back what it lacks though it is on the
    records' paths (server/replication/routing.py).
    """

    __slots__ = (
        "compressor", "held", "protocol", "remote", "remote_group", "resync_end", "returning",
        "writer",
    )  # fmt: skip

    def __init__(
        self,
        protocol: LinkProtocol,
        writer: LinkWriter,
        remote: str,
        remote_group: str,
        held: Held,
        resync_end: int,
        compress: bool,
        returning: bool = False,
    ) -> None:
        self.protocol = protocol
        self.writer = writer
        self.remote = remote
        self.remote_group = remote_group
        self.held = held
        self.resync_end = resync_end
        self.returning = returning
        self.compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL) if compress else None


class DestinationLink:
    """One destination of this instance. Owned by the event loop.

    Args:
        config: the destination.
        ctx: the instance's parts.
        saved: its acknowledged position from the last run, if any.

    Attributes:
        name: the destination's name.
        sync: its configured and effective sync type.
        status: ``disconnected``, ``connecting``, ``handshake``, ``streaming``,
            ``stopped``.
        address: the address of the current or last connection.
        remote_name, remote_group, remote_log_id: who answered the last welcome.
        acked: the local seq it acknowledged.
        msgs_out, bytes_out: records and bytes sent.
        disconnects: streaming links that ended.
        last_error: why the last link ended or was refused.
        validation_failures: the failed checks of the last refused validation.
    """

    def __init__(
        self, config: DestinationConfig, ctx: LinkContext, saved: AckedState | None
    ) -> None:
        self.name = config.name
        self.config = config
        self._ctx = ctx
        self.sync = SyncState(config.name, config.sync)
        self.route = Route(config, [q for q in ctx.config.queues if q.kind != "LocalQueue"])
        #: the failover list (None: a passive destination, it dials nothing)
        self.dialer = (
            Dialer(config.transport.addresses, rng=ctx.rng) if not config.passive else None
        )
        #: the waits between attempts over the peer's connection
        self._backoff = Backoff(rng=ctx.rng)
        self.status = "disconnected"
        self.address: tuple[str, int] | None = None
        #: how the current or last link ran: ``dialed`` (a connection of this instance) or
        #: ``incoming`` (back over the connection the peer dialed); None before any
        self.via: str | None = None
        #: where the current or last link ran, for the operator
        self.where = "?"
        #: the connection the peer dialed to this instance, offered to run back over
        self._offered: ReturnConnection | None = None
        #: why the connection this link dialed went away (its read failed), for the link
        #: back over it
        self._pipe_lost: str | None = None
        self._offer = asyncio.Event()
        #: the current link is ended to move to the peer's connection
        self._moving = False
        self.remote_name = saved.remote if saved is not None else config.name
        self.remote_group = config.group
        self.remote_log_id = saved.remote_log_id if saved is not None else ""
        #: the identity of the instance that answered the last welcome
        self.remote_instance_id = ""
        txlog = ctx.txlog
        acked = saved.acked if saved is not None else 0
        self.acked = min(acked, txlog.last_seq)
        self.msgs_out = 0
        self.bytes_out = 0
        self.disconnects = 0
        self.last_error: str | None = None
        self.validation_failures: list[str] = []
        self.connected_since: float | None = None
        self._pin: Pin | None = None
        self._stream: _Stream | None = None
        self._pos = self.acked + 1
        self._scanned = self.acked
        #: records sent and not acknowledged, in order
        self._unacked = InFlight()
        #: while disconnected: the first record for it not acknowledged (seq, ts)
        self._blocked: tuple[int, int] | None = None
        self._marker_due = 0  # an upto to tell the destination once idle
        self._last_sent = 0.0
        self._wake = asyncio.Event()
        self._reconnect = asyncio.Event()
        self._operator_reconnect = False
        self._stopping = False
        self._tasks: list[asyncio.Task[None]] = []
        self._topic_bytes: dict[str, bytes] = {}
        self._tls_reported: str | None = None
        #: the view version last sent on the current stream
        self._view_sent = 0
        self._fences_skipped: set[int] = set()  # fenced ranges already reported

    # -- life ---------------------------------------------------------------------------

    def start(self) -> None:
        txlog = self._ctx.txlog
        self._pin = txlog.pin(f"replication:{self.name}", self.acked + 1)
        txlog.add_durable_listener(self._durable)
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._run(), name=f"spool-repl-{self.name}"),
            loop.create_task(self._pump(), name=f"spool-repl-pump-{self.name}"),
        ]

    async def stop(self) -> None:
        """End the link (the destination is told the instance shuts down)."""
        self._stopping = True
        stream = self._stream
        if stream is not None:
            stream.protocol.refuse(PeerShuttingDown(f"{self._ctx.config.name!r} is stopping"))
            with contextlib.suppress(LinkLost):
                await asyncio.wait_for(stream.writer.write(), 1.0)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._ctx.txlog.remove_durable_listener(self._durable)
        if self._pin is not None:
            self._pin.release()
        self.status = "stopped"

    def announce_sync(self) -> None:
        """Tell the destination the effective sync type changed (when streaming)."""
        stream = self._stream
        if stream is not None and stream.protocol.state is State.STREAMING:
            stream.protocol.notify_sync(self.sync.effective)
            stream.writer.write_soon()

    @property
    def streaming(self) -> bool:
        """Whether the link streams now."""
        stream = self._stream
        return stream is not None and stream.protocol.state is State.STREAMING

    @property
    def peer_name(self) -> str:
        """The instance at the other end (the one that answered the last welcome)."""
        return self.remote_name

    def send_peer(self, message: PeerMessage) -> bool:
        """Send a peer message (server/replication/peerframes.py) while streaming."""
        stream = self._stream
        if stream is None or stream.protocol.state is not State.STREAMING:
            return False
        stream.protocol.send_peer(message)
        stream.writer.write_soon()
        return True

    def share_view(self) -> None:
        """Send the fabric view when this stream has not had the latest one."""
        self._view_sent = share_view(self._ctx.peers, self, self._view_sent)

    def reconnect(self) -> None:
        """Drop the link and dial again from the top of the address list at once (or,
        running over the peer's connection, start the link again over it)."""
        if self.dialer is not None:
            self.dialer.reset()
        self._backoff.reset()
        self._reconnect.set()

    def saved(self) -> AckedState:
        """What to keep between runs."""
        return AckedState(self.remote_name, self.remote_log_id, self.acked)

    # -- the settled seq ------------------------------------------------------------------

    @property
    def holds_acks(self) -> bool:
        return self.sync.holds_acks

    @property
    def settled(self) -> int:
        """Every local seq up to this is acknowledged by the destination or not for it."""
        if self._stream is not None:
            head = self._unacked.first()
            if head is not None:
                return head[0] - 1
            return max(self._scanned, self.acked)
        if self._blocked is not None:
            return self._blocked[0] - 1
        return max(self._scanned, self.acked)

    @property
    def connected(self) -> bool:
        return self._stream is not None

    def messages_behind(self) -> int:
        """Records of the local log it has not acknowledged (examined) yet."""
        return max(0, self._ctx.txlog.last_seq - self.acked)

    def seconds_behind(self) -> float:
        """Age of the oldest record for it that it has not acknowledged (0 when none)."""
        oldest: int | None = None
        head = self._unacked.first()
        if head is not None:
            oldest = head[1]
        elif self._blocked is not None:
            oldest = self._blocked[1]
        if oldest is None:
            return 0.0
        return max(0.0, self._ctx.clock.time() - oldest / 1e6)

    def _durable(self, _seq: int) -> None:
        self._wake.set()

    def _settled_changed(self) -> None:
        if self.sync.caught_up(self.settled_for_upgrade()):
            self._event("upgraded", "caught up: persisted acks wait for it again")
            self.announce_sync()  # the destination shows the link sync again
            self._ctx.failover_changed(f"destination {self.name!r} upgraded: it is sync again")
        self._ctx.settled_moved()

    def settled_for_upgrade(self) -> int:
        """How far it is done while connected (an upgrade completes on this)."""
        return self.settled if self._stream is not None else self.acked

    # -- the dial loop --------------------------------------------------------------------

    def offer(self, conn: ReturnConnection) -> None:
        """The peer dialed this instance (its link is welcomed): this destination may run
        back over that connection - always when passive, else when this instance's Name
        sorts after the peer's (one connection per pair: the lower Name's). A connection
        from an instance of another Group, or in plain text for a destination that dials
        with TLS, is not used."""
        if (
            conn.source not in (self.name, self.remote_name)
            or conn.source_group != self.config.group
        ):
            return
        if self.config.transport.tls and not conn.tls:
            return
        self._offered = conn
        if not self._reuses(conn):
            return
        self._offer.set()
        if self._stream is not None and self.via == "dialed":
            # streaming over a connection of its own: move to the peer's
            self._moving = True
            self._reconnect.set()

    def _reuses(self, conn: ReturnConnection) -> bool:
        return self.config.passive or self._ctx.config.name > conn.source

    def _return_connection(self) -> ReturnConnection | None:
        conn = self._offered
        if conn is None or not conn.carrying or not self._reuses(conn):
            return None
        return conn

    async def _run(self) -> None:
        while not self._stopping:
            self._offer.clear()
            conn = self._return_connection()
            if conn is not None:
                await self._back(conn)
            elif self.dialer is None:
                # passive: nothing to dial; the peer's connection brings the link
                self.status = "waiting"
                self.last_error = self.last_error or (
                    f"passive: waiting for {self.name!r} to dial this instance"
                )
                await self._pause(None)
            else:
                await self._dial(self.dialer)
        self.status = "stopped"

    async def _back(self, conn: ReturnConnection) -> None:
        """A link over the connection the peer dialed (its second conversation)."""
        delay = self._backoff.delay()
        if delay:
            self.status = "disconnected"
            await self._pause(delay)
            if self._stopping or self._return_connection() is not conn:
                return
        self._reconnect.clear()
        self._operator_reconnect = self._moving = False
        self.address = None
        self.via = "incoming"
        self.where = conn.remote
        protocol = LinkProtocol(Side.SOURCE, channel=1)
        writer = LinkWriter(protocol.data_to_send, conn.pipe, conn.write_lock)
        received: asyncio.Queue[Message | None] = asyncio.Queue()
        sink = received.put_nowait
        conn.attach(sink)
        try:
            streamed = await self._session(
                protocol, writer, lambda: self._read_back(received, protocol, conn)
            )
        finally:
            conn.detach(sink)
        if self._operator_reconnect:
            self._backoff.reset()
        elif streamed:
            self._backoff.dropped(self._ctx.clock.monotonic())
        else:
            self._backoff.failed()

    async def _dial(self, dialer: Dialer) -> None:
        """One attempt at the next address of the failover list."""
        address, delay = dialer.next_attempt()
        if delay:
            self.status = "disconnected"
            await self._pause(delay)
            if self._return_connection() is not None:
                return  # the peer dialed meanwhile: run over its connection
        self._reconnect.clear()
        self._operator_reconnect = self._moving = False
        self.status = "connecting"
        self.address = address
        self.via = "dialed"
        self.where = f"{address[0]}:{address[1]}"
        try:
            tls = await self._tls_context()
            transport = await self._ctx.connector(*address, tls, self._ctx.config.link_timeout)
        except (LinkTlsFailed, TlsError) as exc:
            self._tls_failed(str(exc))
            dialer.failed()
            return
        except (OSError, LinkLost) as exc:
            self.last_error = f"cannot connect to {address[0]}:{address[1]}: {exc}"
            dialer.failed()
            return
        lock = asyncio.Lock()
        protocol = LinkProtocol(Side.SOURCE, carries=True)
        writer = LinkWriter(protocol.data_to_send, transport, lock)
        self._pipe_lost = None
        try:
            streamed = await self._session(
                protocol, writer, lambda: self._read(transport, protocol, lock)
            )
        finally:
            self._ctx.reverse_gone(self, self._pipe_lost)
            with contextlib.suppress(Exception):
                await transport.close()
        if self._operator_reconnect or self._moving:
            dialer.reset()  # an operator's reconnect dials the top at once
        elif streamed:
            dialer.dropped(self._ctx.clock.monotonic())
        else:
            dialer.failed()

    async def _pause(self, delay: float | None) -> None:
        """Wait ``delay`` seconds of the clock (None: no limit), or until an operator asks
        to reconnect or the peer's connection is offered."""
        loop = asyncio.get_running_loop()
        waiters: set[asyncio.Task[object]] = {
            loop.create_task(self._reconnect.wait()),
            loop.create_task(self._offer.wait()),
        }
        if delay is not None:
            waiters.add(loop.create_task(self._ctx.clock.sleep(delay)))
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()

    async def _session(
        self,
        protocol: LinkProtocol,
        writer: LinkWriter,
        read: Callable[[], Coroutine[object, object, list[Event] | None]],
    ) -> bool:
        """One conversation: handshake, validation, stream. Returns whether it streamed."""
        ctx = self._ctx
        cfg = ctx.config
        creds = self.config.transport
        self.status = "handshake"
        protocol.hello(
            name=cfg.name,
            group=cfg.group,
            destination=self.name,
            expect_group=self.config.group,
            user=creds.user,
            secret=creds.secret,
            compression=creds.compression,
            validation=ctx.summary,
            instance_id=ctx.instance_id(),
        )
        streamed = False
        loop = asyncio.get_running_loop()
        reader = loop.create_task(read())
        reconnect = loop.create_task(self._reconnect.wait())
        welcome_timer = loop.create_task(ctx.clock.sleep(WELCOME_TIMEOUT))
        try:
            await writer.write()
            while True:
                waiting = {reader, reconnect}
                if protocol.state is not State.STREAMING:
                    waiting.add(welcome_timer)
                done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                if reconnect in done:
                    why = (
                        f"moving to the connection {self.remote_name!r} dialed"
                        if self._moving
                        else "reconnect requested by an operator"
                    )
                    protocol.refuse(ReconnectRequested(why))
                    await writer.write()
                    self.last_error = why
                    self._operator_reconnect = not self._moving
                    break
                if welcome_timer in done and reader not in done:
                    self.last_error = f"no welcome within {WELCOME_TIMEOUT:.0f}s"
                    break
                events = reader.result()
                if events is None:  # the pipe is gone
                    self.last_error = self.last_error or "connection lost"
                    break
                for event in events:
                    if isinstance(event, Welcomed):
                        lost = await self._lost_start(event.welcome.lost_since)
                        streamed = await self._welcomed(event, protocol, writer, lost) or streamed
                    elif isinstance(event, Acked):
                        self._acked(event.position)
                    elif isinstance(event, PeerReceived):
                        ctx.peers.peer_received(event.message, self)
                    elif isinstance(event, LinkClosed):
                        self._closed(event)
                await writer.write()
                if protocol.state is State.CLOSED:
                    break
                reader = loop.create_task(read())
        except LinkLost as exc:
            self.last_error = str(exc)
        finally:
            reader.cancel()
            reconnect.cancel()
            welcome_timer.cancel()
            if self._stream is not None:
                self._disconnected()
        return streamed

    async def _read(
        self, transport: Dialed, protocol: LinkProtocol, lock: asyncio.Lock
    ) -> list[Event] | None:
        """The next events of a connection this instance dialed (None: it went away).
        Messages of its second conversation - the peer's link back to this instance - go
        to that link (they wait while it has too much to record)."""
        while True:
            try:
                data = await transport.recv()
            except LinkLost as exc:
                self.last_error = self._pipe_lost = str(exc)
                protocol.connection_lost(LinkRefused(str(exc)))
                return None
            protocol.receive_data(data)
            events = protocol.events_received()
            carried = [e.message for e in events if isinstance(e, Carried)]
            if carried:
                await self._ctx.reverse(self, carried, transport, lock)
                events = [e for e in events if not isinstance(e, Carried)]
            if events:
                return events

    async def _read_back(
        self,
        received: asyncio.Queue[Message | None],
        protocol: LinkProtocol,
        conn: ReturnConnection,
    ) -> list[Event] | None:
        """The next events of a link over the peer's connection (None: it went away)."""
        while True:
            message = await received.get()
            while True:
                if message is None:
                    detail = conn.gone or "the connection it ran over closed"
                    protocol.connection_lost(LinkRefused(detail))
                    self.last_error = detail
                    return None
                protocol.receive_message(message)
                if received.empty():
                    break
                message = received.get_nowait()
            events = protocol.events_received()
            if events:
                return events

    async def _lost_start(self, lost_since: int | None) -> int | None:
        """Where the records a destination lost and cannot name may start here: the first
        record recorded a little (:data:`LOST_SLACK`) before the time it lost them from
        (None: it lost nothing)."""
        if lost_since is None:
            return None
        return await self._ctx.txlog.locate_time(max(0, lost_since - int(LOST_SLACK * 1e6)))

    async def _welcomed(
        self,
        event: Welcomed,
        protocol: LinkProtocol,
        writer: LinkWriter,
        lost_start: int | None = None,
    ) -> bool:
        """Validate, choose the resync start, start the stream. Returns whether it did."""
        ctx = self._ctx
        welcome = event.welcome
        if welcome.name == ctx.config.name:
            self._refuse(
                protocol,
                NameConflict(
                    f"{welcome.name!r} at {self.where} has this instance's own Name: names "
                    "are unique in a replication fabric"
                ),
            )
            return False
        try:
            ctx.identity(welcome.name, welcome.instance_id, self, self.where)
        except NameConflict as exc:
            self._refuse(protocol, exc)
            return False
        try:
            failures = validate(ctx.summary, welcome.validation, self.config)
        except ReplicationProtocolError as exc:
            self._refuse(protocol, ValidationReported(f"unreadable configuration summary: {exc}"))
            return False
        if failures:
            self.validation_failures = [f.detail for f in failures]
            for failure in failures:
                ctx.events.emit(
                    "error", "replication", "validation_failed", destination=self.name,
                    remote=welcome.name, check=failure.check, topic=failure.topic,
                    fix=failure.fix, detail=failure.detail,
                )  # fmt: skip
            self._refuse(protocol, ValidationReported("; ".join(self.validation_failures)))
            return False
        self.validation_failures = []
        txlog = ctx.txlog
        same = (welcome.name, welcome.log_id) == (self.remote_name, self.remote_log_id)
        start = txlog.resync_start(welcome.holdings)
        # the same log lacks something it acknowledged: look at its last records again
        recheck = same and start <= self.acked
        # records it holds from another origin than ours: sent again, so it compares them
        for pub, pub_seq in differing_origins(ctx.origins(), welcome.origins,
                                              welcome.holdings).items():  # fmt: skip
            local = await txlog.locate_bookmark(pub, pub_seq)
            start = min(start, local if local is not None else txlog.first_seq)
        if protocol.state is not State.WELCOMED or self._stopping:
            return False  # the link ended (or the instance stops) while looking it up
        if recheck:
            start = max(start, self.acked + 1 - RECHECK_RECORDS)
        elif same:
            start = max(start, self.acked + 1)
        else:
            self.acked = 0
        if lost_start is not None:
            # it lost records it acknowledged: from before they were recorded here
            start = min(start, lost_start)
        start = max(start, txlog.first_seq)
        self.acked = max(self.acked, start - 1)
        self.remote_name = welcome.name
        self.remote_group = welcome.group
        self.remote_log_id = welcome.log_id
        self.remote_instance_id = welcome.instance_id
        durable = txlog.durable_seq
        stream = _Stream(
            protocol, writer, welcome.name, welcome.group,
            held_by(welcome.holdings, welcome.origins, format_hop(ctx.config.name, ctx.config.group)),
            durable,
            self.config.transport.compression == "zstd",
            returning=not same or lost_start is not None or recheck,
        )  # fmt: skip
        protocol.start_stream(start, durable)
        protocol.notify_sync(self.sync.effective)
        self._stream = stream
        self._pos = start
        self._scanned = start - 1
        self._unacked.clear()
        self._blocked = None
        self._marker_due = 0
        if self._pin is not None:
            self._pin.move(self.acked + 1)
        now = ctx.clock.monotonic()
        if self.via == "incoming" or self.dialer is None:
            self._backoff.streaming(now)
        else:
            self.dialer.streaming(now)
        self.status = "streaming"
        self.connected_since = ctx.clock.time()
        self.last_error = None
        self._tls_reported = None
        ctx.changed()
        self._event(
            "connected",
            f"{welcome.name}@{welcome.group} at {self.where}; resync from {start} "
            f"(log at {durable})",
        )
        ctx.failover_changed(f"destination {self.name!r} connected")
        self._wake.set()
        self._settled_changed()
        self._view_sent = 0
        self.share_view()
        return True

    def _refuse(self, protocol: LinkProtocol, error: LinkRefused) -> None:
        protocol.refuse(error)
        self.last_error = f"{error.reason}: {error.detail}"
        self._event("refused", self.last_error)

    def _closed(self, event: LinkClosed) -> None:
        error = event.error
        text = f"{error.reason}: {error.detail}"
        if event.by_peer:
            self.last_error = f"refused by {self.remote_name!r}: {text}"
            if isinstance(error, ValidationReported | ValidationFailed):
                self.validation_failures = [error.detail]
            if isinstance(error, ReconnectRequested):
                # the destination asks for a resync now (its holdings changed: a fence
                # it claimed was filled or released): reconnect at once, as an operator's
                self._operator_reconnect = True
            self._ctx.events.emit(
                "warning", "replication", "link_refused", destination=self.name,
                reason=error.reason, detail=error.detail,
            )  # fmt: skip
            self._event("refused", self.last_error)

    def _disconnected(self) -> None:
        """The stream ended: everything sent and not acknowledged is pending again."""
        self._stream = None
        self._ctx.link_down(self)
        self.disconnects += 1
        self.connected_since = None
        self._pos = self.acked + 1
        self._scanned = self.acked
        self._unacked.clear()
        self._blocked = None
        self.status = "disconnected"
        self._event("disconnected", self.last_error or "")
        self._ctx.failover_changed(f"destination {self.name!r} disconnected")
        self._wake.set()

    def _acked(self, position: int) -> None:
        if position <= self.acked:
            return
        self.acked = position
        self._unacked.ack(position)
        if self._pin is not None:
            self._pin.move(position + 1)
        self._ctx.changed()
        self._settled_changed()

    # -- the pump -----------------------------------------------------------------------

    async def _pump(self) -> None:
        """Follow the log: send while streaming, scan while not (module docstring).

        It must never stop while the instance runs: an unexpected error is reported, the
        link is dropped (its records are sent again from the acknowledged position when
        it comes back) and the pump goes on.
        """
        while not self._stopping:
            try:
                await self._pump_once()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.last_error = f"internal error: {type(exc).__name__}: {exc}"
                self._ctx.events.emit(
                    "error", "replication", "pump_failed", destination=self.name,
                    error=f"{type(exc).__name__}: {exc}",
                )  # fmt: skip
                self.reconnect()
                await self._sleep_until_woken(1.0)

    async def _pump_once(self) -> None:
        """Run the pump until it stops or fails."""
        txlog = self._ctx.txlog
        while not self._stopping:
            stream = self._stream
            if stream is None and self._blocked is not None:
                await self._sleep_until_woken(None)
                continue
            if stream is not None and stream.protocol.state is not State.STREAMING:
                # the link is ending (lost, refused): the dial loop's session clears it and
                # wakes the pump. Reading on meanwhile would never yield (a read from the
                # tail and the packing do not await, and _send gives up before writing),
                # so the pump spun and the session never ran: the instance's loop hung.
                await self._sleep_until_woken(None)
                continue
            durable = txlog.durable_seq
            if self._pos > durable:
                if stream is not None and self._marker_due:
                    wait = marker_wait(self._ctx.clock.monotonic(), self._last_sent)
                    if wait == 0.0:
                        await self._send_marker(stream)
                        continue
                    await self._sleep_until_woken(wait)
                    continue
                await self._sleep_until_woken(None)
                continue
            try:
                batch = await txlog.read_view(
                    self._pos, max_count=BATCH_RECORDS, max_bytes=BATCH_BYTES, upto_seq=durable
                )
            except FencedRecords as exc:
                self._skip_fence(exc)
                continue
            except Exception as exc:  # a damaged journal: say so, retry later
                self.last_error = f"cannot read the log at {self._pos}: {exc}"
                self._ctx.events.emit(
                    "error", "replication", "read_failed", destination=self.name, error=str(exc)
                )
                await self._sleep_until_woken(1.0)
                continue
            if self._stream is not stream:
                continue  # the link changed while reading
            if not len(batch):
                await self._sleep_until_woken(None)
                continue
            if stream is None:
                self._scan(batch)
            else:
                try:
                    await self._send(stream, batch)
                except LinkLost:
                    await self._sleep_until_woken(0.05)
                    continue
            self._settled_changed()
            # one loop turn per batch: reading the tail and a pipe with room never
            # suspend, and a pump that does not yield starves the instance (clients, the
            # link tasks that would end its stream)
            await asyncio.sleep(0)

    def _skip_fence(self, fenced: FencedRecords) -> None:
        """Go on after a fenced range: this log does not hold those records now, so
        there is nothing of them to send (the destination is told how far the log was
        examined, as for records not for it). A repair writes them back here later,
        under the same seqs, from a peer that holds them."""
        last = fenced.last_seq
        if last < self._pos:
            return
        self._pos = last + 1
        self._scanned = max(self._scanned, last)
        if self._stream is not None:
            self._marker_due = max(self._marker_due, last)
        if fenced.first_seq not in self._fences_skipped:
            self._fences_skipped.add(fenced.first_seq)
            self._event(
                "fence_skipped",
                f"local seqs {fenced.first_seq}..{last} are fenced ({fenced.reason}): not sent",
            )
        self._settled_changed()

    async def _sleep_until_woken(self, timeout: float | None) -> None:
        await sleep_or_wake(self._ctx.clock, timeout, self._wake)
        self._wake.clear()

    def _scan(self, batch: RecordBatch) -> None:
        """Disconnected: how far the destination is done (to the first record for it)."""
        chosen = self.route.select(batch, self.remote_name)
        if chosen:
            i = chosen[0]
            seq = batch.first_seq + i
            self._blocked = (seq, batch.timestamps_us[i])
            self._scanned = seq - 1
            self._pos = seq
        else:
            self._scanned = batch.last_seq
            self._pos = batch.last_seq + 1

    async def _send(self, stream: _Stream, batch: RecordBatch) -> None:
        """Streaming: the batch's records for the destination, and how far it goes."""
        first = batch.first_seq
        held = stream.held if first <= stream.resync_end else None
        chosen = self.route.select(batch, stream.remote, held, returning=stream.returning)
        upto = batch.last_seq
        if not chosen:
            self._pos = upto + 1
            self._scanned = upto
            self._marker_due = upto
            return
        writer = pack_runs(batch, chosen, self._topic_bytes, self._unacked)
        payload = writer.payload()
        compressor = stream.compressor
        if compressor is not None:
            payload = await asyncio.to_thread(compressor.compress, payload)
        if self._stream is not stream or stream.protocol.state is not State.STREAMING:
            # the link ended meanwhile: the pump waits for the link task to end the stream
            # (then starts over from the acked position). Returning here instead made the
            # pump read the same batch again at once, forever, without yielding: an
            # instance whose link closed under the pump hung (its loop never ran again)
            self._unacked.drop_newest(writer.count)
            raise LinkLost("the link ended while a batch was being packed")
        stream.protocol.send_data(upto, writer.count, payload, compressed=compressor is not None)
        self._pos = upto + 1
        self._scanned = upto
        self._marker_due = 0
        self.msgs_out += writer.count
        self.bytes_out += len(payload)
        self._last_sent = self._ctx.clock.monotonic()
        await stream.writer.write()

    async def _send_marker(self, stream: _Stream) -> None:
        upto, self._marker_due = self._marker_due, 0
        if stream.protocol.state is not State.STREAMING:
            return
        stream.protocol.send_data(upto, 0, b"", compressed=False)
        self._last_sent = self._ctx.clock.monotonic()
        with contextlib.suppress(LinkLost):
            await stream.writer.write()

    # -- helpers ------------------------------------------------------------------------

    async def _tls_context(self) -> ssl.SSLContext | None:
        """The context to dial with, built anew for each attempt (its files are read off
        the loop; a certificate renewed on disk is used from the next reconnect)."""
        transport = self.config.transport
        if not transport.tls:
            return None
        return await asyncio.to_thread(
            load_dial_context,
            transport.ca_certificate,
            transport.certificate,
            transport.private_key,
        )

    def _tls_failed(self, detail: str) -> None:
        """A TLS failure is a link error, reported once per distinct reason (the dialer
        keeps retrying; it never falls back to plain text)."""
        self.last_error = detail
        if detail != self._tls_reported:
            self._tls_reported = detail
            self._event("tls_failed", detail)

    def _event(self, event: str, detail: str) -> None:
        ctx = self._ctx
        level = "info" if event in ("connected", "upgraded", "downgraded") else "warning"
        ctx.events.emit(level, "replication", f"destination_{event}", destination=self.name,
                        detail=detail)  # fmt: skip
        ctx.record(LinkEvent(ctx.clock.time(), self.name, "out", event, detail))


def marker_wait(now: float, last_sent: float) -> float:
    """Seconds until an idle stream's position marker is due: 0.0 when it is due now.

    A remainder under :data:`~spool.server.clock.TIME_EPSILON` counts as due: ``now + wait`` may
    round back to ``now``, and the pump would then sleep for nothing and compute the same
    remainder again, forever on a virtual clock (the marker never went out and a sync
    destination's acks would stall).
    """
    wait = MARKER_INTERVAL - (now - last_sent)
    return 0.0 if wait < TIME_EPSILON else wait
