"""The direct websocket send (web/wsdirect.py) puts the same bytes on the wire as uvicorn's
own protocol, plain and over TLS, with and without per-message-deflate, and is taken.

Each case runs a real uvicorn on 127.0.0.1 (an ephemeral port) twice with the same ASGI
app: once with uvicorn's websockets protocol (the oracle: the app's ``AsgiTransport``
finds no pieces extension and sends each frame joined, through ``websocket.send``) and
once with the class `spool serve` uses (:func:`spool.web.serve.protocols`). A raw socket
client does the upgrade and keeps every byte after the handshake up to and including
the server's close frame; both byte streams must be equal. The frames cover each header
length form (7-bit, 16-bit and 64-bit lengths and their edges), the one-write limit of
the direct path, and frames of many pieces like the replay's (1 MiB of 64 KiB pieces).
"""

from __future__ import annotations

import asyncio
import base64
import random
import socket
import ssl
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from packaging.requirements import Requirement
from starlette.types import Receive, Scope, Send
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from uvicorn.server import ServerState
from websockets.frames import Frame, Opcode

from spool.web.serve import protocols
from spool.web.transport import AsgiTransport, pieces_of
from spool.web.wsdirect import DirectWebSocketProtocol, frame_header, probe
from tests.support.certs import TestCA, client_context
from tests.support.server import ROOT


def _frames() -> list[list[bytes]]:
    """The frames the app sends, as pieces (a seeded generator: the same every run)."""
    rng = random.Random(14)

    def blob(n: int) -> bytes:
        return rng.randbytes(n)

    frames: list[list[bytes]] = [[blob(n)] for n in (1, 125, 126, 127, 65535, 65536, 65537)]
    frames.append([blob(16 * 1024)])  # the largest frame written in one piece
    frames.append([blob(8 * 1024), blob(8 * 1024 + 1)])  # one byte past it, in two pieces
    frames.append([blob(64 * 1024) for _ in range(16)])  # a replay frame: 1 MiB
    frames.append([blob(rng.randrange(1, 70_000)) for _ in range(7)])
    # compressible pieces (deflate then really compresses) and single small ones
    frames.append([b'{"c":"publish","t":"a/b","s":1}' * 40 for _ in range(50)])
    frames.extend([b'{"c":"ack","a":"processed"}'] for _ in range(3))
    return frames


FRAMES = _frames()


class _App:
    """Accepts one websocket, sends :data:`FRAMES` through an ``AsgiTransport``, closes."""

    def __init__(self) -> None:
        self.direct_frames: int | None = None
        self.had_extension = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert scope["type"] == "websocket"
        assert (await receive())["type"] == "websocket.connect"
        await send({"type": "websocket.accept"})
        send_pieces = pieces_of(scope)
        self.had_extension = send_pieces is not None
        transport = AsgiTransport(send, "test", send_pieces)
        for pieces in FRAMES:
            await transport.send_pieces(pieces, sum(map(len, pieces)))
        if send_pieces is not None:
            protocol = send_pieces.__self__  # type: ignore[attr-defined]
            self.direct_frames = protocol.direct_frames
        await transport.close(1000, "done")
        while (await receive())["type"] != "websocket.disconnect":
            pass


async def _read_frames(reader: asyncio.StreamReader) -> tuple[bytes, list[int]]:
    """Every byte of the server's frames up to its close frame, and their opcodes."""
    raw = bytearray()
    opcodes: list[int] = []
    while True:
        head = await reader.readexactly(2)
        length = head[1] & 0x7F
        assert not head[1] & 0x80, "a server's frame is never masked"
        extra = b""
        if length == 126:
            extra = await reader.readexactly(2)
            length = int.from_bytes(extra, "big")
        elif length == 127:
            extra = await reader.readexactly(8)
            length = int.from_bytes(extra, "big")
        raw += head + extra + await reader.readexactly(length)
        opcodes.append(head[0] & 0x0F)
        if head[0] & 0x0F == 8:
            return bytes(raw), opcodes


async def _session(
    protocol: type[asyncio.Protocol],
    *,
    deflate: bool,
    tls: tuple[Path, Path, Path] | None,
    http: type[asyncio.Protocol] | str = "auto",
) -> tuple[bytes, bytes, list[int], _App]:
    """One upgrade against a fresh uvicorn: (handshake response, frame bytes, opcodes, app)."""
    app = _App()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()  # the client's connection waits in the backlog until uvicorn serves
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app,
        http=http,
        ws=protocol,
        ws_per_message_deflate=deflate,
        lifespan="off",
        log_level="warning",
        ssl_certfile=str(tls[0]) if tls else None,
        ssl_keyfile=str(tls[1]) if tls else None,
    )
    server = uvicorn.Server(config)
    serving = asyncio.get_running_loop().create_task(server.serve(sockets=[sock]))
    try:
        context: ssl.SSLContext | None = client_context(tls[2]) if tls else None
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
        key = base64.b64encode(random.Random(1).randbytes(16)).decode()
        offer = "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n"
        writer.write(
            (
                "GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
                f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                f"Sec-WebSocket-Version: 13\r\n{offer}\r\n"
            ).encode()
        )
        response = await reader.readuntil(b"\r\n\r\n")
        raw, opcodes = await asyncio.wait_for(_read_frames(reader), 60)
        # answer the close (masked, code 1000) so the server ends the connection now
        mask = b"\x01\x02\x03\x04"
        writer.write(
            b"\x88\x82" + mask + bytes(b ^ m for b, m in zip(b"\x03\xe8", mask[:2], strict=True))
        )
        await writer.drain()
        await asyncio.wait_for(reader.read(), 30)
        writer.close()
    finally:
        server.should_exit = True
        await serving
    return response, raw, opcodes, app


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    ca = TestCA(tmp_path_factory.mktemp("pki"))
    issued = ca.issue_server("server")
    return issued.cert_path, issued.key_path, ca.cert_path


@pytest.mark.parametrize("deflate", [False, True], ids=["plain-frames", "deflate"])
@pytest.mark.parametrize("use_tls", [False, True], ids=["ws", "wss"])
def test_wire_bytes_equal_uvicorns(
    deflate: bool, use_tls: bool, pki: tuple[Path, Path, Path]
) -> None:
    http, ws = protocols(tls=use_tls)
    assert isinstance(ws, type) and issubclass(ws, DirectWebSocketProtocol)
    tls = pki if use_tls else None

    async def both() -> None:
        o_resp, oracle, o_ops, o_app = await _session(
            WebSocketsSansIOProtocol, deflate=deflate, tls=tls
        )
        d_resp, direct, d_ops, d_app = await _session(ws, deflate=deflate, tls=tls, http=http)
        assert not o_app.had_extension  # the oracle really is uvicorn's own send
        assert d_app.had_extension
        negotiated = b"permessage-deflate" in d_resp
        assert negotiated == deflate == (b"permessage-deflate" in o_resp)
        assert o_ops == d_ops == [2] * len(FRAMES) + [8]
        assert len(direct) == len(oracle)
        assert direct == oracle
        # the direct path is taken for every data frame unless deflate was negotiated
        # (then uvicorn's send compresses them: the library's path, counted as none)
        assert d_app.direct_frames == (0 if deflate else len(FRAMES))

    asyncio.run(both())


@pytest.mark.parametrize("size", [0, 1, 125, 126, 127, 65535, 65536, 65537, 1 << 20, (1 << 32) + 5])
def test_frame_header_is_the_librarys(size: int) -> None:
    """The header :func:`frame_header` writes is the one ``websockets`` serialises for an
    unmasked final binary frame of that length."""
    payload = b"\0" * min(size, 70_000)
    serialized = Frame(Opcode.BINARY, payload).serialize(mask=False)
    header = serialized[: len(serialized) - len(payload)]
    if size == len(payload):
        assert frame_header(size) == header
    else:  # too big to build: the 64-bit form with the size in it
        assert frame_header(size) == b"\x82\x7f" + size.to_bytes(8, "big")


def test_pieces_fallback_joins() -> None:
    """Without the extension (another ASGI server) a transport joins the pieces and
    sends them through ``websocket.send``."""
    sent: list[dict[str, object]] = []

    async def send(message: dict[str, object]) -> None:
        sent.append(message)

    pieces: Sequence[bytes] = [b"ab", b"c", b"def"]
    asyncio.run(AsgiTransport(send, "x").send_pieces(pieces, 6))  # type: ignore[arg-type]
    assert sent == [{"type": "websocket.send", "bytes": b"abcdef"}]


def test_the_pinned_uvicorn_has_every_internal_the_extensions_use() -> None:
    """The uvicorn installed is in the range pyproject.toml pins (the range this module's
    byte-level test ran against), and the start-up probe finds everything there."""
    with open(ROOT / "pyproject.toml", "rb") as f:
        dependencies = tomllib.load(f)["project"]["dependencies"]
    (pin,) = [Requirement(d) for d in dependencies if Requirement(d).name == "uvicorn"]
    assert pin.specifier.contains(uvicorn.__version__)
    assert any(spec.operator == "<" for spec in pin.specifier), "an upper bound is pinned"

    async def probe_installed() -> list[str]:
        config = uvicorn.Config(_App(), ws=DirectWebSocketProtocol, lifespan="off")
        config.load()
        return probe(DirectWebSocketProtocol, config, ServerState())

    assert asyncio.run(probe_installed()) == []
    assert DirectWebSocketProtocol.extensions_enabled


class _UvicornWithoutAnInternal(DirectWebSocketProtocol):
    """uvicorn's protocol as a release outside the pinned range might have it: one of
    the instance attributes the extensions use is gone."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        del self.initial_response


def test_a_uvicorn_without_an_internal_serves_through_its_own_send() -> None:
    """The probe names what is missing and turns both extensions off: connections get
    neither, and the bytes on the wire are uvicorn's own, frame for frame."""

    async def run() -> None:
        config = uvicorn.Config(_App(), ws=_UvicornWithoutAnInternal, lifespan="off")
        config.load()
        missing = probe(_UvicornWithoutAnInternal, config, ServerState())
        assert missing == ["protocol.initial_response"]
        _, oracle, o_ops, _ = await _session(WebSocketsSansIOProtocol, deflate=False, tls=None)
        _, sent, ops, app = await _session(DirectWebSocketProtocol, deflate=False, tls=None)
        assert not app.had_extension and app.direct_frames is None
        assert ops == o_ops and sent == oracle

    try:
        asyncio.run(run())
        assert not DirectWebSocketProtocol.extensions_enabled
    finally:
        DirectWebSocketProtocol.extensions_enabled = True
