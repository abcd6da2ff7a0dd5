"""The websocket transport against a real websocket server on loopback.

The server side is a bare ``websockets`` server run by the test (no broker): the transport
has no protocol knowledge, so the tests speak in frames.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec

import pytest
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from spool.server.client.connection import (
    QUEUE_HIGH,
    ClientTransport,
    Connector,
    Handlers,
    HandshakeFailed,
    StreamTransport,
    WebSocketTransport,
    connect_library_websocket,
    connect_websocket,
)
from tests.support.wait import async_wait_until

P = ParamSpec("P")


def run_async(fn: Callable[P, Coroutine[Any, Any, None]]) -> Callable[P, None]:
    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> None:
        asyncio.run(asyncio.wait_for(fn(*args, **kwargs), 30))

    return wrapper


class Peer:
    """The server end: records what it receives and the close it got; sends on demand."""

    def __init__(self) -> None:
        self.received: asyncio.Queue[bytes] = asyncio.Queue()
        self.conn: ServerConnection | None = None
        self.connected = asyncio.Event()
        self.extensions: str | None = None
        self.close: tuple[int | None, str | None] | None = None

    async def handler(self, ws: ServerConnection) -> None:
        self.conn = ws
        assert ws.request is not None
        self.extensions = ws.request.headers.get("Sec-WebSocket-Extensions")
        self.connected.set()
        try:
            async for frame in ws:
                await self.received.put(frame if isinstance(frame, bytes) else frame.encode())
        except ConnectionClosed:
            pass  # an error close code: the iteration raises instead of ending
        self.close = (ws.close_code, ws.close_reason)

    async def next_frame(self) -> bytes:
        return await asyncio.wait_for(self.received.get(), 5)


class Client:
    """The handlers' side: an outbound buffer, the frames received and the close seen."""

    def __init__(self) -> None:
        self.out: list[bytes] = []
        self.frames: list[bytes] = []
        self.lost: list[tuple[str, int | None]] = []
        self.on_frame: Callable[[bytes], Coroutine[Any, Any, None]] | None = None

    async def frame_received(self, data: bytes) -> None:
        self.frames.append(data)
        if self.on_frame is not None:
            await self.on_frame(data)

    def data_to_send(self) -> bytes:
        frame = b"".join(self.out)
        self.out.clear()
        return frame

    def connection_lost(self, reason: str, code: int | None) -> None:
        self.lost.append((reason, code))

    def handlers(self) -> Handlers:
        return Handlers(self.frame_received, self.data_to_send, self.connection_lost)


#: Spool's own transport (the default) and the ``websockets`` library's, which it must
#: behave like: every test runs against both.
CONNECTORS = pytest.mark.parametrize(
    "connector", [connect_websocket, connect_library_websocket], ids=["stream", "library"]
)
TRANSPORTS = pytest.mark.parametrize(
    "transport_class", [StreamTransport, WebSocketTransport], ids=["stream", "library"]
)


async def opened(peer: Peer, side: Client, connector: Connector) -> tuple[Any, ClientTransport]:
    server = await serve(peer.handler, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    transport = await connector(
        f"ws://127.0.0.1:{port}/amps/json", side.handlers(), open_timeout=5, max_size=None
    )
    await asyncio.wait_for(peer.connected.wait(), 5)
    return server, transport


@CONNECTORS
@run_async
async def test_frames_arrive_as_bytes_and_compression_is_off(connector: Connector) -> None:
    peer, side = Peer(), Client()
    server, transport = await opened(peer, side, connector)
    before = transport.last_received
    assert peer.conn is not None
    await peer.conn.send(b"binary")
    await peer.conn.send("text é")
    await async_wait_until(lambda: len(side.frames) == 2, 5, message="two frames")
    assert side.frames == [b"binary", "text é".encode()]
    assert transport.last_received >= before
    assert peer.extensions is None  # permessage-deflate not even offered
    await transport.close()
    server.close()


@CONNECTORS
@run_async
async def test_what_is_queued_in_one_turn_leaves_in_one_frame(connector: Connector) -> None:
    peer, side = Peer(), Client()
    server, transport = await opened(peer, side, connector)
    for part in (b"a", b"b", b"c"):
        side.out.append(part)
        transport.flush_soon()
    assert await peer.next_frame() == b"abc"
    side.out.append(b"queued")
    await transport.send(b"raw")  # what was queued goes first, then the frame untouched
    assert [await peer.next_frame(), await peer.next_frame()] == [b"queued", b"raw"]
    await transport.close()
    server.close()


@CONNECTORS
@run_async
async def test_close_sends_what_is_queued_and_reports_the_close_once(connector: Connector) -> None:
    peer, side = Peer(), Client()
    server, transport = await opened(peer, side, connector)
    side.out.append(b"last words")
    await transport.close(4001, "bye")
    assert await peer.next_frame() == b"last words"
    await async_wait_until(lambda: peer.close is not None, 5, message="server saw the close")
    assert peer.close == (4001, "bye")
    assert len(side.lost) == 1 and side.lost[0][1] == 4001
    await transport.close()  # a second close is harmless
    assert len(side.lost) == 1
    server.close()


@CONNECTORS
@run_async
async def test_the_peer_close_reason_and_code_are_reported(connector: Connector) -> None:
    peer, side = Peer(), Client()
    server, transport = await opened(peer, side, connector)
    assert peer.conn is not None
    await peer.conn.close(1001, "shutting down")
    await async_wait_until(lambda: side.lost != [], 5, message="connection_lost")
    assert side.lost == [("shutting down", 1001)]
    await transport.close()
    server.close()


@CONNECTORS
@run_async
async def test_a_frame_handler_may_close_the_connection_it_runs_in(connector: Connector) -> None:
    peer, side = Peer(), Client()
    server, transport = await opened(peer, side, connector)

    async def refuse(data: bytes) -> None:
        await transport.close(1002, "invalid message")

    side.on_frame = refuse
    assert peer.conn is not None
    await peer.conn.send(b"garbage")
    await async_wait_until(lambda: peer.close is not None, 5, message="server saw the close")
    assert peer.close == (1002, "invalid message")
    await async_wait_until(lambda: side.lost != [], 5, message="connection_lost")
    assert side.frames == [b"garbage"]
    server.close()


@CONNECTORS
@run_async
async def test_the_heartbeat_beats_every_interval_until_the_connection_ends(
    connector: Connector,
) -> None:
    peer, side = Peer(), Client()
    server, transport = await opened(peer, side, connector)
    beats: list[float] = []
    loop = asyncio.get_running_loop()
    transport.start_heartbeat(0.02, lambda: beats.append(loop.time()))
    await async_wait_until(lambda: len(beats) >= 3, 5, message="three beats")
    assert all(b - a >= 0.019 for a, b in itertools.pairwise(beats))
    assert peer.conn is not None
    await peer.conn.close()
    await async_wait_until(lambda: side.lost != [], 5, message="connection_lost")
    assert isinstance(transport, StreamTransport | WebSocketTransport)
    heartbeat = transport._heartbeat
    assert heartbeat is None  # stopped with the reader
    await transport.close()
    server.close()


async def _raw_server(answer: bytes) -> tuple[asyncio.Server, int]:
    """A TCP server that reads the upgrade request, writes ``answer`` and closes."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(answer)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


@TRANSPORTS
@run_async
async def test_a_connection_lost_during_the_handshake_is_handshake_failed(
    transport_class: type[StreamTransport | WebSocketTransport],
) -> None:
    """A broker killed while answering the upgrade must not surface websockets'
    ``InvalidMessage``, which a reconnect loop catching ``Disconnected`` would let through."""
    server, port = await _raw_server(b"")
    async with server:
        try:
            await transport_class.open(f"ws://127.0.0.1:{port}/amps/json", Client().handlers())
        except HandshakeFailed as exc:
            assert isinstance(exc, OSError) and exc.status is None
        else:
            raise AssertionError("the handshake cannot have succeeded")


@TRANSPORTS
@run_async
async def test_a_refused_upgrade_is_handshake_failed_with_its_status(
    transport_class: type[StreamTransport | WebSocketTransport],
) -> None:
    server, port = await _raw_server(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
    async with server:
        try:
            await transport_class.open(f"ws://127.0.0.1:{port}/amps/json", Client().handlers())
        except HandshakeFailed as exc:
            assert exc.status == 403 and "403" in exc.reason
        else:
            raise AssertionError("the handshake cannot have succeeded")


@CONNECTORS
@run_async
async def test_a_ping_is_answered_with_its_pong(connector: Connector) -> None:
    peer, side = Peer(), Client()
    server, transport = await opened(peer, side, connector)
    assert peer.conn is not None
    pong = await peer.conn.ping(b"are you there")
    await asyncio.wait_for(pong, 5)  # resolves only on a pong with the same payload
    await transport.close()
    server.close()


@CONNECTORS
@run_async
async def test_a_message_over_max_size_closes_with_1009(connector: Connector) -> None:
    peer, side = Peer(), Client()
    server = await serve(peer.handler, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    transport = await connector(
        f"ws://127.0.0.1:{port}/amps/json", side.handlers(), open_timeout=5, max_size=1000
    )
    await asyncio.wait_for(peer.connected.wait(), 5)
    assert peer.conn is not None
    await peer.conn.send(b"a" * 1000)
    await peer.conn.send(b"b" * 1001)
    await async_wait_until(lambda: peer.close is not None, 5, message="server saw the close")
    assert peer.close is not None and peer.close[0] == 1009
    await async_wait_until(lambda: side.lost != [], 5, message="connection_lost")
    assert side.frames == [b"a" * 1000]
    await transport.close()
    server.close()


@run_async
async def test_a_slow_frame_handler_stops_the_socket_being_read() -> None:
    """Backpressure: while the handler is stuck, at most about QUEUE_HIGH bytes wait in
    the client and the rest stays in the kernel and the server; nothing is lost."""
    peer, side = Peer(), Client()
    server, transport = await opened(peer, side, connect_websocket)
    assert isinstance(transport, StreamTransport)
    stream = transport._stream
    release = asyncio.Event()

    async def stuck(data: bytes) -> None:
        await release.wait()

    side.on_frame = stuck
    assert peer.conn is not None
    frame = b"f" * (256 * 1024)
    conn = peer.conn

    async def send_all() -> None:
        for _ in range(80):  # 20 MiB
            await conn.send(frame)

    sending = asyncio.get_running_loop().create_task(send_all())
    await async_wait_until(lambda: stream.paused, 10, message="reading paused")
    assert stream.queued <= QUEUE_HIGH + len(frame)
    assert not sending.done()  # the server is held back too
    release.set()
    await asyncio.wait_for(sending, 20)
    await async_wait_until(lambda: len(side.frames) == 80, 20, message="every frame")
    assert not stream.paused and stream.queued == 0
    await transport.close()
    server.close()
