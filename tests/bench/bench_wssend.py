"""Benchmark of the broker's websocket send path (web/wsdirect.py) against uvicorn's own.

A real uvicorn on 127.0.0.1 in this process sends replay-shaped frames (1 MiB made of
64 KiB pieces, as server/session.py hands them over) to a raw reader in another process
that only counts bytes; the CPU time of this process (``time.process_time``) from the
first send to the reader's disconnect is divided by the megabytes sent. Two servers,
the same frames, taken in turn (ABBA, so a drift of the machine's load falls on both):

- ``uvicorn``: uvicorn's websockets protocol, the pieces joined and sent with
  ``websocket.send`` (the stock path);
- ``direct``: :class:`~spool.web.wsdirect.DirectWebSocketProtocol`, the pieces written after
  the header without joining them.

Metrics: ``uvicorn_cpu_us_per_mb``, ``direct_cpu_us_per_mb`` and ``direct_vs_uvicorn``
(their ratio: below 1 is cheaper). Only the send path differs between the two, so this
shows its share where a whole replay's CPU per message drowns it in the load of a shared
machine. Indicative.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from statistics import median

import uvicorn
from starlette.types import Receive, Scope, Send
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

from spool.web.transport import AsgiTransport, pieces_of
from spool.web.wsdirect import DirectWebSocketProtocol

PIECE = 64 * 1024
PIECES = 16
HEADER = 10  # a frame of 1 MiB has the 64-bit length form

_READER = """
import socket, sys
port, total = int(sys.argv[1]), int(sys.argv[2])
s = socket.create_connection(("127.0.0.1", port))
s.sendall(b"GET / HTTP/1.1\\r\\nHost: x\\r\\nUpgrade: websocket\\r\\nConnection: Upgrade\\r\\n"
          b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\\r\\nSec-WebSocket-Version: 13\\r\\n\\r\\n")
buf = bytearray(1 << 20)
got = b""
while b"\\r\\n\\r\\n" not in got:
    got += s.recv(4096)
n = len(got.split(b"\\r\\n\\r\\n", 1)[1])
view = memoryview(buf)
while n < total:
    r = s.recv_into(view)
    if not r:
        break
    n += r
s.close()
"""


class _Sender:
    """The app: sends ``frames`` frames through an ``AsgiTransport``, times it."""

    def __init__(self, frames: int) -> None:
        self.frames = frames
        self.pieces = [bytes([i]) * PIECE for i in range(PIECES)]
        self.cpu_s = 0.0
        self.done = asyncio.Event()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await receive()
        await send({"type": "websocket.accept"})
        transport = AsgiTransport(send, "bench", pieces_of(scope))
        size = PIECE * PIECES
        cpu0 = time.process_time()
        for _ in range(self.frames):
            await transport.send_pieces(self.pieces, size)
        while (await receive())["type"] != "websocket.disconnect":
            pass
        self.cpu_s = time.process_time() - cpu0
        self.done.set()


async def _once(protocol: type[asyncio.Protocol], frames: int) -> float:
    """CPU microseconds per MB of one run."""
    app = _Sender(frames)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, ws=protocol, lifespan="off", log_level="error")
    server = uvicorn.Server(config)
    serving = asyncio.get_running_loop().create_task(server.serve(sockets=[sock]))
    total = frames * (PIECE * PIECES + HEADER)
    reader = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _READER, str(port), str(total), stdout=subprocess.DEVNULL
    )
    await reader.wait()
    await app.done.wait()  # the app sees the disconnect a loop turn after the reader left
    server.should_exit = True
    await serving
    return app.cpu_s / (total / 1e6) * 1e6


async def _measure(rounds: int, frames: int) -> dict[str, float]:
    results: dict[str, list[float]] = {"uvicorn": [], "direct": []}
    kinds: dict[str, type[asyncio.Protocol]] = {
        "uvicorn": WebSocketsSansIOProtocol,
        "direct": DirectWebSocketProtocol,
    }
    await _once(DirectWebSocketProtocol, 4)  # warm-up
    for r in range(rounds):
        order = ["uvicorn", "direct"] if r % 2 == 0 else ["direct", "uvicorn"]
        for name in order:
            results[name].append(await _once(kinds[name], frames))
    u = median(results["uvicorn"])
    d = median(results["direct"])
    return {"uvicorn_cpu_us_per_mb": u, "direct_cpu_us_per_mb": d, "direct_vs_uvicorn": d / u}


def run(quick: bool = False) -> dict[str, float]:
    rounds, frames = (2, 100) if quick else (6, 1000)
    return asyncio.run(_measure(rounds, frames))


if __name__ == "__main__":
    print(run(quick="--quick" in sys.argv))
