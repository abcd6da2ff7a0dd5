"""A bookmark subscriber process for the HA client's crash test (run with ``-m``).

``python -m tests.support.ha_subscriber URL STORE OUTPUT COUNT`` subscribes to ``orders``
from EPOCH with a :class:`FileBookmarkStore`, writes one line ``N BOOKMARK`` per message it
processes to OUTPUT, discards the message, and exits 0 after COUNT messages.

The application's effect (the line) and the discard are two writes: a SIGKILL between them
leaves a processed message undiscarded, and the store redelivers it after the restart (it
cannot know the line was written). The subscriber reconciles as an idempotent consumer
does: it reads the bookmarks of its output at start and discards a redelivered one
without processing it again. What the store must guarantee -- nothing discarded comes
back, nothing is skipped, across its own restarts and the broker's -- is what the test
checks. Redeliveries are counted on stderr.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from server.client import DefaultServerChooser, FileBookmarkStore, FixedDelayStrategy, HAClient


async def main(url: str, store: Path, output: Path, count: int) -> int:
    done: set[str] = set()
    n = 0
    if output.exists():
        for line in output.read_text().splitlines():
            parts = line.split()
            if len(parts) == 2:  # a torn last line is not a processed message
                done.add(parts[1])
                n += 1
    client = HAClient(
        "ha-subscriber",
        bookmark_store=FileBookmarkStore(store, fsync=False),
        chooser=DefaultServerChooser([url]),
        delay=FixedDelayStrategy(0.05),
        connect_timeout=5,
    )
    await client.connect_and_logon()
    sub = await client.subscribe("orders", bookmark="0", sub_id="orders-reader")
    redelivered = 0
    with output.open("a") as out:
        async for msg in sub:
            bm = msg.bookmark
            assert bm is not None
            if bm in done:
                redelivered += 1
                done.discard(bm)
                msg.discard()
                continue
            out.write(f"{msg.json()['n']} {bm}\n")
            out.flush()
            msg.discard()
            n += 1
            if n >= count:
                break
    await client.close()
    print(f"redelivered {redelivered}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    url, store, output, count = sys.argv[1:5]
    sys.exit(asyncio.run(main(url, Path(store), Path(output), int(count))))
