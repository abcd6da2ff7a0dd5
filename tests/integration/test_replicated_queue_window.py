"""``TargetQueueDepth`` on a replicated queue between two real ``spool serve`` processes on
loopback: a window of 10 on both instances, consumers on both, 1,000 messages published
(half on each) before the consumers start. Each message is processed exactly once, and
``/api/queues`` never shows a depth above 10 on either instance while the queue drains
(read by a watcher, and by each consumer every 25 acks). Then an instance SIGKILLed
mid-drain and started again on its files: each message acked exactly once."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from spool.server.client import Client, subscribe_queue
from tests.support.replication import Cluster
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


def _queue(cluster: Cluster, name: str) -> Any:
    return cluster.api(name, "/api/queues/work")


def test_bounded_copies_on_two_instances_process_each_message_once(tmp_path: Path) -> None:
    cluster = Cluster.both_ways(tmp_path, sow=QUEUE)
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


def _durable(cluster: Cluster, name: str) -> bool:
    text = httpx.get(cluster.procs[name].http_url + "/metrics", timeout=10).text
    values = {
        m.group(1): float(m.group(2))
        for m in re.finditer(r"^(spool_txlog_(?:durable|last)_seq) ([0-9.e+]+)$", text, re.M)
    }
    return values["spool_txlog_durable_seq"] >= values["spool_txlog_last_seq"]


def test_an_instance_killed_mid_drain_recovers_its_bounded_copy(tmp_path: Path) -> None:
    """b is SIGKILLed after its consumer acked some of the messages (acks durable) while
    a's consumer goes on; b starts again on its files, replays its log into a window of
    10 and takes the acks and grants made meanwhile: every message is acked exactly
    once, no acked message is delivered again, b's depth never above 10."""
    cluster = Cluster.both_ways(tmp_path, sow=QUEUE)
    cluster.start()
    b = cluster.procs["b"]
    acked: dict[tuple[str, int], str] = {}  # message -> the instance whose consumer acked it
    delivered_after_ack: list[tuple[str, int]] = []
    views_b: list[dict[str, Any]] = []

    def linked() -> None:
        for name, other in (("a", "b"), ("b", "a")):
            wait_until(lambda n=name, o=other: cluster.destination(n, o)["connected"], 30,
                       message=f"{name} -> {other} connected")  # fmt: skip

    async def consume(name: str, stop: Callable[[], bool]) -> None:
        async with Client(cluster.procs[name].ws_url, f"worker-{name}") as c:
            sub = await subscribe_queue(c, "work", max_backlog=4)
            n_acked = 0
            while not stop():
                try:
                    m = await sub.get(0.2)
                except TimeoutError:
                    continue
                doc = m.json()
                key = (doc["o"], doc["n"])
                if key in acked:
                    delivered_after_ack.append(key)
                acked[key] = name
                m.ack()
                n_acked += 1
                if name == "b" and n_acked % 25 == 0:
                    views_b.append(await asyncio.to_thread(_queue, cluster, "b"))
            await sub.settled()

    async def publish(name: str) -> None:
        async with Client(cluster.procs[name].ws_url, f"pub-{name}") as pub:
            for n in range(HALF):
                pub.publish("work-in", {"o": name, "n": n})
            await pub.flush()

    def drained() -> bool:
        return all(
            _queue(cluster, n)["depth"] == 0 and _queue(cluster, n)["inactive"] == 0
            for n in ("a", "b")
        )

    try:
        linked()

        async def before_the_kill() -> None:
            await asyncio.gather(publish("a"), publish("b"))
            await asyncio.to_thread(
                wait_until,
                lambda: _queue(cluster, "b")["inactive"] == 2 * HALF - TARGET, 30,
                message="b holds every message",
            )  # fmt: skip
            on_b = sum(1 for v in acked.values() if v == "b")
            await consume("b", lambda: sum(1 for v in acked.values() if v == "b") >= on_b + 150)

        asyncio.run(before_the_kill())
        wait_until(lambda: _durable(cluster, "b"), 30, message="b's acks durable")
        wait_until(lambda: _durable(cluster, "a"), 30, message="a's log durable")
        b.kill()

        async def while_b_is_down_and_back() -> None:
            done_a = asyncio.Event()
            worker_a = asyncio.ensure_future(consume("a", done_a.is_set))
            # a delivers its own messages while b is away (b's do not fill its window)
            await asyncio.to_thread(
                wait_until, lambda: sum(1 for v in acked.values() if v == "a") >= 100, 60,
                message="a's consumer goes on while b is down",
            )  # fmt: skip
            await asyncio.to_thread(b.start)
            await asyncio.to_thread(linked)
            worker_b = asyncio.ensure_future(consume("b", done_a.is_set))
            await asyncio.to_thread(wait_until, drained, 120, message="both copies drained")
            done_a.set()
            await asyncio.gather(worker_a, worker_b)

        asyncio.run(while_b_is_down_and_back())
        final_b = _queue(cluster, "b")
    finally:
        cluster.stop()
    assert sorted(acked) == [(o, n) for o in ("a", "b") for n in range(HALF)]
    assert delivered_after_ack == []  # each acked exactly once
    assert views_b and max(v["depth"] for v in views_b) <= TARGET
    assert (final_b["inactive"], final_b["deferred_acks"]) == (0, 0)
