"""The byte pipes under replication links, and the writer between a protocol and its pipe.

The protocol (server/replication/protocol.py) knows bytes; a link's pipe is a websocket:

- a *source* dials its destination with the ``websockets`` client
  (:func:`connect_websocket`, ``ws://HOST:PORT/replication``, or ``wss://`` with the TLS
  context its destination's configuration builds - the destination verified, its host
  name checked, never a fall back to ``ws://``; permessage-deflate off);
- a *destination* is handed its pipe by the web layer (web/replication.py, a raw ASGI
  endpoint beside ``/amps/json``), which pushes received bytes into the inbound link.

Both ends watch the pipe's liveness (server/replication/liveness.py): a link that hears
nothing from its peer for ``Replication/LinkTimeout`` is aborted, and each end pings every
third of it. The dialed end does it here (the library's own keepalive is off: its ping
waits for the write buffer to drain, which a partition prevents), the accepting end in the
web server's protocol (web/wsdirect.py).

Tests replace the dialer with an in-memory pair (tests/support/replication.py).

:class:`LinkWriter` moves what a protocol queued to its pipe: one writer at a time (a
lock), so messages leave in the order the protocol queued them, split into websocket
messages of at most :data:`CHUNK` bytes (the stream does not care where it is split, and
the destination's web server limits one websocket message).

One connection may carry two links, one each way (docs/replication.md "Passive
destinations"): the accepting end runs its own link back over the connection its peer
dialed, as the connection's second conversation. Their two writers then share one lock
(whole messages never interleave), and the second conversation's end on the dialing side
writes through a :class:`SharedTransport`, whose ``close`` ends only the conversation. An
accepted connection that can carry a link back is a :class:`ReturnConnection`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import ssl
from collections.abc import Awaitable, Callable
from typing import Final, Protocol

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI
from websockets.protocol import State

from spool.server.config import format_inet_addr
from spool.server.replication.errors import ReplicationError
from spool.server.replication.frames import Message
from spool.server.replication.liveness import Liveness

__all__ = [
    "CHUNK",
    "Connector",
    "Dialed",
    "LinkLost",
    "LinkTlsFailed",
    "LinkTransport",
    "LinkWriter",
    "ReturnConnection",
    "SharedTransport",
    "connect_websocket",
]

#: largest websocket message a link writes (the stream is split freely)
CHUNK: Final = 1 << 20
#: how long a TCP connect + websocket handshake may take
OPEN_TIMEOUT: Final = 5.0
#: the endpoint path on the destination's web port
PATH: Final = "/replication"


class LinkLost(ReplicationError):
    """The pipe under a link went away (closed, reset, or silent past the link timeout)."""


class LinkTlsFailed(LinkLost):
    """The TLS handshake with a destination failed: its certificate does not verify (CA,
    host name, expiry), it does not speak TLS, or it refused this side's certificate."""


class LinkTransport(Protocol):
    """What a link writes to."""

    @property
    def remote(self) -> str:
        """The peer's address, as shown by the admin API."""
        ...

    async def send(self, data: bytes) -> None:
        """Write bytes (waits while the peer does not read: TCP backpressure).

        Raises:
            LinkLost: the pipe is gone.
        """
        ...

    async def close(self, code: int = 1000, reason: str = "") -> None:
        """Close the pipe (idempotent)."""
        ...


class Dialed(LinkTransport, Protocol):
    """A pipe a source opened: it also reads."""

    async def recv(self) -> bytes:
        """The next bytes from the peer.

        Raises:
            LinkLost: the pipe is gone.
        """
        ...


#: opens a pipe to ``(host, port)``, over TLS with the context when one is given, dropped
#: once it hears nothing for the timeout (seconds); raises OSError / LinkLost
#: (LinkTlsFailed) when it cannot
Connector = Callable[[str, int, ssl.SSLContext | None, float], Awaitable[Dialed]]


class _HeardConnection(ClientConnection):
    """The ``websockets`` client connection, noting when its peer was last heard."""

    liveness: Liveness | None = None

    def data_received(self, data: bytes) -> None:
        liveness = self.liveness
        if liveness is not None:
            liveness.heard(self.loop.time())
        super().data_received(data)


class WebsocketLink:
    """A dialed link over the ``websockets`` client, aborted once silent for ``timeout``
    seconds (server/replication/liveness.py)."""

    def __init__(self, connection: _HeardConnection, remote: str, timeout: float) -> None:
        self._conn = connection
        self._remote = remote
        self._silent: str | None = None
        loop = connection.loop
        self._liveness = connection.liveness = Liveness(timeout, loop.time())
        self._timer: asyncio.TimerHandle | None = loop.call_at(
            loop.time() + self._liveness.interval, self._tick
        )

    @property
    def remote(self) -> str:
        return self._remote

    async def send(self, data: bytes) -> None:
        try:
            await self._conn.send(data)
        except ConnectionClosed as exc:
            raise self._lost(exc) from exc

    async def recv(self) -> bytes:
        try:
            data = await self._conn.recv()
        except ConnectionClosed as exc:
            raise self._lost(exc) from exc
        return data if isinstance(data, bytes) else data.encode()

    async def close(self, code: int = 1000, reason: str = "") -> None:
        self._stop()
        with contextlib.suppress(Exception):
            await self._conn.close(code, reason[:120])

    def _lost(self, exc: ConnectionClosed) -> LinkLost:
        self._stop()
        return LinkLost(self._silent or f"connection to {self._remote} closed: {exc}")

    def _stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _tick(self) -> None:
        """Ping, or abort the connection once its peer was silent for the timeout."""
        self._timer = None
        conn = self._conn
        if conn.protocol.state is not State.OPEN or conn.transport.is_closing():
            return
        liveness = self._liveness
        now = conn.loop.time()
        liveness.listening(conn.transport.is_reading(), now)
        tick = liveness.tick(now)
        if tick.dead:
            self._silent = (
                f"nothing heard from {self._remote} for {liveness.silence(now):.1f}s "
                f"(Replication/LinkTimeout {liveness.timeout:g}s)"
            )
            conn.transport.abort()  # not a polite close: its bytes could not leave either
            return
        if tick.ping:
            # written at once, whatever waits in the write buffer (never awaits a drain)
            conn.protocol.send_ping(os.urandom(4))
            conn.send_data()
        self._timer = conn.loop.call_at(tick.next_at, self._tick)


async def connect_websocket(
    host: str, port: int, tls: ssl.SSLContext | None = None, timeout: float = 6.0
) -> Dialed:
    """Dial a destination's ``/replication`` endpoint (``wss://`` with ``tls``); the link
    is aborted once it hears nothing for ``timeout`` seconds.

    Raises:
        LinkTlsFailed: the TLS handshake failed (the message says why).
        LinkLost: the endpoint refused the websocket (disabled transport, not ready) or
            the handshake failed.
        OSError: no TCP connection (refused, unreachable, timed out).
    """
    address = format_inet_addr(host, port)
    scheme = "wss" if tls is not None else "ws"
    try:
        conn = await connect(
            f"{scheme}://{address}{PATH}",
            ssl=tls,
            compression=None,
            max_size=None,
            ping_interval=None,  # liveness is the link's own (WebsocketLink)
            open_timeout=OPEN_TIMEOUT,
            close_timeout=2.0,
            create_connection=_HeardConnection,
        )
    except ssl.SSLCertVerificationError as exc:
        raise LinkTlsFailed(
            f"TLS with {address}: its certificate does not verify "
            f"({exc.verify_message or exc.reason}); check the Destination's <CACertificate> "
            "and that the certificate names this address"
        ) from exc
    except ssl.SSLError as exc:
        raise LinkTlsFailed(
            f"TLS with {address} failed ({exc.reason or exc}); does it serve TLS, and does "
            "it accept this instance's <Certificate>?"
        ) from exc
    except (InvalidHandshake, InvalidURI) as exc:
        hint = "" if tls is not None else " (if it serves TLS, set <TLS>true</TLS>)"
        raise LinkLost(f"websocket handshake with {address} failed: {exc}{hint}") from exc
    except TimeoutError as exc:
        raise OSError(f"connecting to {address} timed out") from exc
    assert isinstance(conn, _HeardConnection)
    return WebsocketLink(conn, address, timeout)


class SharedTransport:
    """The pipe of a connection, as the second conversation it carries sees it: closing
    it ends the conversation, not the connection (its first conversation owns it)."""

    def __init__(self, transport: LinkTransport) -> None:
        self._transport = transport

    @property
    def remote(self) -> str:
        return self._transport.remote

    async def send(self, data: bytes) -> None:
        await self._transport.send(data)

    async def close(self, code: int = 1000, reason: str = "") -> None:
        return None


class ReturnConnection(Protocol):
    """An accepted connection from a peer, that a destination of this instance for that
    peer may run its link over (the connection's second conversation).

    The destination :meth:`attach` es a sink: from then on the messages of the second
    conversation the connection reads go to it, and ``None`` when the connection is gone.
    """

    @property
    def source(self) -> str:
        """The instance that dialed (its hello's Name)."""
        ...

    @property
    def source_group(self) -> str: ...

    @property
    def remote(self) -> str:
        """The connection's far address."""
        ...

    @property
    def tls(self) -> bool:
        """Whether the connection is TLS."""
        ...

    @property
    def carrying(self) -> bool:
        """Whether it is up (welcomed, not closed) and can carry a link back now."""
        ...

    @property
    def gone(self) -> str | None:
        """Why the connection went away (None: it has not, or nobody said)."""
        ...

    @property
    def write_lock(self) -> asyncio.Lock:
        """The lock every writer on the connection takes."""
        ...

    @property
    def pipe(self) -> LinkTransport:
        """The connection, for a second conversation's writer (a :class:`SharedTransport`)."""
        ...

    def attach(self, sink: Callable[[Message | None], None]) -> None:
        """Send the second conversation's messages to ``sink`` (``None``: it is gone)."""
        ...

    def detach(self, sink: Callable[[Message | None], None]) -> None:
        """Stop, if ``sink`` is the one attached."""
        ...


class LinkWriter:
    """Writes what a protocol queued to a pipe, in order, in chunks.

    Args:
        data_to_send: the protocol's ``data_to_send``.
        transport: the pipe.
        lock: shared with the other writer of a connection that carries two links.
    """

    def __init__(
        self,
        data_to_send: Callable[[], bytes],
        transport: LinkTransport,
        lock: asyncio.Lock | None = None,
    ) -> None:
        self._take = data_to_send
        self._transport = transport
        self._lock = lock if lock is not None else asyncio.Lock()
        self._soon: asyncio.Task[None] | None = None
        #: bytes written so far
        self.bytes_out = 0
        #: the first write failure (the link is lost)
        self.error: LinkLost | None = None

    async def write(self) -> None:
        """Write everything queued now (waits for the pipe).

        Raises:
            LinkLost: the pipe is gone.
        """
        async with self._lock:
            if self.error is not None:
                raise self.error
            data = self._take()
            try:
                for start in range(0, len(data), CHUNK):
                    chunk = data[start : start + CHUNK]
                    await self._transport.send(chunk)
                    self.bytes_out += len(chunk)
            except LinkLost as exc:
                self.error = exc
                raise
            except Exception as exc:  # the web server's send can fail in its own ways
                self.error = LinkLost(f"write failed: {exc}")
                raise self.error from exc

    def write_soon(self) -> None:
        """Write on a coming loop turn (acks, refusals: nobody waits for them)."""
        if self._soon is not None and not self._soon.done():
            return
        self._soon = asyncio.get_running_loop().create_task(self._write_quietly())

    async def _write_quietly(self) -> None:
        with contextlib.suppress(LinkLost):
            await self.write()
        # a write queued while this one ran goes out too
        with contextlib.suppress(LinkLost):
            await self.write()

    async def drain(self) -> None:
        """Wait for a pending :meth:`write_soon`."""
        task = self._soon
        if task is not None:
            await asyncio.wait({task})
