"""A queue consumer process for crash tests (tests/integration/test_queues.py).

``python -m tests.support.queue_consumer URL NAME QUEUE JOURNAL [BACKLOG]``

For every message it appends ``P n dc pid`` to the journal (processing began), then acks
it, waits until the broker processed the ack and appends ``A n dc pid`` (the ack is
done). Each line is one ``write`` on a file opened with ``O_APPEND``, so a SIGKILL never
leaves half a line and lines of several consumers never interleave. The test kills
consumers at any point and reads the journals as its oracle.
"""

from __future__ import annotations

import asyncio
import os
import sys

from spool.server.client import Client, subscribe_queue


async def consume(url: str, name: str, queue: str, journal: str, backlog: int) -> None:
    fd = os.open(journal, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    pid = os.getpid()
    async with Client(url, name) as client:
        sub = await subscribe_queue(client, queue, max_backlog=backlog)
        os.write(fd, f"R 0 0 {pid}\n".encode())  # subscribed: the test may start killing
        async for msg in sub:
            n = msg.json()["n"]
            os.write(fd, f"P {n} {msg.delivery_count} {pid}\n".encode())
            msg.ack()
            await sub.settled()
            if sub.errors:
                raise sub.errors[-1]
            os.write(fd, f"A {n} {msg.delivery_count} {pid}\n".encode())


def main() -> None:
    url, name, queue, journal = sys.argv[1:5]
    backlog = int(sys.argv[5]) if len(sys.argv) > 5 else 1
    asyncio.run(consume(url, name, queue, journal, backlog))


if __name__ == "__main__":
    main()
