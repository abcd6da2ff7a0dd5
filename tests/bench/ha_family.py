"""The HA client scenarios: what the stores cost.

- ``spool.ha.publish.{memory,file}_store.100B``: one ``HAClient`` publishes through its
  publish store, ``publish_many`` batches of 100, at most 10,000 unpersisted (every
  publish with a persisted ack, the file store writing and fsyncing each batch in a
  thread before it goes on the wire) and ends at ``publish_flush``; to be read next to
  ``client.publish.persisted.100B`` (the plain ``Client``, same pacing, no store).
- ``spool.ha.replay.file_bookmarks.100B``: one ``HAClient`` bookmark subscription replays
  a log from EPOCH through a ``FileBookmarkStore``, discarding every message.

The workers use the real client API (not the lean wire workers of the other families):
the point is the cost of the HA client itself.
"""

from __future__ import annotations

import asyncio
import functools
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from spool.server.client import (
    Client,
    DefaultServerChooser,
    FileBookmarkStore,
    FilePublishStore,
    HAClient,
    MemoryPublishStore,
)
from tests.bench.catalog import ScenarioSpec
from tests.bench.processes import Gate, Task, run_tasks
from tests.bench.spool_families import _pid, _seconds, _with_broker
from tests.bench.suite import Suite
from tests.support.server import SpoolProcess


def _body(n: int, size: int) -> bytes:
    head = b'{"n":%d,"v":"' % n
    return head + b"x" * max(0, size - len(head) - 2) + b'"}'


async def ha_publish(
    gate: Gate, *, url: str, name: str, topic: str, count: int, body_bytes: int, store: str,
    timeout: float,
) -> dict[str, Any]:  # fmt: skip
    """Publish ``count`` messages through an HAClient; ends when all are persisted."""
    bodies = [_body(n, body_bytes) for n in range(1000)]
    with tempfile.TemporaryDirectory() as d:
        pstore = (
            FilePublishStore(Path(d) / "pub.store") if store == "file" else MemoryPublishStore()
        )
        client = HAClient(name, publish_store=pstore, chooser=DefaultServerChooser([url]))
        await client.connect_and_logon()
        try:
            await gate.aopen()
            start = time.monotonic_ns()
            for i in range(0, count, 100):
                client.publish_many(topic, bodies[i % 1000 : i % 1000 + 100])
                await asyncio.sleep(0)  # an application that lets its loop run
                while client.unpersisted_count() > 10_000:  # pace, like client.publish.*
                    await asyncio.sleep(0.001)
            await client.publish_flush(timeout)
            end = time.monotonic_ns()
        finally:
            await client.close()
    return {"start_ns": start, "end_ns": end, "count": count}


async def ha_replay(
    gate: Gate, *, url: str, name: str, topic: str, count: int, timeout: float
) -> dict[str, Any]:
    """Replay ``count`` messages from EPOCH through a FileBookmarkStore, discarding each."""
    with tempfile.TemporaryDirectory() as d:
        client = HAClient(name, bookmark_store=FileBookmarkStore(Path(d) / "bm.store"),
                          chooser=DefaultServerChooser([url]))  # fmt: skip
        await client.connect_and_logon()
        try:
            await gate.aopen()
            start = time.monotonic_ns()
            sub = await client.subscribe(topic, bookmark="0", sub_id="bench")
            n = 0
            async for msg in sub:
                msg.discard()
                n += 1
                if n == count:
                    break
            await client.bookmark_store.sync()
            end = time.monotonic_ns()
        finally:
            await client.close()
    return {"start_ns": start, "end_ns": end, "count": n}


async def fill(url: str, topic: str, count: int, body_bytes: int) -> None:
    async with Client(url, f"fill-{topic}") as c:
        last = 0
        for start in range(0, count, 5000):
            last = c.publish_many(topic, [_body(n, body_bytes) for n in range(start, min(count, start + 5000))],
                                  persisted=True)  # fmt: skip
        await c.wait_persisted(last, 120)


async def fill_worker(
    gate: Gate, *, url: str, topic: str, count: int, body_bytes: int
) -> dict[str, Any]:
    """Fill ``topic`` for the replay scenario (persisted, through the plain client)."""
    await gate.aopen()
    await fill(url, topic, count, body_bytes)
    return {}


def _once(suite: Suite, broker: SpoolProcess, spec: ScenarioSpec, topic: str) -> dict[str, float]:
    s = suite.settings
    rid = suite.next_id()
    if ".publish." in spec.name:
        task = Task(ha_publish, {
            "url": broker.ws_url, "name": f"hapub-{rid}", "topic": f"bench/ha/{rid}",
            "count": s.publish_count, "body_bytes": spec.params["body_bytes"],
            "store": spec.params["store"], "timeout": s.worker_timeout,
        })  # fmt: skip
    else:
        task = Task(ha_replay, {
            "url": broker.ws_url, "name": f"harep-{rid}", "topic": topic,
            "count": s.publish_count, "timeout": s.worker_timeout,
        })  # fmt: skip
    (res,) = run_tasks([task], timeout=s.worker_timeout)
    secs = _seconds(res["start_ns"], res["end_ns"])
    return {"msgs_per_s": res["count"] / secs, "elapsed_s": secs}


def run_ha(suite: Suite, chosen: Sequence[ScenarioSpec]) -> None:
    """The HA family: one broker; the replay scenario reads a topic filled once."""
    s = suite.settings
    topic = "bench/ha/replay"

    def body(broker: SpoolProcess) -> None:
        pid = functools.partial(_pid, broker)
        if any(".replay." in sp.name for sp in chosen):
            run_tasks([Task(fill_worker, {"url": broker.ws_url, "topic": topic,
                                           "count": s.publish_count, "body_bytes": 100})],
                      timeout=s.worker_timeout)  # fmt: skip
        for spec in chosen:
            suite.measure(spec, functools.partial(_once, suite, broker, spec, topic),
                          params={"count": s.publish_count}, profile_pid=pid)  # fmt: skip

    _with_broker(suite, "ha", chosen, body)
