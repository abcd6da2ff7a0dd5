"""The client's transport: one connection to the broker, bytes in and bytes out.

The transport knows frames, not messages. It is given three callables
(:class:`Handlers`): where a received frame goes, where the next outbound frame comes
from, and whom to tell that the connection ended. Its tasks are the connection's I/O:

- a reader that hands every received frame to ``frame_received`` (awaited, so a consumer
  that stops reading stops the reader, and TCP backpressure reaches the broker);
- a writer that, woken by :meth:`Transport.flush_soon`, sends whatever ``data_to_send``
  returns: it runs once per loop turn at most, so everything queued in one turn leaves in
  one frame;
- an optional heartbeat timer that calls a ``beat`` callable every interval, and the
  time of the last received frame, for a caller that wants to notice a silent broker.

:class:`Transport` is the small protocol the client depends on, so a test double or
another transport (TLS options, a different library) fits; :class:`WebSocketTransport`
implements it with the ``websockets`` library, permessage-deflate off (it costs 40-60% of
the throughput on loopback, see the toolchain notes) and the library's own keepalive pings
off (Spool has protocol heartbeats).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus


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


class Transport(Protocol):
    """One open connection, as the client uses it."""

    @property
    def last_received(self) -> float:
        """Event-loop time of the last received frame (of the connect, before any)."""
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
    """Opens a :class:`Transport` (the client's ``connector`` argument).

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
    ) -> Awaitable[Transport]: ...


class WebSocketTransport:
    """:class:`Transport` over a ``websockets`` client connection."""

    def __init__(self, ws: ClientConnection, handlers: Handlers) -> None:
        loop = asyncio.get_running_loop()
        self._ws = ws
        self._handlers = handlers
        self._wake = asyncio.Event()
        self._last_received = loop.time()
        self._heartbeat: asyncio.Task[None] | None = None
        self._reader = loop.create_task(self._read())
        self._writer = loop.create_task(self._write())

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
            raise HandshakeFailed(f"the broker refused the upgrade: HTTP {status}", status) from exc
        except InvalidHandshake as exc:
            raise HandshakeFailed(f"websocket handshake failed: {exc}") from exc
        return cls(ws, handlers)

    @property
    def last_received(self) -> float:
        return self._last_received

    # -- out -----------------------------------------------------------------------------

    def flush_soon(self) -> None:
        self._wake.set()

    async def flush(self) -> None:
        while frame := self._handlers.data_to_send():
            await self._ws.send(frame)

    async def send(self, frame: bytes) -> None:
        await self.flush()
        await self._ws.send(frame)

    async def _write(self) -> None:
        wake = self._wake
        try:
            while True:
                await wake.wait()
                wake.clear()
                await self.flush()
        except ConnectionClosed:
            pass

    # -- in ------------------------------------------------------------------------------

    async def _read(self) -> None:
        ws = self._ws
        received = self._handlers.frame_received
        loop = asyncio.get_running_loop()
        try:
            async for frame in ws:
                self._last_received = loop.time()
                await received(frame if isinstance(frame, bytes) else frame.encode())
        except ConnectionClosed:
            pass
        finally:
            self._stop_heartbeat()
            rcvd = ws.protocol.close_rcvd
            if rcvd is not None:
                self._handlers.connection_lost(rcvd.reason, rcvd.code)
            else:
                self._handlers.connection_lost("", None)

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
        current = asyncio.current_task()
        for task in (self._reader, self._writer):
            if task is current:
                continue
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


async def connect_websocket(
    url: str,
    handlers: Handlers,
    *,
    open_timeout: float,
    max_size: int | None,
    ssl: ssl.SSLContext | None = None,
) -> Transport:
    """The default :class:`Connector`: a :class:`WebSocketTransport`."""
    return await WebSocketTransport.open(
        url, handlers, open_timeout=open_timeout, max_size=max_size, ssl=ssl
    )


__all__ = ["Connector", "Handlers", "Transport", "WebSocketTransport", "connect_websocket"]
