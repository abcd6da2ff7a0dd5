"""``TargetQueueDepth`` on a replicated queue between two real ``spool serve`` processes on
loopback: a window of 10 on both instances, consumers on both, 1,000 messages published
(half on each) before the consumers start. Each message is processed exactly once, and
``/api/queues`` never shows a depth above 10 on either instance while the queue drains
(read by a watcher, and by each consumer every 25 acks)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from server.client import Client, subscribe_queue
from tests.support.replication import Cluster, destination
from tests.support.wait import wait_until

pytestmark = [pytest.mark.slow]

TARGET = 10
HALF = 500
QUEUE = (
    "<Queue><Name>work</Name><MessageType>json</MessageType>"
    "<UnderlyingTopic>work-in</UnderlyingTopic><LeasePeriod>60s</LeasePeriod>"
    "<MaxPerSubscriptionBacklog>4</MaxPerSubscriptionBacklog>"
    f"<TargetQueueDepth>{TARGET}</TargetQueueDepth></Queue>"
)


def _pair(tmp_path: Path) -> Cluster:
    cluster = Cluster(tmp_path, ["a", "b"])
    for name, other in (("a", "b"), ("b", "a")):
        cluster.add(
            name,
            destinations=[destination(other, [cluster.address(other)], passthrough=(".*",))],
            sow=QUEUE,
        )
    return cluster


def _queue(cluster: Cluster, name: str) -> Any:
    return cluster.api(name, "/api/queues/work")


def test_bounded_copies_on_two_instances_process_each_message_once(tmp_path: Path) -> None:
    cluster = _pair(tmp_path)
    cluster.start()
    processed: dict[str, list[tuple[str, int]]] = {"a": [], "b": []}
    views: dict[str, list[dict[str, Any]]] = {"a": [], "b": []}
    try:
        for name, other in (("a", "b"), ("b", "a")):
            wait_until(lambda n=name, o=other: cluster.destination(n, o)["connected"], 30,
                       message=f"{name} -> {other} connected")  # fmt: skip
        assert _queue(cluster, "a")["target_queue_depth"] == TARGET

        async def consume(name: str, stop: asyncio.Event) -> None:
            async with Client(cluster.procs[name].ws_url, f"worker-{name}") as c:
                sub = await subscribe_queue(c, "work", max_backlog=4)
                while not stop.is_set():
                    try:
                        m = await sub.get(0.2)
                    except TimeoutError:
                        continue
                    doc = m.json()
                    processed[name].append((doc["o"], doc["n"]))
                    m.ack()
                    if len(processed[name]) % 25 == 0:  # this instance's view, as it drains
                        views[name].append(await asyncio.to_thread(_queue, cluster, name))
                await sub.settled()
                assert not sub.errors

        async def publish(name: str) -> None:
            async with Client(cluster.procs[name].ws_url, f"pub-{name}") as pub:
                for n in range(HALF):
                    pub.publish("work-in", {"o": name, "n": n})
                await pub.flush()

        async def watch(stop: asyncio.Event) -> None:
            """``/api/queues`` on both instances, again and again, while they drain."""
            while not stop.is_set():
                for name in ("a", "b"):
                    views[name].append(await asyncio.to_thread(_queue, cluster, name))
                await asyncio.sleep(0.01)

        async def run() -> None:
            stop, stop_watch = asyncio.Event(), asyncio.Event()
            await asyncio.gather(publish("a"), publish("b"))
            # both copies hold every message: 10 active, the rest inactive, on each
            await asyncio.to_thread(
                wait_until,
                lambda: all(_queue(cluster, n)["inactive"] == 2 * HALF - TARGET
                            for n in ("a", "b")),
                30, message="both copies hold every message",
            )  # fmt: skip
            for name in ("a", "b"):
                assert _queue(cluster, name)["depth"] == TARGET
            watcher = asyncio.ensure_future(watch(stop_watch))
            workers = [asyncio.ensure_future(consume(n, stop)) for n in ("a", "b")]

            def drained() -> bool:
                ia, ib = _queue(cluster, "a"), _queue(cluster, "b")
                return all(i["depth"] == 0 and i["inactive"] == 0 for i in (ia, ib))

            await asyncio.to_thread(wait_until, drained, 90,
                                    message="both bounded copies drained")  # fmt: skip
            stop_watch.set()
            await watcher
            stop.set()
            await asyncio.gather(*workers)

        asyncio.run(run())
        final = {name: _queue(cluster, name) for name in ("a", "b")}
    finally:
        cluster.stop()
    everything = processed["a"] + processed["b"]
    expected = [(o, n) for o in ("a", "b") for n in range(HALF)]
    assert sorted(everything) == expected  # each once: no loss, no duplicate
    assert processed["a"] and processed["b"]
    for name in ("a", "b"):
        seen = views[name]
        assert len(seen) > 10, "the watcher saw the queue while it drained"
        assert max(v["depth"] for v in seen) <= TARGET, name
        assert max(v["inactive"] for v in seen) > 0, f"{name}'s window never bounded it"
        assert (final[name]["inactive"], final[name]["deferred_acks"]) == (0, 0)
