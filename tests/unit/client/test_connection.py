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

from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from server.client.connection import (
    Handlers,
    HandshakeFailed,
    Transport,
    WebSocketTransport,
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


async def opened(peer: Peer, side: Client) -> tuple[Any, Transport]:
    server = await serve(peer.handler, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    transport = await connect_websocket(
        f"ws://127.0.0.1:{port}/amps/json", side.handlers(), open_timeout=5, max_size=None
    )
    await asyncio.wait_for(peer.connected.wait(), 5)
    return server, transport


@run_async
async def test_frames_arrive_as_bytes_and_compression_is_off() -> None:
    peer, side = Peer(), Client()
    server, transport = await opened(peer, side)
    assert isinstance(transport, WebSocketTransport)
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


@run_async
async def test_what_is_queued_in_one_turn_leaves_in_one_frame() -> None:
    peer, side = Peer(), Client()
    server, transport = await opened(peer, side)
    for part in (b"a", b"b", b"c"):
        side.out.append(part)
        transport.flush_soon()
    assert await peer.next_frame() == b"abc"
    side.out.append(b"queued")
    await transport.send(b"raw")  # what was queued goes first, then the frame untouched
    assert [await peer.next_frame(), await peer.next_frame()] == [b"queued", b"raw"]
    await transport.close()
    server.close()


@run_async
async def test_close_sends_what_is_queued_and_reports_the_close_once() -> None:
    peer, side = Peer(), Client()
    server, transport = await opened(peer, side)
    side.out.append(b"last words")
    await transport.close(4001, "bye")
    assert await peer.next_frame() == b"last words"
    await async_wait_until(lambda: peer.close is not None, 5, message="server saw the close")
    assert peer.close == (4001, "bye")
    assert len(side.lost) == 1 and side.lost[0][1] == 4001
    await transport.close()  # a second close is harmless
    assert len(side.lost) == 1
    server.close()


@run_async
async def test_the_peer_close_reason_and_code_are_reported() -> None:
    peer, side = Peer(), Client()
    server, transport = await opened(peer, side)
    assert peer.conn is not None
    await peer.conn.close(1001, "shutting down")
    await async_wait_until(lambda: side.lost != [], 5, message="connection_lost")
    assert side.lost == [("shutting down", 1001)]
    await transport.close()
    server.close()


@run_async
async def test_a_frame_handler_may_close_the_connection_it_runs_in() -> None:
    peer, side = Peer(), Client()
    server, transport = await opened(peer, side)

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


@run_async
async def test_the_heartbeat_beats_every_interval_until_the_connection_ends() -> None:
    peer, side = Peer(), Client()
    server, transport = await opened(peer, side)
    beats: list[float] = []
    loop = asyncio.get_running_loop()
    transport.start_heartbeat(0.02, lambda: beats.append(loop.time()))
    await async_wait_until(lambda: len(beats) >= 3, 5, message="three beats")
    assert all(b - a >= 0.019 for a, b in itertools.pairwise(beats))
    assert peer.conn is not None
    await peer.conn.close()
    await async_wait_until(lambda: side.lost != [], 5, message="connection_lost")
    assert isinstance(transport, WebSocketTransport)
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


@run_async
async def test_a_connection_lost_during_the_handshake_is_handshake_failed() -> None:
    """Regression: a broker killed while answering the upgrade surfaced websockets'
    ``InvalidMessage``, which a reconnect loop catching ``Disconnected`` let through."""
    server, port = await _raw_server(b"")
    async with server:
        try:
            await WebSocketTransport.open(f"ws://127.0.0.1:{port}/amps/json", Client().handlers())
        except HandshakeFailed as exc:
            assert isinstance(exc, OSError) and exc.status is None
        else:
            raise AssertionError("the handshake cannot have succeeded")


@run_async
async def test_a_refused_upgrade_is_handshake_failed_with_its_status() -> None:
    server, port = await _raw_server(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
    async with server:
        try:
            await WebSocketTransport.open(f"ws://127.0.0.1:{port}/amps/json", Client().handlers())
        except HandshakeFailed as exc:
            assert exc.status == 403 and "403" in exc.reason
        else:
            raise AssertionError("the handshake cannot have succeeded")
