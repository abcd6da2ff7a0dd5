"""A client in its own process with two subscriptions that reads at a limited rate.

Started by the client page's browser test (tests/browser/test_client_page.py) as
``python -m tests.support.slow_consumer URL NAME USER PASSWORD QUIET BUSY RATE``: it logs
on as ``NAME``, subscribes live to ``QUIET`` (sub id ``quiet``) and from the start of the
log to ``BUSY`` (sub id ``busy``, a bookmark subscription), prints ``ready`` on stdout,
then reads at ``RATE`` bytes per second until the connection closes (the broker
disconnects it, or the test kills it). While ``BUSY`` is published to faster than that,
the broker's replay of it, which goes at the consumer's pace, falls further behind.

As tests/support/steady_reader.py does, the socket's receive buffer is set small before
connecting, so the kernel does not absorb what the reader does not read.
"""

from __future__ import annotations

import asyncio
import socket
import sys
import time
from urllib.parse import urlsplit

import orjson
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

#: kernel receive buffer of the consumer's socket, bytes
RCVBUF = 16 * 1024
#: frames the websockets library may hold before it stops reading the socket
MAX_QUEUE = 2


async def consume(argv: list[str]) -> None:
    url, name, user, password, quiet, busy = argv[:6]
    rate = float(argv[6])
    parts = urlsplit(url)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
    sock.connect((parts.hostname or "127.0.0.1", parts.port or 80))
    async with connect(url, sock=sock, compression=None, max_queue=MAX_QUEUE, max_size=2**26) as ws:
        logon = {"c": "logon", "cid": "l", "client_name": name, "user_id": user, "pw": password}
        await ws.send(orjson.dumps({**logon, "a": "processed"}))
        await ws.recv()
        for sub_id, topic, extra in (("quiet", quiet, {}), ("busy", busy, {"bm": "0"})):
            command = {"c": "subscribe", "cid": sub_id, "t": topic, "sub_id": sub_id}
            await ws.send(orjson.dumps({**command, **extra, "a": "processed"}))
            await ws.recv()
        print("ready", flush=True)
        started = time.monotonic()
        nbytes = 0
        try:
            while True:
                frame = await ws.recv()
                nbytes += len(frame)
                # hold the pace: never ahead of rate bytes per second since the start
                ahead = nbytes / rate - (time.monotonic() - started)
                if ahead > 0:
                    await asyncio.sleep(ahead)
        except ConnectionClosed:
            return


def main(argv: list[str]) -> int:
    asyncio.run(consume(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
