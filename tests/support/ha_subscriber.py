"""A bookmark subscriber process for the HA client's crash tests (run with ``-m``).

``python -m tests.support.ha_subscriber URL STORE OUTPUT LAST [DELAY]`` subscribes to
``orders`` from EPOCH with a :class:`FileBookmarkStore` (its default: each discard in the
file as it happens), processes each message by appending one line ``N BOOKMARK`` to OUTPUT
(flushed to the OS), then discards it, and exits 0 once it processed message ``N == LAST``.
``DELAY`` (seconds, default 0) is how long processing one message takes, as CPU work
would (it holds the event loop: the subscription yields to it only every few hundred
messages): a subscriber slower than its publisher.

It does not reconcile its output with the store: a message whose line was written and
whose discard was not (a SIGKILL between the two) is processed again after a restart, and
the test counts those. A line torn by a kill (no newline) was not processed: it is cut off
at start. Connection states and what the exception listener hears (a store whose disk
failed) go to stderr.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

from spool.server.client import (
    DefaultServerChooser,
    FileBookmarkStore,
    FixedDelayStrategy,
    HAClient,
)


def _cut_torn_line(output: Path) -> None:
    if not output.exists():
        return
    data = output.read_bytes()
    end = data.rfind(b"\n") + 1
    if end < len(data):
        with output.open("r+b") as f:
            f.truncate(end)


async def main(url: str, store: Path, output: Path, last: int, delay: float) -> int:
    _cut_torn_line(output)
    client = HAClient(
        "ha-subscriber",
        bookmark_store=FileBookmarkStore(store, fsync=False),
        chooser=DefaultServerChooser([url]),
        delay=FixedDelayStrategy(0.05),
        connect_timeout=5,
    )
    client.add_connection_state_listener(lambda e: print(e.state.value, e.detail, file=sys.stderr))
    client.exception_listener = lambda exc: print(f"error: {exc}", file=sys.stderr)
    await client.connect_and_logon()
    sub = await client.subscribe("orders", bookmark="0", sub_id="orders-reader")
    fd = os.open(output, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        async for msg in sub:
            n = msg.json()["n"]
            if delay:
                time.sleep(delay)  # the work itself
            os.write(fd, f"{n} {msg.bookmark}\n".encode())  # the effect, in the OS at once
            msg.discard()
            if n >= last:
                break
    finally:
        os.close(fd)
    await client.close()
    return 0


if __name__ == "__main__":
    url, store, output, last = sys.argv[1:5]
    delay = float(sys.argv[5]) if len(sys.argv) > 5 else 0.0
    sys.exit(asyncio.run(main(url, Path(store), Path(output), int(last), delay)))
