"""A subscriber in its own process that reads at a steady, limited rate.

Started by the back-pressure tests (tests/integration/test_backpressure.py) as
``python -m tests.support.steady_reader URL TOPIC COUNT RATE``: it logs on, subscribes
(live) to ``TOPIC``, prints ``ready`` on stdout, then reads at ``RATE`` bytes per second
until it has ``COUNT`` messages, the connection closes, or nothing arrives for 60 s. It
prints one JSON line: how many messages arrived, whether their ``i`` fields were exactly
``0..COUNT-1`` in order (the first discrepancy otherwise), and the close reason if the
broker closed the connection.

The socket's receive buffer is set small before connecting, so the kernel cannot absorb a
burst on the reader's behalf (loopback autotuning grows it to megabytes): what the reader
does not read stays in the broker, as it would across a real network.
"""

from __future__ import annotations

import asyncio
import socket
import sys
import time
from typing import Any
from urllib.parse import urlsplit

import orjson
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from spool.server.protocol.frame import parse_frame

#: kernel receive buffer of the reader's socket, bytes
RCVBUF = 64 * 1024
#: frames the websockets library may hold before it stops reading the socket
MAX_QUEUE = 2


async def read(url: str, topic: str, count: int, rate: float) -> dict[str, Any]:
    parts = urlsplit(url)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
    sock.connect((parts.hostname or "127.0.0.1", parts.port or 80))
    received = 0
    problem: str | None = None
    closed: str | None = None
    nbytes = 0
    async with connect(url, sock=sock, compression=None, max_queue=MAX_QUEUE, max_size=2**26) as ws:
        await ws.send(b'{"c":"logon","cid":"l","client_name":"steady-reader","a":"processed"}')
        await ws.recv()
        sub = {"c": "subscribe", "cid": "s", "t": topic, "sub_id": "s", "a": "processed"}
        await ws.send(orjson.dumps(sub))
        await ws.recv()
        print("ready", flush=True)
        started = time.monotonic()
        try:
            while received < count:
                frame = await asyncio.wait_for(ws.recv(), 60)
                assert isinstance(frame, bytes)
                nbytes += len(frame)
                for msg in parse_frame(frame).messages:
                    if msg.header.get("c") != "publish":
                        continue
                    i = orjson.loads(msg.body)["i"]
                    if problem is None and i != received:
                        problem = f"message {received} carried i={i}"
                    received += 1
                # hold the pace: never ahead of rate bytes per second since the start
                ahead = nbytes / rate - (time.monotonic() - started)
                if ahead > 0:
                    await asyncio.sleep(ahead)
        except ConnectionClosed as exc:
            closed = exc.rcvd.reason if exc.rcvd is not None else "no close frame"
        except TimeoutError:
            problem = problem or f"nothing for 60 s after {received} messages"
        seconds = time.monotonic() - started
    return {
        "received": received,
        "in_order": problem is None and received == count,
        "problem": problem,
        "closed": closed,
        "seconds": round(seconds, 3),
        "bytes": nbytes,
    }


def main(argv: list[str]) -> int:
    url, topic, count, rate = argv[0], argv[1], int(argv[2]), float(argv[3])
    result = asyncio.run(read(url, topic, count, rate))
    print(orjson.dumps(result).decode(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
