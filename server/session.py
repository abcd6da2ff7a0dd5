"""One connected client: the outbound buffer and its writer, heartbeats, slow-client limits.

The transport (the websocket adapter in web/transport.py) hands every received frame to
:meth:`Session.receive`, which passes it to the connection's
:class:`~spool.server.ports.FrameHandler` (the dispatcher, server/dispatch.py). Everything the
broker sends goes through one outbound buffer drained by a single writer task, so all
messages that become ready in one turn of the event loop leave in one WebSocket frame
(frame batching). A session is an :class:`~spool.server.ports.Outbound`: the publish pipeline,
the fan-out, the replay sinks and the acks send through that interface only.

The outbound buffer follows the back-pressure policy of server/backpressure.py, with
``Tuning/SlowClientBufferLimit`` as its limit: live messages of recorded topics are offered
(:meth:`Session.live_fits`) and spill to the log past half of it; replays and catch-ups
wait for room (:meth:`Session.wait_room`); what cannot be read back (live messages of
topics not recorded, acks) disconnects the client with ``slow client`` when it would pass
it. Paced producers queue pieces of at most :attr:`Session.piece_bytes` (L/4) right after
:meth:`Session.has_room`, so together they stay below half of it. uvicorn applies TCP flow control to sends, so a client that stops reading keeps the
writer waiting in one send: :attr:`Session.send_started` says since when, and
server/stalls.py disconnects it after ``Tuning/SlowClientTimeout``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Final, Literal, Protocol, cast

from spool.server.backpressure import BufferLimits
from spool.server.clock import Clock
from spool.server.config import UserConfig
from spool.server.peer import Peer
from spool.server.ports import AckValue, FrameHandler, Origin, Traffic
from spool.server.protocol.commands import encode_ack
from spool.server.protocol.errors import HeartbeatTimeout, ProtocolFailure, SlowClient
from spool.server.stats.source import EventSink
from spool.server.subscription import SubscriptionTable

#: WebSocket close codes used by the broker.
CLOSE_NORMAL: Final = 1000
CLOSE_GOING_AWAY: Final = 1001
CLOSE_INVALID_DATA: Final = 1007
CLOSE_POLICY: Final = 1008

_BEAT: Final = b'{"c":"heartbeat","l":0}'

DisconnectCause = Literal[
    "client",  # the peer closed or went away
    "slow_client_stalled",  # took nothing for SlowClientTimeout while data waited
    "slow_client_buffer",  # what cannot be read back would pass SlowClientBufferLimit
    "heartbeat",  # silent for two heartbeat intervals
    "name_in_use",  # the same user logged on again with this client name
    "logon_failed",  # the first command, the logon, failed
    "logon_timeout",  # no logon within Tuning/LogonTimeout
    "invalid_message",  # a malformed frame without a cid to answer
    "admin",  # disconnected from the admin API
    "shutting_down",  # the broker stops
]
"""Why a connection ended: the metrics count disconnects by cause (docs/protocol.md gives the
client one reason string, ``slow client``, for both slow-client causes)."""


class Transport(Protocol):
    """What a session needs from its connection."""

    remote: str

    async def send_pieces(self, pieces: Sequence[bytes], size: int) -> None:
        """Send one frame made of ``pieces`` (``size`` bytes in all), joined or not."""
        ...

    async def close(self, code: int, reason: str) -> None: ...


class SessionOwner(Protocol):
    """Who is told when a session closes (the client registry, server/clients.py)."""

    def session_closed(self, session: Session) -> None: ...


class Session:
    """One client connection. Owned by the event loop.

    Attributes:
        peer: the far end (address, TLS version, verified client certificate subject).
        remote: the peer's address (``host:port``).
        transport_name: the configured transport it came in on.
        connected_at: wall-clock time of the connection.
        traffic: messages and bytes in and out.
        connection: its number on this instance (from 1 at each start).
        name: the client name, once logged on.
        user: the authenticated user (None without users).
        user_name: the user's name, or the ``user_id`` given when there are no users.
        pub_hash: the publisher id of the client name (its records' bookmarks).
        version: the client's version string from the logon.
        origin: the session as the publish pipeline sees it (None before logon).
        subs: its subscriptions of every kind, by sub id.
        handler: where received frames go (the dispatcher).
        send_started: monotonic time the writer's current send began (None between
            sends): a client that reads nothing keeps it set (server/stalls.py).
        close_cause: why it closed (None while open).
        web_origin: the ``Origin`` of the browser page that opened it (None: not a
            browser).
        foreign_origin: that page is neither the broker's own origin nor an allowed one
            (web/origins.py): its logon must carry a password or token.
    """

    def __init__(
        self,
        transport: Transport,
        *,
        transport_name: str,
        owner: SessionOwner,
        clock: Clock,
        events: EventSink,
        buffer_limit: int,
        peer: Peer | None = None,
        connection: int = 0,
    ) -> None:
        self.transport = transport
        self.connection = connection
        self.peer = peer if peer is not None else Peer.parse(transport.remote)
        self.remote = transport.remote
        self.transport_name = transport_name
        self._owner = owner
        self._clock = clock
        self._events = events
        self.connected_at = clock.time()
        self.traffic = Traffic()
        self.name: str | None = None
        self.user: UserConfig | None = None
        self.user_name: str | None = None
        self.pub_hash = 0
        self.version = ""
        #: with the ``failover`` option: what the client was last told of failover safety
        self.failover_seen: tuple[AckValue, ...] | None = None
        self.origin: Origin | None = None
        self.subs = SubscriptionTable()
        self.handler: FrameHandler | None = None
        #: pieces to send; None marks a frame boundary (send_batch)
        self._out: list[bytes | None] = []
        self._out_bytes = 0
        self._breaks = 0
        self._in_flight = 0
        self.limits = BufferLimits(buffer_limit)
        # the thresholds of the hot checks, read once (server/backpressure.py)
        self._limit = self.limits.limit
        self._spill_at = self.limits.spill_at
        self._wake = asyncio.Event()
        #: the paced readers' turn (server/replay/cursor.py)
        self.paced_turn = asyncio.Lock()
        self._room = asyncio.Event()
        self._room.set()
        #: set by the writer whenever the buffer is empty (graceful close waits on it)
        self._idle = asyncio.Event()
        self._writer: asyncio.Task[None] | None = None
        self._heartbeat: asyncio.Task[None] | None = None
        self.heartbeat_interval = 0.0
        self.last_rx = clock.monotonic()
        self.closed = False
        self.close_reason: str | None = None
        self.close_cause: DisconnectCause | None = None
        self.send_started: float | None = None
        self.web_origin: str | None = None
        self.foreign_origin = False
        self.closed_event = asyncio.Event()

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        """Start the writer task (the caller then feeds frames to :meth:`receive`)."""
        self._writer = asyncio.get_running_loop().create_task(self._write_loop())

    def log_on(self, name: str, user: UserConfig | None, user_name: str | None,
               pub_hash: int, version: str) -> None:  # fmt: skip
        """Take the identity the logon established (server/clients.py checked it)."""
        self.name = name
        self.user = user
        self.user_name = user_name
        self.pub_hash = pub_hash
        self.version = version
        self.origin = Origin("client", name, user, self, self.traffic)

    @property
    def closing(self) -> bool:
        """Closed, or about to be (a close was decided and scheduled): sends are dropped."""
        return self.closed or self.close_cause is not None

    @property
    def queue_depth(self) -> int:
        """Bytes waiting to be sent (buffered plus the frame being written)."""
        return self._out_bytes + self._in_flight

    async def close(
        self,
        reason: str | None = None,
        code: int = CLOSE_POLICY,
        *,
        drain: bool = False,
        cause: DisconnectCause = "client",
    ) -> None:
        """Close the connection with a docs/protocol.md reason and forget the session.

        With ``drain`` (graceful shutdown) what is already buffered is sent first, for at
        most two seconds.
        """
        if self.closed:
            return
        self.closed = True
        self.close_reason = reason
        if self.close_cause is None:
            self.close_cause = cause
        self._owner.session_closed(self)
        self._room.set()
        if self._heartbeat is not None and self._heartbeat is not asyncio.current_task():
            self._heartbeat.cancel()
        if drain:
            await self._drain(timeout=2.0)
        if self._writer is not None:
            self._writer.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._writer
        # a peer that stopped reading cannot take even the close frame: do not wait on it
        # for ever (uvicorn's ping timeout drops the TCP connection later)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.transport.close(code, reason or ""), 2.0)
        self.closed_event.set()

    def close_soon(
        self, reason: str, code: int = CLOSE_POLICY, *, cause: DisconnectCause = "client"
    ) -> None:
        """Schedule :meth:`close` from synchronous code."""
        if not self.closed:
            asyncio.get_running_loop().create_task(self.close(reason, code, cause=cause))

    async def _drain(self, timeout: float) -> None:
        """Wait (at most ``timeout``) until the writer has sent everything buffered."""
        if not self._out and not self._in_flight:
            return
        self._idle.clear()
        self._wake.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), timeout)

    # -- inbound -------------------------------------------------------------------------

    def receive(self, data: bytes) -> None:
        """Handle one received frame (called by the transport for every frame)."""
        if self.closed:
            return
        self.traffic.bytes_in += len(data)
        self.last_rx = self._clock.monotonic()
        if self.handler is not None:
            self.handler.receive(data)

    # -- outbound (the Outbound port) ----------------------------------------------------

    def send(self, data: bytes) -> None:
        """Queue control bytes (acks, heartbeats) for the next outbound frame.

        They cannot be read back later: the one that would take the buffer past the limit
        disconnects the client (``slow client``), e.g. a publisher that asks for acks and
        never reads them.
        """
        if self.closing:
            return
        if self._out_bytes + self._in_flight + len(data) > self._limit:
            self.overflow(len(data))
            return
        self._queue(data)

    def send_messages(self, data: bytes, count: int) -> None:
        """Queue ``count`` encoded data messages joined in ``data``: live ones the caller
        checked with :meth:`live_fits`, or paced ones (replays wait for room first)."""
        if self.closing:
            return
        self.traffic.msgs_out += count
        self._queue(data)

    def live_fits(self, nbytes: int, *, readable: bool) -> bool:
        """Whether ``nbytes`` of live messages may be queued now (``readable``: their
        subscriptions could read them back from the log instead).

        :meth:`BufferLimits.live_fits`, inlined: the fan-out asks once per run.
        """
        depth = self._out_bytes + self._in_flight + nbytes
        return depth <= (self._spill_at if readable else self._limit)

    def overflow(self, nbytes: int) -> None:
        """Bytes that cannot be read back do not fit: disconnect with ``slow client``."""
        if self.closing:
            return
        self.close_cause = "slow_client_buffer"  # closing: nothing more is queued
        self._events.emit(
            "warning",
            "session",
            "slow_client",
            client=self.name,
            remote=self.remote,
            cause="buffer",
            buffered=self.queue_depth,
            refused=nbytes,
            limit=self.limits.limit,
        )
        self._out.clear()
        self._out_bytes = 0
        self._breaks = 0
        self.close_soon(SlowClient.reason, cause="slow_client_buffer")

    def _queue(self, data: bytes) -> None:
        self._out.append(data)
        self._out_bytes += len(data)
        self._wake.set()

    def send_batch(self, data: bytes, count: int) -> None:
        """Queue ``count`` data messages as a frame of their own (a SOW query batch of
        ``bs`` records): nothing queued before or after joins that frame."""
        if self.closing:
            return
        out = self._out
        if out and out[-1] is not None:
            out.append(None)
            self._breaks += 1
        self.send_messages(data, count)
        if not self.closing and self._out:
            self._out.append(None)
            self._breaks += 1

    def ack(
        self,
        kind: str,
        cid: str | None,
        status: str = "success",
        reason: str | None = None,
        **fields: AckValue,
    ) -> None:
        self.send(encode_ack(kind, cid=cid, status=status, reason=reason, **fields))

    def fail(self, cid: str | None, exc: ProtocolFailure, **fields: AckValue) -> None:
        """A failure ack with the reason string of docs/protocol.md (always sent)."""
        self.send(
            encode_ack(
                "processed", cid=cid, status="failure", reason=exc.reason,
                detail=exc.detail or None, **exc.ack_fields(), **fields,
            )
        )  # fmt: skip

    def has_room(self) -> bool:
        return self.limits.has_room(self.queue_depth)

    @property
    def piece_bytes(self) -> int:
        return self.limits.piece_max

    async def wait_room(self) -> None:
        """Wait until the outbound buffer is below the paced producers' mark (L/4)."""
        while not self.closed and not self.has_room():
            self._room.clear()
            await self._room.wait()

    async def _write_loop(self) -> None:
        # a frame leaves as its list of pieces: the transport writes them after the
        # frame's header without joining them (web/wsdirect.py), or joins them itself
        send = self.transport.send_pieces
        clock = self._clock
        frame_max = self.limits.frame_max
        pieces: list[bytes]
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                while self._out:
                    out = self._out
                    if self._breaks:
                        pieces, size = self._take_frame(out, frame_max)
                        if not size:
                            continue
                    elif self._out_bytes <= frame_max:
                        pieces = cast(list[bytes], out)  # no None without breaks
                        size = self._out_bytes
                        self._out = []
                    else:
                        # up to frame_max, never splitting a piece (a piece holds whole
                        # messages); a piece larger than that leaves alone
                        size = 0
                        n = 0
                        for piece in out:
                            assert piece is not None  # no boundary without breaks
                            if n and size + len(piece) > frame_max:
                                break
                            size += len(piece)
                            n += 1
                        pieces = cast(list[bytes], out[:n])
                        del out[:n]
                    self._out_bytes -= size
                    self._in_flight = size
                    self.send_started = clock.monotonic()
                    await send(pieces, size)
                    self.send_started = None
                    self.traffic.bytes_out += size
                    self._in_flight = 0
                    if not self._room.is_set() and self.has_room():
                        self._room.set()
                if not self._room.is_set():
                    self._room.set()
                self._idle.set()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the connection went away under us
            if not self.closed:
                self._events.emit(
                    "info",
                    "session",
                    "send_failed",
                    client=self.name,
                    remote=self.remote,
                    error=type(exc).__name__,
                )
                self.close_soon("connection lost", CLOSE_NORMAL, cause="client")

    def _take_frame(self, out: list[bytes | None], frame_max: int) -> tuple[list[bytes], int]:
        """The next frame from a buffer with boundaries, as its pieces and their size:
        pieces up to the next boundary (consumed) or ``frame_max`` (a piece is never
        split; one larger than that goes alone); none when the buffer starts with a
        boundary."""
        pieces: list[bytes] = []
        size = 0
        cut = len(out)
        for i, piece in enumerate(out):
            if piece is None:
                cut = i + 1
                self._breaks -= 1
                break
            if pieces and size + len(piece) > frame_max:
                cut = i
                break
            pieces.append(piece)
            size += len(piece)
        del out[:cut]
        return pieces, size

    # -- heartbeats ----------------------------------------------------------------------

    def start_heartbeat(self, interval: float) -> None:
        """Beat every ``interval`` seconds; two silent intervals from the client close it."""
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            self._heartbeat = None
        self.heartbeat_interval = interval
        if interval > 0:
            self.last_rx = self._clock.monotonic()
            self._heartbeat = asyncio.get_running_loop().create_task(self._heartbeat_loop())

    async def _heartbeat_loop(self) -> None:
        clock = self._clock
        interval = self.heartbeat_interval
        while not self.closed:
            await clock.sleep(interval)
            if clock.monotonic() - self.last_rx > 2 * interval:
                self._events.emit(
                    "warning",
                    "session",
                    "heartbeat_timeout",
                    client=self.name,
                    remote=self.remote,
                    interval=interval,
                )
                await self.close(HeartbeatTimeout.reason, cause="heartbeat")
                return
            self.send(_BEAT)
