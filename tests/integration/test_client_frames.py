"""The Python client cuts what it queued into frames the broker accepts.

An application that calls ``publish_many`` in a loop without awaiting must not queue
everything into one frame (21 MB for twenty batches of 1,000 x 1 KB), past the broker's
16 MiB message limit: the broker would close the connection ("frame with 21128894 bytes
exceeds limit"). The client sends frames of at most 1 MiB.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from spool.server.client import Client
from tests.support.server import SpoolProcess

BATCHES = 20
PER_BATCH = 1000
BODY = b'{"v":"' + b"x" * 990 + b'"}'


async def _publish_without_awaiting(url: str) -> int:
    async with Client(url, "bulk") as client:
        base = client.seq
        for _ in range(BATCHES):
            client.publish_many("bulk", [BODY] * PER_BATCH, persisted=True)
        await client.wait_persisted(base + BATCHES * PER_BATCH, timeout=120)
        return client.persisted_seq - base


def test_twenty_megabytes_queued_at_once_are_published(tmp_path: Path) -> None:
    server = SpoolProcess(tmp_path / "spool").start()
    try:
        assert asyncio.run(_publish_without_awaiting(server.ws_url)) == BATCHES * PER_BATCH
    finally:
        server.stop()
