"""A publisher process for the HA client's crash test (run with ``-m``).

``python -m tests.support.ha_publisher URL STORE COUNT PROGRESS`` publishes ``{"n": N}`` for
N = 1..COUNT through an HAClient with a FilePublishStore, as message N with sequence N.
After a crash it goes on from the store: the store's highest sequence is the last message
it produced (a message is in the file before it is sent, so nothing the broker may have is
missing from the store), and the store resends what was not persisted. It writes the last
N it published to PROGRESS now and then, and exits 0 once everything is persisted.

When its store's disk fails (``StoreIOError``: the publish was refused, not numbered) it
says so on stderr, waits until the store takes publishes again (``wait_for_room``) and
publishes the same N again, as an application should.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from spool.server.client import (
    DefaultServerChooser,
    FilePublishStore,
    FixedDelayStrategy,
    HAClient,
    StoreIOError,
)


async def main(url: str, store: Path, count: int, progress: Path) -> int:
    pstore = FilePublishStore(store)
    client = HAClient(
        "ha-crash-publisher",
        publish_store=pstore,
        chooser=DefaultServerChooser([url]),
        delay=FixedDelayStrategy(0.05),
        connect_timeout=5,
    )
    await client.connect_and_logon()
    n = client.publish_store.last_seq
    print(f"resuming after {n} ({client.unpersisted_count()} to resend, "
          f"{pstore.dropped_bytes} bytes of torn tail dropped)", file=sys.stderr)  # fmt: skip
    while n < count:
        n += 1
        try:
            seq = client.publish("orders", b'{"n":%d}' % n)
        except StoreIOError as exc:
            print(f"store failed: {exc}", file=sys.stderr)
            await client.wait_for_room()
            n -= 1
            continue
        assert seq == n, (seq, n)
        if n % 500 == 0:
            progress.write_text(str(n))
            await asyncio.sleep(0.01)  # a paced producer: the kills land mid-stream
    await client.publish_flush(120)
    await client.close()
    return 0


if __name__ == "__main__":
    url, store, count, progress = sys.argv[1:5]
    sys.exit(asyncio.run(main(url, Path(store), int(count), Path(progress))))
