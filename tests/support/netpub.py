"""A publisher to run in another network namespace: ``ip netns exec NS python -m
tests.support.netpub URL NAME FIRST LAST USER TOKEN``.

Publishes ``FIRST..LAST`` to ``orders`` with persisted acks, resending after a lost
connection from the last persisted ack (tests/support/replication.py
``publish_resending``), and prints ``acked N`` after each acknowledged batch and ``done``
at the end, so the test in the root namespace can follow it.
"""

from __future__ import annotations

import asyncio
import sys

from tests.support.replication import publish_resending


async def _main(url: str, name: str, first: int, last: int, user: str, token: str) -> None:
    def progress(acked: int) -> None:
        print(f"acked {acked}", flush=True)

    await publish_resending(
        [url], name, "orders", range(first, last + 1), batch=200, progress=progress,
        timeout=240, user_id=user, password=token,
    )  # fmt: skip
    print("done", flush=True)


if __name__ == "__main__":
    url, name, first, last, user, token = sys.argv[1:7]
    asyncio.run(_main(url, name, int(first), int(last), user, token))
