"""A publisher process for the HA client's crash test (run with ``-m``).

``python -m tests.support.ha_publisher URL STORE COUNT PROGRESS`` publishes ``{"n": N}`` for
N = 1..COUNT through an HAClient with a FilePublishStore, as message N with sequence N.
After a crash it goes on from the store: the store's highest sequence is the last message
it produced (a message is in the file before it is sent, so nothing the broker may have is
missing from the store), and the store resends what was not persisted. It writes the last
N it published to PROGRESS now and then, and exits 0 once everything is persisted.

With a fifth argument GATE (a file holding a number), it publishes no message above that
number until the file says more: a test gates the workload on its fault schedule, so the
process cannot finish before the faults however fast it runs.

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


def _gate(path: Path | None) -> int:
    """The highest message the gate lets through (no gate: every one)."""
    if path is None:
        return sys.maxsize
    text = path.read_text() if path.exists() else ""
    return int(text) if text.strip() else 0


async def main(url: str, store: Path, count: int, progress: Path, gate: Path | None) -> int:
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
    allowed = _gate(gate)
    while n < count:
        while n >= allowed:  # the test's schedule holds the workload here
            progress.write_text(str(n))
            await asyncio.sleep(0.01)
            allowed = _gate(gate)
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
    gate = Path(sys.argv[5]) if len(sys.argv) > 5 else None
    sys.exit(asyncio.run(main(url, Path(store), int(count), Path(progress), gate)))
