"""Everyday-client workers: Spool's own asyncio ``Client``, used as an application would.

The lean workers (workers.py) send pre-encoded frames and count raw bytes; these measure
what a user of ``spool.server.client.Client`` gets, client cost included: publishing with
:meth:`Client.publish_many` (a batch of 100 encoded in one pass, like redis-py's pipeline
of 100 against which it is compared) and persisted acks, and replaying from EPOCH with
``async for batch in sub.batches()``, reading every message's body (the message objects
are built, as a user's code would see them).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from spool.server.client import Client
from tests.bench.bodies import body_pool
from tests.bench.processes import Gate


async def client_publish(
    gate: Gate,
    *,
    url: str,
    name: str,
    topic: str,
    count: int,
    body_bytes: int,
    seed: int,
    window: int,
    per_batch: int,
    timeout: float,
) -> dict[str, Any]:
    """Publish ``count`` messages with persisted acks, at most ``window`` unacked; the
    clock stops when the persisted ack of the last one arrives."""
    pool = body_pool(body_bytes, seed)
    async with Client(url, name) as client:
        base = client.seq
        await gate.aopen()
        start = time.monotonic_ns()
        sent = 0
        while sent < count:
            n = min(per_batch, count - sent)
            if sent + n - (client.persisted_seq - base) > window:
                await client.wait_persisted(base + sent + n - window, timeout)
            i = sent % len(pool)
            batch = pool[i : i + n] if i + n <= len(pool) else (pool + pool)[i : i + n]
            client.publish_many(topic, batch, persisted=True)
            sent += n
            if sent % (per_batch * 10) == 0:
                await asyncio.sleep(0)  # let the writer send what is queued
        await client.wait_persisted(base + count, timeout)
        end = time.monotonic_ns()
    return {"start_ns": start, "end_ns": end, "count": count, "bytes": count * body_bytes}


async def client_replay(
    gate: Gate, *, url: str, name: str, topic: str, expected: int, timeout: float
) -> dict[str, Any]:
    """Subscribe from EPOCH after go and read ``expected`` messages in batches."""
    async with Client(url, name, queue_size=100_000) as client:
        await gate.aopen()
        start = time.monotonic_ns()
        sub = await client.subscribe(topic, bookmark="0", timeout=timeout)
        count = 0
        nbytes = 0
        first = 0

        async def consume() -> None:
            nonlocal count, nbytes, first
            async for batch in sub.batches():
                if not first:
                    first = time.monotonic_ns()
                for msg in batch:
                    nbytes += len(msg.data)
                count += len(batch)
                if count >= expected:
                    return

        await asyncio.wait_for(consume(), timeout)
        last = time.monotonic_ns()
    return {"start_ns": start, "first_ns": first, "last_ns": last, "count": count,
            "bytes": nbytes}  # fmt: skip
