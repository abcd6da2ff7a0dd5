"""One connected client: logon, outbound batching, heartbeats, slow-client limits.

The transport (websocket adapter in web/transport.py) hands every received frame to
:meth:`Session.receive`; the session decodes it with the sans-I/O codec and dispatches the
commands to the :class:`~server.engine.Broker`. Everything the session sends goes through
one outbound buffer drained by a single writer task, so all messages that become ready in
one turn of the event loop leave in one WebSocket frame (frame batching).

The outbound buffer is bounded by ``Tuning/SlowClientBufferLimit``: a client that stops
reading makes the transport's ``send`` wait (uvicorn applies TCP flow control), the buffer
grows, and past the limit the client is disconnected with ``slow client`` while everyone
else keeps receiving. Replays never hit that limit: they wait for room (:meth:`wait_room`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from typing import TYPE_CHECKING, Any, Final, Protocol

from server.protocol.commands import Command, UnknownCommand, decode_command, encode_ack
from server.protocol.errors import (
    HeartbeatTimeout,
    InvalidCommand,
    InvalidMessage,
    InvalidOptions,
    LogonRequired,
    ProtocolFailure,
    SlowClient,
)
from server.protocol.frame import FrameError, parse_frame

if TYPE_CHECKING:
    from server.config import UserConfig
    from server.engine import Broker
    from server.subscription import Subscription
    from server.txlog.log import Located

#: WebSocket close codes used by the broker.
CLOSE_NORMAL: Final = 1000
CLOSE_GOING_AWAY: Final = 1001
CLOSE_INVALID_DATA: Final = 1007
CLOSE_POLICY: Final = 1008

#: a replay waits for room when the outbound buffer is above this fraction of the limit.
_REPLAY_HIGH_WATER: Final = 0.25
#: largest frame the writer builds from the buffer (several frames leave when more is queued).
_MAX_FRAME: Final = 1 << 20


class Transport(Protocol):
    """What a session needs from its connection."""

    remote: str

    async def send(self, frame: bytes) -> None: ...

    async def close(self, code: int, reason: str) -> None: ...


class Session:
    """State of one client connection. Owned by the event loop."""

    def __init__(self, broker: Broker, transport: Transport, *, buffer_limit: int) -> None:
        self.broker = broker
        self.transport = transport
        self.remote = transport.remote
        self.name: str | None = None
        self.user: UserConfig | None = None
        self.user_name: str | None = None
        self.pub_hash = 0
        self.version = ""
        self.connected_at = broker.clock.time()
        self.subs: dict[str, Subscription] = {}
        self.msgs_in = 0
        self.msgs_out = 0
        self.bytes_in = 0
        self.bytes_out = 0
        self.last_persisted_seq = 0
        #: (local seq, publisher seq, monotonic arrival) of publishes awaiting a persisted ack
        self.pending_persist: deque[tuple[int, int, float]] = deque()
        #: flush commands waiting for durability: (local seq, cid)
        self.pending_flush: deque[tuple[int, str | None]] = deque()
        self._out: list[bytes] = []
        self._out_bytes = 0
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
        self.last_rx = broker.clock.monotonic()
        self.closed = False
        self.close_reason: str | None = None
        self.closed_event = asyncio.Event()
        #: a command being prepared off the loop (logon authentication, replay lookups);
        #: commands arriving meanwhile wait in _backlog, in order
        self._waiting: asyncio.Task[None] | None = None
        self._backlog: list[Command] = []

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        self._writer = asyncio.get_running_loop().create_task(self._write_loop())

    @property
    def logged_on(self) -> bool:
        return self.name is not None

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
        self.broker.session_closed(self)
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

    # -- outbound ------------------------------------------------------------------------

    def send(self, data: bytes) -> None:
        """Queue bytes (one or more encoded messages) for the next outbound frame."""
        if self.closed:
            return
        self._out.append(data)
        self._out_bytes += len(data)
        if self._out_bytes + self._in_flight > self._buffer_limit:
            self.broker.events.emit(
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
            self.close_soon(SlowClient.reason)
            return
        self._wake.set()

    def send_message(self, data: bytes) -> None:
        """Queue one data message (counted in msgs_out)."""
        self.msgs_out += 1
        self.send(data)

    def send_messages(self, data: bytes, count: int) -> None:
        """Queue ``count`` encoded data messages joined in ``data``."""
        self.msgs_out += count
        self.send(data)

    def ack(
        self,
        kind: str,
        cid: str | None,
        status: str = "success",
        reason: str | None = None,
        **fields: Any,
    ) -> None:
        self.send(encode_ack(kind, cid=cid, status=status, reason=reason, **fields))

    def fail(self, cid: str | None, exc: ProtocolFailure, kind: str = "processed") -> None:
        """A failure ack with the reason string of PROTOCOL.md (always sent)."""
        self.send(
            encode_ack(
                kind, cid=cid, status="failure", reason=exc.reason, detail=exc.detail or None
            )
        )

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
                    if self._out_bytes <= _MAX_FRAME:
                        frame = b"".join(out)
                        self._out = []
                    else:
                        size = 0
                        n = 0
                        for n, piece in enumerate(out, 1):  # noqa: B007
                            size += len(piece)
                            if size >= _MAX_FRAME:
                                break
                        frame = b"".join(out[:n])
                        del out[:n]
                    self._out_bytes -= len(frame)
                    self._in_flight = len(frame)
                    await send(frame)
                    self.bytes_out += len(frame)
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
                self.broker.events.emit(
                    "info",
                    "session",
                    "send_failed",
                    client=self.name,
                    remote=self.remote,
                    error=type(exc).__name__,
                )
                self.close_soon("connection lost", CLOSE_NORMAL)

    # -- inbound -------------------------------------------------------------------------

    def receive(self, data: bytes) -> None:
        """Handle one received frame (called by the transport for every frame)."""
        if self.closed:
            return
        self.bytes_in += len(data)
        self.last_rx = self.broker.clock.monotonic()
        parsed = parse_frame(data)
        broker = self.broker
        msgs = parsed.messages
        n = len(msgs)
        i = 0
        while i < n:
            if self.closed:
                return
            if self.name is not None and self._waiting is None and not broker.stopping:
                # the hot path: runs of plain publishes, batched
                j = broker.publish_run(self, msgs, i)
                if j > i:
                    i = j
                    continue
            msg = msgs[i]
            i += 1
            try:
                cmd = decode_command(msg)
            except UnknownCommand as exc:
                self.fail(exc.cid, InvalidCommand(exc.detail))
                continue
            except InvalidMessage as exc:
                cid = getattr(exc, "cid", None)
                self.fail(cid, InvalidMessage(exc.detail))
                continue
            if (
                cmd.name == "publish"
                and self.name is not None
                and self._waiting is None
                and not broker.stopping
            ):
                # the hot path: a logged-on publish skips the general dispatch
                if "received" in cmd.acks:
                    self.ack("received", cmd.cid)
                try:
                    broker.publish(self, cmd)
                except ProtocolFailure as exc:
                    self.fail(cmd.cid, exc)
                continue
            self.dispatch(cmd)
        if parsed.error is not None:
            self._bad_frame(parsed.error)

    def _bad_frame(self, err: FrameError) -> None:
        self.broker.events.emit(
            "warning",
            "session",
            "invalid_frame",
            client=self.name,
            remote=self.remote,
            detail=err.detail,
        )
        if err.cid is not None:
            self.fail(err.cid, InvalidMessage(err.detail))
        else:
            self.close_soon(f"{InvalidMessage.reason}: {err.detail}"[:120], CLOSE_INVALID_DATA)

    def dispatch(self, cmd: Command) -> None:
        """Run one command; failures become failure acks, never exceptions."""
        if self._waiting is not None:
            # a command is being prepared off the loop: keep order, run these after it
            self._backlog.append(cmd)
            return
        if "received" in cmd.acks:
            self.ack("received", cmd.cid)
        self._run(cmd)

    def _run(self, cmd: Command, located: Located | None = None, prefetched: bool = False) -> None:
        try:
            if cmd.name == "logon":
                self.broker.check_logon(self, cmd)
                if self.broker.auth.enabled:
                    self._waiting = asyncio.get_running_loop().create_task(self._logon(cmd))
                else:
                    self.broker.logon(self, cmd, None)
                return
            if self.name is None:
                raise LogonRequired("the first command must be logon")
            if cmd.name == "heartbeat":
                self._heartbeat_command(cmd)
                return
            if prefetched:
                self.broker.execute_prefetched(self, cmd, located)
            elif self.broker.lookups_to_prefetch(cmd):
                self._waiting = asyncio.get_running_loop().create_task(self._prefetch(cmd))
            else:
                self.broker.execute(self, cmd)
        except ProtocolFailure as exc:
            self.fail(cmd.cid, exc)
            if cmd.name == "logon" and self.name is None:
                self.close_soon(exc.reason)

    async def _logon(self, cmd: Command) -> None:
        """Authenticate off the loop, then log on and run what arrived meanwhile."""
        try:
            user = await self.broker.authenticate(self, cmd)
            if not self.closed:
                self.broker.logon(self, cmd, user)
        except ProtocolFailure as exc:
            self.fail(cmd.cid, exc)
            self.close_soon(exc.reason)
        finally:
            self._waiting = None
        self._drain_backlog()

    async def _prefetch(self, cmd: Command) -> None:
        """Resolve a replay's log lookups in a thread, then run the command."""
        located: Located | None = None
        try:
            located = await self.broker.prefetch_lookups(cmd)
        except Exception as exc:  # planning repeats the lookup and reports what is wrong
            self.broker.events.emit(
                "warning", "session", "lookup_failed", client=self.name, error=repr(exc)
            )
        finally:
            self._waiting = None
        if not self.closed:
            self._run(cmd, located, prefetched=True)
        self._drain_backlog()

    def _drain_backlog(self) -> None:
        """Run what waited, in order, until one of them has to wait again."""
        while self._backlog and self._waiting is None:
            if self.closed:
                self._backlog.clear()
                return
            self.dispatch(self._backlog.pop(0))

    # -- heartbeats ----------------------------------------------------------------------

    def _heartbeat_command(self, cmd: Command) -> None:
        opts = (cmd.options or "").strip()
        if opts == "beat" or not opts:
            if "processed" in cmd.acks:
                self.ack("processed", cmd.cid)
            return
        parts = [p.strip() for p in opts.split(",")]
        if parts[0] != "start":
            raise InvalidOptions(f"heartbeat options must be 'start,N' or 'beat', not {opts!r}")
        try:
            interval = float(parts[1]) if len(parts) > 1 else 30.0
        except ValueError as exc:
            raise InvalidOptions(f"bad heartbeat interval {parts[1]!r}") from exc
        self.start_heartbeat(interval)
        if "processed" in cmd.acks:
            self.ack("processed", cmd.cid)

    def start_heartbeat(self, interval: float) -> None:
        """Beat every ``interval`` seconds; two silent intervals from the client close it."""
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            self._heartbeat = None
        self.heartbeat_interval = interval
        if interval > 0:
            self.last_rx = self.broker.clock.monotonic()
            self._heartbeat = asyncio.get_running_loop().create_task(self._heartbeat_loop())

    async def _heartbeat_loop(self) -> None:
        clock = self.broker.clock
        interval = self.heartbeat_interval
        beat = b'{"c":"heartbeat","l":0}'
        while not self.closed:
            await clock.sleep(interval)
            if clock.monotonic() - self.last_rx > 2 * interval:
                self.broker.events.emit(
                    "warning",
                    "session",
                    "heartbeat_timeout",
                    client=self.name,
                    remote=self.remote,
                    interval=interval,
                )
                await self.close(HeartbeatTimeout.reason)
                return
            self.send(beat)
