"""One connected client: the outbound buffer and its writer, heartbeats, slow-client limits.

The transport (the websocket adapter in web/transport.py) hands every received frame to
:meth:`Session.receive`, which passes it to the connection's
:class:`~server.ports.FrameHandler` (the dispatcher, server/dispatch.py). Everything the
broker sends goes through one outbound buffer drained by a single writer task, so all
messages that become ready in one turn of the event loop leave in one WebSocket frame
(frame batching). A session is an :class:`~server.ports.Outbound`: the publish pipeline,
the fan-out, the replay sinks and the acks send through that interface only.

The outbound buffer is bounded by ``Tuning/SlowClientBufferLimit``: a client that stops
reading makes the transport's ``send`` wait (uvicorn applies TCP flow control), the buffer
grows, and past the limit the client is disconnected with ``slow client`` while everyone
else keeps receiving. Replays never hit that limit: they wait for room (:meth:`wait_room`).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Final, Protocol

from server.clock import Clock
from server.config import UserConfig
from server.peer import Peer
from server.ports import AckValue, FrameHandler, Origin, Traffic
from server.protocol.commands import encode_ack
from server.protocol.errors import HeartbeatTimeout, ProtocolFailure, SlowClient
from server.stats.source import EventSink
from server.subscription import Subscription

#: WebSocket close codes used by the broker.
CLOSE_NORMAL: Final = 1000
CLOSE_GOING_AWAY: Final = 1001
CLOSE_INVALID_DATA: Final = 1007
CLOSE_POLICY: Final = 1008

#: a replay waits for room when the outbound buffer is above this fraction of the limit.
_REPLAY_HIGH_WATER: Final = 0.25
#: largest frame the writer builds from the buffer (several frames leave when more is queued).
_MAX_FRAME: Final = 1 << 20
_BEAT: Final = b'{"c":"heartbeat","l":0}'


class Transport(Protocol):
    """What a session needs from its connection."""

    remote: str

    async def send(self, frame: bytes) -> None: ...

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
        name: the client name, once logged on.
        user: the authenticated user (None without users).
        user_name: the user's name, or the ``user_id`` given when there are no users.
        pub_hash: the publisher id of the client name (its records' bookmarks).
        version: the client's version string from the logon.
        origin: the session as the publish pipeline sees it (None before logon).
        subs: its subscriptions by sub id (kept by server/subscriptions.py).
        handler: where received frames go (the dispatcher).
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
    ) -> None:
        self.transport = transport
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
        self.origin: Origin | None = None
        self.subs: dict[str, Subscription] = {}
        self.handler: FrameHandler | None = None
        #: pieces to send; None marks a frame boundary (send_batch)
        self._out: list[bytes | None] = []
        self._out_bytes = 0
        self._breaks = 0
        self._in_flight = 0
        self._buffer_limit = buffer_limit
        self._wake = asyncio.Event()
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
    def queue_depth(self) -> int:
        """Bytes waiting to be sent (buffered plus the frame being written)."""
        return self._out_bytes + self._in_flight

    async def close(
        self, reason: str | None = None, code: int = CLOSE_POLICY, *, drain: bool = False
    ) -> None:
        """Close the connection with a PROTOCOL.md reason and forget the session.

        With ``drain`` (graceful shutdown) what is already buffered is sent first, for at
        most two seconds.
        """
        if self.closed:
            return
        self.closed = True
        self.close_reason = reason
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

    def close_soon(self, reason: str, code: int = CLOSE_POLICY) -> None:
        """Schedule :meth:`close` from synchronous code."""
        if not self.closed:
            asyncio.get_running_loop().create_task(self.close(reason, code))

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
        """Queue bytes (one or more encoded messages) for the next outbound frame."""
        if self.closed:
            return
        self._out.append(data)
        self._out_bytes += len(data)
        if self._out_bytes + self._in_flight > self._buffer_limit:
            self._events.emit(
                "warning",
                "session",
                "slow_client",
                client=self.name,
                remote=self.remote,
                buffered=self._out_bytes + self._in_flight,
                limit=self._buffer_limit,
            )
            self._out.clear()
            self._out_bytes = 0
            self._breaks = 0
            self.close_soon(SlowClient.reason)
            return
        self._wake.set()

    def send_messages(self, data: bytes, count: int) -> None:
        """Queue ``count`` encoded data messages joined in ``data``."""
        self.traffic.msgs_out += count
        self.send(data)

    def send_batch(self, data: bytes, count: int) -> None:
        """Queue ``count`` data messages as a frame of their own (a SOW query batch of
        ``bs`` records): nothing queued before or after joins that frame."""
        if self.closed:
            return
        out = self._out
        if out and out[-1] is not None:
            out.append(None)
            self._breaks += 1
        self.send_messages(data, count)
        if not self.closed and self._out:
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

    def fail(self, cid: str | None, exc: ProtocolFailure) -> None:
        """A failure ack with the reason string of PROTOCOL.md (always sent)."""
        self.send(
            encode_ack(
                "processed", cid=cid, status="failure", reason=exc.reason,
                detail=exc.detail or None, **exc.ack_fields(),
            )
        )  # fmt: skip

    def has_room(self) -> bool:
        return self.queue_depth < self._buffer_limit * _REPLAY_HIGH_WATER

    async def wait_room(self) -> None:
        """Wait until the outbound buffer is below the replay high-water mark."""
        while not self.closed and not self.has_room():
            self._room.clear()
            await self._room.wait()

    async def _write_loop(self) -> None:
        send = self.transport.send
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                while self._out:
                    out = self._out
                    if self._breaks:
                        frame = self._take_frame(out)
                        if not frame:
                            continue
                    elif self._out_bytes <= _MAX_FRAME:
                        frame = b"".join(out)  # type: ignore[arg-type]  # no None without breaks
                        self._out = []
                    else:
                        size = 0
                        n = 0
                        for n, piece in enumerate(out, 1):  # noqa: B007
                            assert piece is not None
                            size += len(piece)
                            if size >= _MAX_FRAME:
                                break
                        frame = b"".join(out[:n])  # type: ignore[arg-type]
                        del out[:n]
                    self._out_bytes -= len(frame)
                    self._in_flight = len(frame)
                    await send(frame)
                    self.traffic.bytes_out += len(frame)
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
                self.close_soon("connection lost", CLOSE_NORMAL)

    def _take_frame(self, out: list[bytes | None]) -> bytes:
        """The next frame from a buffer with boundaries: pieces up to the next boundary
        (consumed) or :data:`_MAX_FRAME`; empty when the buffer starts with a boundary."""
        pieces: list[bytes] = []
        size = 0
        cut = len(out)
        for i, piece in enumerate(out):
            if piece is None:
                cut = i + 1
                self._breaks -= 1
                break
            pieces.append(piece)
            size += len(piece)
            if size >= _MAX_FRAME:
                cut = i + 1
                break
        del out[:cut]
        return b"".join(pieces)

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
                await self.close(HeartbeatTimeout.reason)
                return
            self.send(_BEAT)
