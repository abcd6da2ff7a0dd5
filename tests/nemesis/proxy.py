"""A delaying TCP proxy in the path of an instance's replication links (the kernel here
has no ``netem``).

``python -m tests.nemesis.proxy --control FILE --ready FILE LISTEN_PORT=HOST:PORT ...``

Runs in the source instance's namespace: one listener on ``127.0.0.1:LISTEN_PORT`` per
destination, each forwarding to the destination's real address; the source's
``<Destination>`` dials the listener. While the control file holds ``DELAY_MS
JITTER_MS``, every chunk read in either direction is written ``DELAY_MS`` (plus a uniform
``0..JITTER_MS``) later, in order; an empty or missing file forwards at once. The file is
read every 100 ms. One end closing closes the other, so a link the source drops is
dropped at the destination too. It writes ``ready`` to the ready file once every
listener is bound, and runs until killed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import sys
from collections.abc import Sequence
from pathlib import Path

_READ = 64 * 1024


class Delay:
    """The delay now in force, read from the control file."""

    def __init__(self, control: Path) -> None:
        self.control = control
        self.delay = 0.0
        self.jitter = 0.0
        self._stamp: tuple[int, int] | None = None
        self.rng = random.Random()

    def reload(self) -> None:
        try:
            st = self.control.stat()
        except FileNotFoundError:
            self.delay = self.jitter = 0.0
            self._stamp = None
            return
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp == self._stamp:
            return
        self._stamp = stamp
        parts = self.control.read_text().split()
        self.delay = int(parts[0]) / 1000 if parts else 0.0
        self.jitter = int(parts[1]) / 1000 if len(parts) > 1 else 0.0

    def draw(self) -> float:
        return self.delay + (self.rng.uniform(0, self.jitter) if self.jitter else 0.0)

    async def watch(self) -> None:
        while True:
            self.reload()
            await asyncio.sleep(0.1)


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: Delay) -> None:
    """Copy ``reader`` to ``writer``, each chunk held for the delay drawn when it was read
    (never before the chunk ahead of it: the stream stays in order)."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def send() -> None:
        while True:
            due, data = await queue.get()
            if not data:
                break
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()

    sender = asyncio.create_task(send())
    last = 0.0
    try:
        while True:
            data = await reader.read(_READ)
            held = delay.draw()
            last = max(last, loop.time() + held) if held else loop.time()
            queue.put_nowait((last, data))
            if not data:
                break
        await sender
    except (ConnectionError, OSError):
        pass
    finally:
        sender.cancel()
        with contextlib.suppress(BaseException):
            await sender
        writer.close()


async def _serve(port: int, host: str, dport: int, delay: Delay) -> asyncio.Server:
    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.wait_for(asyncio.open_connection(host, dport), 10)
        except (OSError, TimeoutError):
            writer.close()
            return
        await asyncio.gather(
            _pump(reader, up_writer, delay), _pump(up_reader, writer, delay),
            return_exceptions=True,
        )  # fmt: skip

    return await asyncio.start_server(accept, "127.0.0.1", port)


async def main(control: Path, ready: Path, routes: Sequence[str]) -> None:
    delay = Delay(control)
    servers = []
    for route in routes:
        listen, target = route.split("=", 1)
        host, dport = target.rsplit(":", 1)
        servers.append(await _serve(int(listen), host, int(dport), delay))
    ready.write_text("ready\n")
    await delay.watch()


def cli(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.nemesis.proxy")
    parser.add_argument("--control", type=Path, required=True)
    parser.add_argument("--ready", type=Path, required=True)
    parser.add_argument("routes", nargs="+", help="LISTEN_PORT=HOST:PORT")
    args = parser.parse_args(argv)
    asyncio.run(main(args.control, args.ready, args.routes))
    return 0


if __name__ == "__main__":
    sys.exit(cli())
