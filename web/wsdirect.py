"""The broker's websocket protocol for uvicorn: data frames written without a joined copy.

The broker sends big binary frames (up to 1 MiB during a replay, joined from pieces of
at most 64 KiB: server/session.py). Through uvicorn's websockets-based protocol each
frame would be copied three more times before the socket: ``b"".join`` of the pieces
into one frame (the session writer), ``Frame.serialize`` of the ``websockets`` library
(header and payload written into a ``BytesIO``), and, on Python 3.11's socket transport,
the slice of what the first ``send()`` left (``data[n:]`` of a ``bytes``) before it is
appended to the transport's buffer. On a replay of big messages those copies are a large
part of the broker's work (`make bench` measures the difference: `feature.bench_wssend`).

:class:`DirectWebSocketProtocol` is uvicorn's own class (what ``ws="auto"`` picks with
``websockets`` installed), with one addition: an ASGI extension,
``scope["extensions"][PIECES_EXTENSION]["send_pieces"]``, that sends one binary message
given as a list of pieces. For a connection without an extension negotiated (no
per-message-deflate) in the open state, it writes the RFC 6455 header (FIN, binary,
unmasked: a server's frame) and then each piece to the asyncio transport in turn: the
bytes on the wire are the ones the library would have produced (tests/integration/
test_ws_direct.py compares them), and the transport copies each piece once into its
buffer (or straight into the kernel). In every other case (deflate negotiated, closing,
a close already sent, the handshake not done) it joins the pieces and hands them to
uvicorn's ``websocket.send`` unchanged, so compression, errors and state checks stay the
library's. Flow control is uvicorn's: the send waits on the same ``writable`` event the
transport's ``pause_writing`` clears, and a lost connection raises uvicorn's
``ClientDisconnected``. Close and receiving are not touched.

A second extension, ``scope["extensions"][LIVENESS_EXTENSION]["watch"]``, lets an endpoint
replace uvicorn's keepalive of its connection with a replication link's liveness
(server/replication/liveness.py): ``watch(timeout, on_silent)`` pings every third of
``timeout`` without waiting for the write buffer, and once nothing was read from the peer
for ``timeout`` seconds (while the connection was being read) calls ``on_silent(seconds)``
and aborts the connection, so the endpoint receives ``websocket.disconnect`` at once.
uvicorn's own keepalive cannot do that for a partitioned peer: its timeout closes the
connection politely, which waits for the bytes in the write buffer to leave, and they
cannot.

Both reach into uvicorn's protocol (the attributes in :data:`UVICORN_INTERNALS`), which
uvicorn does not promise to keep: pyproject.toml pins the range of uvicorn releases the
byte-level test ran against, and at start-up :func:`missing_internals` looks for every
one of them on a real instance. When one is missing (a uvicorn outside that range), the
server turns both extensions off (:attr:`DirectWebSocketProtocol.extensions_enabled`)
with a warning in the event log: every frame then goes through uvicorn's ``send`` and
links keep uvicorn's keepalive, slower and blind to a partitioned peer, but correct.
"""

from __future__ import annotations

import asyncio
import os
import struct
from asyncio import TimerHandle
from collections.abc import Awaitable, Callable, Sequence
from typing import Final

from uvicorn.config import Config
from uvicorn.protocols.utils import ClientDisconnected
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from uvicorn.server import ServerState
from websockets.http11 import Request
from websockets.protocol import State

from spool.server.replication.liveness import Liveness

__all__ = [
    "LIVENESS_EXTENSION",
    "PIECES_EXTENSION",
    "DirectWebSocketProtocol",
    "SendPieces",
    "Watch",
    "frame_header",
]

#: the ASGI extensions' keys in ``scope["extensions"]``
PIECES_EXTENSION: Final = "spool.websocket.pieces"
LIVENESS_EXTENSION: Final = "spool.websocket.liveness"
#: FIN + opcode 2 (binary): RFC 6455 section 5.2
_FIN_BINARY: Final = 0x82
#: frames up to this size leave in one write (header and pieces joined: the copy is
#: cheap, and a small frame stays one TCP segment and one syscall)
_JOIN_UP_TO: Final = 16 * 1024
_SHORT: Final = struct.Struct("!BB")
_MEDIUM: Final = struct.Struct("!BBH")
_LONG: Final = struct.Struct("!BBQ")


#: what the extensions use of uvicorn's protocol beyond its public interface: methods of
#: the class, attributes of an instance, and attributes of its websockets connection
UVICORN_INTERNALS: Final = {
    "class": ("handle_connect", "data_received", "connection_lost", "stop_keepalive", "send"),
    "instance": (
        "conn", "loop", "transport", "writable", "disconnected", "handshake_initiated",
        "handshake_complete", "close_sent", "initial_response",
    ),
    "conn": ("extensions", "state", "expect_continuation_frame", "send_ping", "data_to_send"),
}  # fmt: skip


def missing_internals(protocol: object) -> list[str]:
    """The names of :data:`UVICORN_INTERNALS` that ``protocol`` (an instance of uvicorn's
    websockets protocol, as the server would make it) lacks; empty when all are there."""
    missing = [
        f"{type(protocol).__name__}.{name}"
        for name in UVICORN_INTERNALS["class"]
        if not callable(getattr(type(protocol), name, None))
    ]
    missing.extend(
        f"protocol.{name}" for name in UVICORN_INTERNALS["instance"] if not hasattr(protocol, name)
    )
    conn = getattr(protocol, "conn", None)
    if conn is not None:
        missing.extend(
            f"protocol.conn.{name}" for name in UVICORN_INTERNALS["conn"] if not hasattr(conn, name)
        )
    return missing


def probe(
    protocol_class: type[DirectWebSocketProtocol], config: Config, state: ServerState
) -> list[str]:
    """Make one instance of ``protocol_class`` as uvicorn would (no connection) and look
    for :data:`UVICORN_INTERNALS` on it; when any is missing, turn the extensions off for
    every connection. Returns what is missing (empty: the extensions stay on). From the
    server's start-up, on its event loop, before it listens."""
    instance = protocol_class(
        config=config, server_state=state, app_state={}, _loop=asyncio.get_running_loop()
    )
    missing = missing_internals(instance)
    if missing:
        DirectWebSocketProtocol.extensions_enabled = False
    return missing


#: sends one binary message given as pieces and their total size
SendPieces = Callable[[Sequence[bytes], int], Awaitable[None]]
#: watches a connection's liveness: a timeout in seconds, and what to call (with the
#: seconds of silence) before the connection is aborted
Watch = Callable[[float, Callable[[float], None]], None]


def frame_header(size: int) -> bytes:
    """The header of an unmasked, final binary frame of ``size`` payload bytes."""
    if size < 126:
        return _SHORT.pack(_FIN_BINARY, size)
    if size < 65536:
        return _MEDIUM.pack(_FIN_BINARY, 126, size)
    return _LONG.pack(_FIN_BINARY, 127, size)


class DirectWebSocketProtocol(WebSocketsSansIOProtocol):
    """uvicorn's websockets (sans-I/O) protocol plus the pieces extension.

    Attributes:
        direct_frames: frames this connection wrote through the direct path (the
            tests check that it is taken; the fallback does not count).
        extensions_enabled: whether connections get the two extensions (class-wide; the
            server turns it off when :func:`missing_internals` finds something missing).
    """

    direct_frames: int = 0
    extensions_enabled: bool = True
    _liveness: Liveness | None = None
    _on_silent: Callable[[float], None] | None = None
    _watch_timer: TimerHandle | None = None

    def handle_connect(self, event: Request) -> None:
        super().handle_connect(event)
        if self.extensions_enabled and self.handshake_initiated and not self.close_sent:
            # the ASGI task is created but has not run: its scope is this dict (set by
            # uvicorn's handle_connect, so it cannot be looked for before a connection)
            scope = getattr(self, "scope", None)
            extensions = scope.get("extensions") if isinstance(scope, dict) else None
            if extensions is None:
                return  # not uvicorn's scope as known: the connection goes without
            extensions[PIECES_EXTENSION] = {"send_pieces": self.send_pieces}
            extensions[LIVENESS_EXTENSION] = {"watch": self.watch}

    def data_received(self, data: bytes) -> None:
        liveness = self._liveness
        if liveness is not None:
            liveness.heard(self.loop.time())
        super().data_received(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._watch_timer is not None:
            self._watch_timer.cancel()
            self._watch_timer = None
        super().connection_lost(exc)

    def watch(self, timeout: float, on_silent: Callable[[float], None]) -> None:
        """Watch this connection's liveness instead of uvicorn's keepalive (the module
        docstring); from the endpoint, once it accepted the connection."""
        self.stop_keepalive()
        if self._watch_timer is not None:
            self._watch_timer.cancel()
        now = self.loop.time()
        self._liveness = Liveness(timeout, now)
        self._on_silent = on_silent
        self._watch_timer = self.loop.call_at(now + self._liveness.interval, self._watch_tick)

    def _watch_tick(self) -> None:
        self._watch_timer = None
        liveness = self._liveness
        assert liveness is not None and self._on_silent is not None
        if self.close_sent or self.transport.is_closing():
            return
        now = self.loop.time()
        liveness.listening(self.transport.is_reading(), now)
        tick = liveness.tick(now)
        if tick.dead:
            self._on_silent(liveness.silence(now))
            self.transport.abort()  # connection_lost: the endpoint gets its disconnect
            return
        if tick.ping and self.conn.state is State.OPEN:
            self.conn.send_ping(os.urandom(4))  # its pong is ignored: only hearing counts
            self.transport.write(b"".join(self.conn.data_to_send()))
        self._watch_timer = self.loop.call_at(tick.next_at, self._watch_tick)

    async def send_pieces(self, pieces: Sequence[bytes], size: int) -> None:
        """Send one binary message made of ``pieces`` (``size`` bytes in all).

        Raises:
            ClientDisconnected: the connection is gone (as uvicorn's ``send``).
        """
        await self.writable.wait()
        if self.disconnected:
            raise ClientDisconnected()
        conn = self.conn
        if (
            conn.extensions
            or conn.state is not State.OPEN
            or conn.expect_continuation_frame
            or not self.handshake_complete
            or self.close_sent
            or self.initial_response is not None
        ):
            await self.send({"type": "websocket.send", "bytes": b"".join(pieces)})
            return
        header = frame_header(size)
        write = self.transport.write
        if size <= _JOIN_UP_TO:
            write(b"".join((header, *pieces)))
        else:
            write(header)
            for piece in pieces:
                # a view: Python 3.11's socket transport slices what send() left of a
                # bytes object (a copy) before appending it to its buffer
                write(memoryview(piece))
        self.direct_frames += 1
