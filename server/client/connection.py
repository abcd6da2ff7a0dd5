"""The client's transport: one connection to the broker, bytes in and bytes out.

The transport knows frames, not messages. It is given three callables
(:class:`Handlers`): where a received frame goes, where the next outbound frame comes
from, and whom to tell that the connection ended. Its tasks are the connection's I/O:

- a reader that hands every received frame to ``frame_received`` (awaited, so a consumer
  that stops reading stops the reader, and TCP backpressure reaches the broker);
- a writer that, woken by :meth:`ClientTransport.flush_soon`, sends whatever ``data_to_send``
  returns: it runs once per loop turn at most, so everything queued in one turn leaves in
  one frame;
- an optional heartbeat timer that calls a ``beat`` callable every interval, and the
  time of the last received frame, for a caller that wants to notice a silent broker.

:class:`ClientTransport` is the small protocol the client depends on, so a test double or
another transport (TLS options, a different library) fits; :class:`WebSocketTransport`
implements it with the ``websockets`` library, permessage-deflate off (it costs 40-60% of
the throughput on loopback; docs/configuration.md, ``PerMessageDeflate``) and the library's own keepalive pings
off (Spool has protocol heartbeats).
"""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import secrets
import ssl
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final, Protocol
from urllib.parse import urlsplit

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus
from websockets.frames import Opcode

from spool.server.client.websocket import (
    Closed,
    Event,
    HandshakeRejected,
    Inbound,
    Ping,
    Violation,
    WebSocketMessage,
    encode_close,
    encode_frame,
    handshake_request,
    parse_handshake_response,
    refusal_text,
)


class HandshakeFailed(ConnectionError):
    """The websocket upgrade did not complete: the broker refused it with an HTTP status
    (``status``, e.g. 403 for a browser origin it does not allow), or the connection ended
    or answered something else before it finished (a broker killed or restarting).

    A :class:`ConnectionError` (an ``OSError``) like a refused TCP connection, so a loop
    that retries connections also retries one lost while it was being made (websockets'
    own handshake exceptions are not ``OSError``).
    """

    def __init__(self, reason: str, status: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status


@dataclass(frozen=True, slots=True)
class Handlers:
    """What a transport calls.

    Attributes:
        frame_received: takes one received frame; awaited before the next is read.
        data_to_send: returns the next outbound frame, ``b""`` when there is none.
        connection_lost: told once, with the close reason and code the peer sent (empty
            and ``None`` when there was no close frame), when the reader stops.
    """

    frame_received: Callable[[bytes], Awaitable[None]]
    data_to_send: Callable[[], bytes]
    connection_lost: Callable[[str, int | None], None]


class ClientTransport(Protocol):
    """One open connection, as the client uses it."""

    @property
    def last_received(self) -> float:
        """Event-loop time of the last received frame (of the connect, before any). While
        the application holds the reader up (a frame's handler waits for room in a full
        subscription buffer) it is *now*, and the time the handler returned after that: a
        connection is not silent while nobody reads it (a liveness check must not take a
        busy consumer for a dead broker)."""
        ...

    def flush_soon(self) -> None:
        """Send what ``data_to_send`` has on a coming loop turn, in one frame."""
        ...

    async def flush(self) -> None:
        """Send what ``data_to_send`` has now."""
        ...

    async def send(self, frame: bytes) -> None:
        """Send what is queued, then ``frame`` as its own frame, untouched."""
        ...

    def start_heartbeat(self, interval: float, beat: Callable[[], None]) -> None:
        """Call ``beat`` every ``interval`` seconds until the connection ends."""
        ...

    async def close(self, code: int = 1000, reason: str = "") -> None:
        """Send what is queued, close with ``code`` and ``reason``, stop every task.

        Safe to call from inside ``frame_received`` and more than once.
        """
        ...

    def abort(self) -> None:
        """Drop the connection now, without a closing handshake (a peer that stopped
        answering would never complete one); ``connection_lost`` follows."""
        ...


class Connector(Protocol):
    """Opens a :class:`ClientTransport` (the client's ``connector`` argument).

    ``ssl`` is the TLS context for a ``wss://`` URL (None: the library's default, which
    verifies against the system's CAs).
    """

    def __call__(
        self,
        url: str,
        handlers: Handlers,
        *,
        open_timeout: float,
        max_size: int | None,
        ssl: ssl.SSLContext | None = None,
    ) -> Awaitable[ClientTransport]: ...


class TransportClosed(ConnectionError):
    """A frame was to be sent on a connection that has ended or is closing."""


class _FrameTransport(ABC):
    """What both transports share: the writer task, the heartbeat, the report of the end
    and the stopping of the tasks. A subclass sends one frame (:meth:`_send_frame`),
    reads (:meth:`_read`) and does its closing handshake."""

    #: what ``_send_frame`` raises once the connection has ended
    _CLOSED: tuple[type[Exception], ...] = (ConnectionClosed, TransportClosed)

    def __init__(self, handlers: Handlers) -> None:
        loop = asyncio.get_running_loop()
        self._handlers = handlers
        self._wake = asyncio.Event()
        self._last_received = loop.time()
        #: a received frame's handler is running (it may wait for the application)
        self._handling = False
        self._heartbeat: asyncio.Task[None] | None = None
        self._reader = loop.create_task(self._read())
        self._writer = loop.create_task(self._write())

    @property
    def last_received(self) -> float:
        if self._handling:
            return asyncio.get_running_loop().time()
        return self._last_received

    async def _handle(self, frame: bytes, loop: asyncio.AbstractEventLoop) -> None:
        """Hand one frame to the handler (see :attr:`last_received`)."""
        self._last_received = loop.time()
        self._handling = True
        try:
            await self._handlers.frame_received(frame)
        finally:
            self._handling = False
            self._last_received = loop.time()

    @abstractmethod
    async def _send_frame(self, frame: bytes) -> None:
        """Send one frame on the connection (raises one of :attr:`_CLOSED` once it ended)."""

    @abstractmethod
    async def _read(self) -> None:
        """Read until the connection ends, handing each message to the handlers."""

    # -- out -----------------------------------------------------------------------------

    def flush_soon(self) -> None:
        self._wake.set()

    async def flush(self) -> None:
        while frame := self._handlers.data_to_send():
            await self._send_frame(frame)

    async def send(self, frame: bytes) -> None:
        await self.flush()
        await self._send_frame(frame)

    async def _write(self) -> None:
        wake = self._wake
        try:
            while True:
                await wake.wait()
                wake.clear()
                await self.flush()
        except self._CLOSED:
            pass

    # -- heartbeat -----------------------------------------------------------------------

    def start_heartbeat(self, interval: float, beat: Callable[[], None]) -> None:
        self._stop_heartbeat()
        self._heartbeat = asyncio.get_running_loop().create_task(self._beat(interval, beat))

    @staticmethod
    async def _beat(interval: float, beat: Callable[[], None]) -> None:
        while True:
            await asyncio.sleep(interval)
            beat()

    def _stop_heartbeat(self) -> None:
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            self._heartbeat = None

    # -- end -----------------------------------------------------------------------------

    def _report_end(self, code: int | None, reason: str) -> None:
        """The reader stopped: tell the handlers once (no close frame: ``None``)."""
        self._stop_heartbeat()
        self._handlers.connection_lost(reason if code is not None else "", code)

    async def _stop_tasks(self) -> None:
        """Stop the reader and writer, except the one we run in (a frame handler may
        close its own connection); the reader reports as it stops."""
        current = asyncio.current_task()
        for task in (self._reader, self._writer):
            if task is current:
                continue
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


class WebSocketTransport(_FrameTransport):
    """:class:`ClientTransport` over a ``websockets`` client connection."""

    def __init__(self, ws: ClientConnection, handlers: Handlers) -> None:
        self._ws = ws
        super().__init__(handlers)

    @classmethod
    async def open(
        cls,
        url: str,
        handlers: Handlers,
        *,
        open_timeout: float = 10.0,
        max_size: int | None = 64 * 1024 * 1024,
        ssl: ssl.SSLContext | None = None,
    ) -> WebSocketTransport:
        """Connect to ``url`` (``ws://`` or ``wss://host:port/amps/json``) and start
        reading. A ``wss://`` URL verifies the broker's certificate (``ssl``, or the
        system's CAs)."""
        try:
            ws = await connect(
                url,
                compression=None,
                max_size=max_size,
                open_timeout=open_timeout,
                ping_interval=None,
                ssl=ssl,
            )
        except InvalidStatus as exc:
            status = exc.response.status_code
            text = refusal_text(exc.response.body or b"")
            raise HandshakeFailed(
                f"the broker refused the upgrade: HTTP {status}" + (f": {text}" if text else ""),
                status,
            ) from exc
        except InvalidHandshake as exc:
            raise HandshakeFailed(f"websocket handshake failed: {exc}") from exc
        return cls(ws, handlers)

    async def _send_frame(self, frame: bytes) -> None:
        await self._ws.send(frame)

    # -- in ------------------------------------------------------------------------------

    async def _read(self) -> None:
        ws = self._ws
        loop = asyncio.get_running_loop()
        try:
            async for frame in ws:
                await self._handle(frame if isinstance(frame, bytes) else frame.encode(), loop)
        except ConnectionClosed:
            pass
        finally:
            rcvd = ws.protocol.close_rcvd
            self._report_end(rcvd.code if rcvd is not None else None,
                             rcvd.reason if rcvd is not None else "")  # fmt: skip

    # -- end -----------------------------------------------------------------------------

    def abort(self) -> None:
        self._stop_heartbeat()
        self._ws.transport.abort()

    async def close(self, code: int = 1000, reason: str = "") -> None:
        # 1. no more beats; 2. what is queued still leaves; 3. the closing handshake;
        # 4. stop the tasks (the reader tells connection_lost as it stops), except the
        #    one we run in when a frame handler closes the connection.
        self._stop_heartbeat()
        with contextlib.suppress(Exception):
            await self.flush()
        with contextlib.suppress(Exception):
            await self._ws.close(code, reason)
        await self._stop_tasks()


QUEUE_HIGH: Final = 4 * 1024 * 1024
"""Received bytes waiting for the frame handler above which the socket stops being read
(TCP backpressure reaches the broker); reading resumes below :data:`QUEUE_LOW`."""
QUEUE_LOW: Final = 1024 * 1024
CLOSE_TIMEOUT: Final = 10.0
"""How long :meth:`StreamTransport.close` waits for the broker's side of the closing
handshake before it drops the connection."""


class _Stream(asyncio.BufferedProtocol):
    """The socket's side of a :class:`StreamTransport`: reads land in the buffer of an
    :class:`~spool.server.client.websocket.Inbound` (after the handshake's response head), whole
    messages wait in a deque for the transport's reader task."""

    def __init__(self, key: str, max_size: int | None) -> None:
        loop = asyncio.get_running_loop()
        self.key = key
        self.inbound = Inbound(max_size)
        self.transport: asyncio.Transport | None = None
        self.opened: asyncio.Future[None] = loop.create_future()
        self.ended = asyncio.Event()
        self.wake = asyncio.Event()
        self.writable = asyncio.Event()
        self.writable.set()
        self.messages: collections.deque[bytes] = collections.deque()
        self.queued = 0
        self.paused = False
        self.close_sent = False
        self.close_rcvd: Closed | None = None
        self._head: bytearray | None = bytearray()
        self._head_room = bytearray(16 * 1024)

    # -- asyncio callbacks ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._head is not None:
            return memoryview(self._head_room)
        return self.inbound.room()

    def buffer_updated(self, nbytes: int) -> None:
        if self._head is not None:
            self._handshake(nbytes)
        else:
            self._deliver(self.inbound.received(nbytes))

    def eof_received(self) -> bool | None:
        return None  # the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.opened.done():
            # a refusal whose body was cut short is reported with what came of it
            failed = HandshakeFailed("the connection ended during the websocket handshake")
            if self._head is not None:
                try:
                    parse_handshake_response(self._head, self.key, ended=True)
                except HandshakeRejected as rejected:
                    failed = HandshakeFailed(rejected.reason, rejected.status)
            self.opened.set_exception(failed)
        self.ended.set()
        self.wake.set()
        self.writable.set()  # a writer waiting for room finds the connection gone

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()

    # -- what the callbacks do --------------------------------------------------------------

    def _handshake(self, nbytes: int) -> None:
        head = self._head
        assert head is not None
        head += self._head_room[:nbytes]
        try:
            used = parse_handshake_response(head, self.key)
        except HandshakeRejected as exc:
            if not self.opened.done():
                self.opened.set_exception(HandshakeFailed(exc.reason, exc.status))
            self.abort()
            return
        if used is None:
            return
        self._head = None
        self.opened.set_result(None)
        self._deliver(self.inbound.feed(bytes(head[used:])))

    def _deliver(self, events: list[Event]) -> None:
        for event in events:
            if type(event) is WebSocketMessage:
                self.messages.append(event.data)
                self.queued += len(event.data)
            elif type(event) is Ping:
                if self.transport is not None and not self.transport.is_closing():
                    self.transport.write(encode_frame(Opcode.PONG, event.data))
            elif type(event) is Closed:
                self.close_rcvd = event
                if not self.close_sent:  # echo it (RFC 6455 5.5.1), then end
                    self.send_close(event.code if event.code != 1005 else None, "")
                if self.transport is not None:
                    self.transport.close()
            elif type(event) is Violation:
                self.fail(event.code, event.reason)
        if events:
            self.wake.set()
        if self.queued > QUEUE_HIGH and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()

    def taken(self, size: int) -> None:
        """The reader handed on a message of ``size`` bytes."""
        self.queued -= size
        if self.paused and self.queued < QUEUE_LOW:
            self.resume()

    def resume(self) -> None:
        if self.paused and self.transport is not None and not self.transport.is_closing():
            self.paused = False
            self.transport.resume_reading()

    def write(self, data: bytes) -> None:
        if self.transport is None or self.transport.is_closing():
            raise TransportClosed("the connection to the broker is closed")
        self.transport.write(data)

    def send_close(self, code: int | None, reason: str) -> None:
        """Send a close frame once (``code`` None: one without a code)."""
        if self.close_sent or self.transport is None or self.transport.is_closing():
            return
        self.close_sent = True
        payload = (
            encode_close(code, reason) if code is not None else encode_frame(Opcode.CLOSE, b"")
        )
        self.transport.write(payload)

    def fail(self, code: int, reason: str) -> None:
        """End the connection on a protocol violation: a close frame, then the socket."""
        self.send_close(code, reason)
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()


class StreamTransport(_FrameTransport):
    """:class:`ClientTransport` on an asyncio ``BufferedProtocol`` and Spool's own frame reader
    (:mod:`spool.server.client.websocket`): the socket reads into the one buffer the messages
    are sliced from, once. The default transport (docs/python-client.md; why:
    docs/performance-log.md "The Python client reads into one buffer")."""

    def __init__(self, stream: _Stream, handlers: Handlers) -> None:
        self._stream = stream
        super().__init__(handlers)

    @classmethod
    async def open(
        cls,
        url: str,
        handlers: Handlers,
        *,
        open_timeout: float = 10.0,
        max_size: int | None = 64 * 1024 * 1024,
        ssl: ssl.SSLContext | None = None,
    ) -> StreamTransport:
        """Connect to ``url`` (``ws://`` or ``wss://host:port/amps/json``) and start
        reading. A ``wss://`` URL verifies the broker's certificate (``ssl``, or the
        system's CAs)."""
        parts = urlsplit(url)
        if parts.scheme not in ("ws", "wss") or not parts.hostname:
            raise ValueError(f"not a websocket URL: {url!r}")
        secure = parts.scheme == "wss"
        host = parts.hostname
        port = parts.port or (443 if secure else 80)
        context = (ssl if ssl is not None else default_tls_context()) if secure else None
        resource = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        host_header = f"[{host}]" if ":" in host else host
        if parts.port is not None:
            host_header += f":{parts.port}"
        key = base64.b64encode(secrets.token_bytes(16)).decode("ascii")
        loop = asyncio.get_running_loop()
        stream = _Stream(key, max_size)
        try:
            async with asyncio.timeout(open_timeout):
                await loop.create_connection(
                    lambda: stream,
                    host,
                    port,
                    ssl=context,
                    server_hostname=host if context is not None else None,
                )
                stream.write(handshake_request(host_header, resource, key))
                await stream.opened
        except BaseException:
            if not stream.opened.done():
                stream.opened.cancel()  # nobody waits for it any more
            stream.abort()
            raise
        return cls(stream, handlers)

    async def _send_frame(self, frame: bytes) -> None:
        stream = self._stream
        if stream.close_sent:
            raise TransportClosed("the connection to the broker is closing")
        stream.write(encode_frame(Opcode.BINARY, frame))
        if not stream.writable.is_set():
            await stream.writable.wait()
            if stream.ended.is_set():
                raise TransportClosed("the connection to the broker is closed")

    # -- in ------------------------------------------------------------------------------

    async def _read(self) -> None:
        stream = self._stream
        messages = stream.messages
        loop = asyncio.get_running_loop()
        try:
            while True:
                while messages:
                    frame = messages.popleft()
                    stream.taken(len(frame))
                    await self._handle(frame, loop)
                if stream.ended.is_set() and not messages:
                    break
                stream.wake.clear()
                await stream.wake.wait()
        finally:
            rcvd = stream.close_rcvd
            self._report_end(rcvd.code if rcvd is not None else None,
                             rcvd.reason if rcvd is not None else "")  # fmt: skip

    # -- end -----------------------------------------------------------------------------

    def abort(self) -> None:
        self._stop_heartbeat()
        self._stream.abort()

    async def close(self, code: int = 1000, reason: str = "") -> None:
        # As WebSocketTransport.close: beats stop, what is queued leaves, the closing
        # handshake (bounded), then the tasks stop (the reader reports as it stops).
        self._stop_heartbeat()
        stream = self._stream
        with contextlib.suppress(Exception):
            await self.flush()
        stream.send_close(code, reason)
        stream.resume()  # the broker's close must be read even if the handler lags
        try:
            async with asyncio.timeout(CLOSE_TIMEOUT):
                await stream.ended.wait()
        except TimeoutError:
            stream.abort()
        await self._stop_tasks()


def default_tls_context() -> ssl.SSLContext:
    """What a ``wss://`` URL gets without a context: the system's CAs, host names checked."""
    return ssl.create_default_context()


async def connect_websocket(
    url: str,
    handlers: Handlers,
    *,
    open_timeout: float,
    max_size: int | None,
    ssl: ssl.SSLContext | None = None,
) -> ClientTransport:
    """The default :class:`Connector`: a :class:`StreamTransport`."""
    return await StreamTransport.open(
        url, handlers, open_timeout=open_timeout, max_size=max_size, ssl=ssl
    )


async def connect_library_websocket(
    url: str,
    handlers: Handlers,
    *,
    open_timeout: float,
    max_size: int | None,
    ssl: ssl.SSLContext | None = None,
) -> ClientTransport:
    """A :class:`Connector` for the ``websockets`` library's transport
    (:class:`WebSocketTransport`): what the client used before :class:`StreamTransport`,
    kept as its reference in the transport tests."""
    return await WebSocketTransport.open(
        url, handlers, open_timeout=open_timeout, max_size=max_size, ssl=ssl
    )


__all__ = [
    "ClientTransport",
    "Connector",
    "Handlers",
    "StreamTransport",
    "TransportClosed",
    "WebSocketTransport",
    "connect_library_websocket",
    "connect_websocket",
]
