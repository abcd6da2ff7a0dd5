"""Dead letters across crashes, with real processes: a SIGKILL while rejects are in
flight leaves every message in exactly one place (worked, in its queue, or a dead letter);
the dead letters are then redriven and worked once each. The same on a replicated queue
whose owner is killed after it gave up on messages: the other instance redrives them.

The oracle reads both topics from the transaction log (a replay from the start), not
only the broker's own counters: the underlying topic holds each original once and each
redriven copy once, with the original bookmark as its correlation id, and the
dead-letter topic holds one letter per message given up on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from spool.server.client import Client, Message, subscribe_queue
from tests.support.replication import Cluster
from tests.support.server import SpoolProcess, sow_topic
from tests.support.wait import wait_until

ServerFactory = Callable[..., SpoolProcess]

pytestmark = [pytest.mark.slow]

SOW = (
    "<Queue><Name>work</Name><MessageType>json</MessageType>"
    "<UnderlyingTopic>work-in</UnderlyingTopic><LeasePeriod>60s</LeasePeriod>"
    "<MaxPerSubscriptionBacklog>10</MaxPerSubscriptionBacklog>"
    "<DeadLetter><Topic>work-dead</Topic></DeadLetter></Queue>"
    + sow_topic("work-dead", "/dead_letter/bookmark")
)
TOTAL = 20


def api(server: SpoolProcess, path: str) -> Any:
    r = httpx.get(server.http_url + path, timeout=10)
    assert r.status_code == 200, r.text
    return r.json()


def letters(server: SpoolProcess, *, redriven: bool = False) -> dict[str, dict[str, Any]]:
    """The queue's dead letters by original bookmark (those sent back too: ``redriven``)."""
    flag = "true" if redriven else "false"
    found = api(server, f"/api/queues/work/dead_letters?limit=1000&redriven={flag}")["letters"]
    return {letter["bookmark"]: letter for letter in found}


async def replay(server: SpoolProcess, topic: str) -> list[Message]:
    """Every message of ``topic`` in the transaction log, in order."""
    async with Client(server.ws_url, f"replay-{topic}") as c:
        sub = await c.subscribe(topic, bookmark="0", completed=True)
        await asyncio.wait_for(sub.completed.wait(), 30)
        # the completed ack follows the replayed messages on the connection
        return [await sub.get(10) for _ in range(sub.queue.qsize())]


async def publish(server: SpoolProcess, count: int) -> None:
    async with Client(server.ws_url, "pub") as pub:
        for n in range(count):
            pub.publish("work-in", {"n": n})
        await pub.flush()


async def work(server: SpoolProcess, count: int) -> list[Message]:
    """A consumer that takes ``count`` messages of the queue and acks each."""
    async with Client(server.ws_url, "worker") as c:
        sub = await subscribe_queue(c, "work", max_backlog=10)
        got = []
        for _ in range(count):
            msg = await sub.get(30)
            got.append(msg.message)
            msg.ack()
        await sub.settled()
        return got


def body(msg: Message) -> Any:
    return orjson.loads(msg.data)


def test_a_kill_while_rejects_are_in_flight_leaves_each_message_in_one_place(
    spool_server_factory: ServerFactory,
) -> None:
    server = spool_server_factory(sow=SOW, journal_size="8MB")

    async def before_the_crash() -> tuple[set[str], set[str], set[str]]:
        await publish(server, TOTAL)
        async with Client(server.ws_url, "c") as c:
            sub = await subscribe_queue(c, "work", max_backlog=10)
            first = [await sub.get(30) for _ in range(10)]
            for msg in first:
                if msg.json()["n"] % 2:
                    msg.reject("odd")
                else:
                    msg.ack()
            await sub.settled()
            second = [await sub.get(30) for _ in range(10)]
            for msg in second:
                msg.reject("in flight")
            # the crash comes once the first of these reached the dead-letter topic,
            # the others on their way (each may or may not have been written)
            await asyncio.to_thread(
                wait_until, lambda: api(server, "/api/queues/work")["dead_lettered"] > 5, 30,
                message="a reject of the second batch dead-lettered",
            )  # fmt: skip
            server.kill()
        acked = {m.bookmark for m in first if m.json()["n"] % 2 == 0}
        rejected = {m.bookmark for m in first if m.json()["n"] % 2}
        return acked, rejected, {m.bookmark for m in second}

    acked, rejected, in_flight = asyncio.run(before_the_crash())
    server.start()
    dead = letters(server)
    depth = api(server, "/api/queues/work")["depth"]
    back = {m.bookmark for m in asyncio.run(work(server, depth))}
    # every message is in exactly one place: worked before, a dead letter, or still queued
    assert rejected <= set(dead) and {dead[b]["detail"] for b in rejected} == {"odd"}
    assert not set(dead) & back and not acked & (set(dead) | back)
    assert acked | set(dead) | back == acked | rejected | in_flight
    assert len(acked | rejected | in_flight) == TOTAL
    assert api(server, "/api/queues/work")["depth"] == 0
    # the topics agree: one letter per message given up on, each original once
    dead_topic = asyncio.run(replay(server, "work-dead"))
    assert sorted(body(m)["dead_letter"]["bookmark"] for m in dead_topic) == sorted(dead)
    originals = asyncio.run(replay(server, "work-in"))
    assert sorted(m.bookmark for m in originals) == sorted(acked | rejected | in_flight)

    # the dead letters go back and are worked once each, with their lineage
    async def redrive_and_work() -> list[Message]:
        worker = asyncio.create_task(work(server, len(dead)))
        r = await asyncio.to_thread(
            httpx.post, server.http_url + "/api/queues/work/redrive", json={"limit": 100},
            timeout=30,
        )  # fmt: skip
        assert r.status_code == 200 and r.json()["redriven"] == len(dead), r.text
        return await worker

    worked = asyncio.run(redrive_and_work())
    assert sorted(m.header["x"] for m in worked) == sorted(dead)
    server.stop()
    server.start()
    assert api(server, "/api/queues/work")["depth"] == 0
    assert letters(server) == {} and set(letters(server, redriven=True)) == set(dead)
    topic = asyncio.run(replay(server, "work-in"))
    copies = [m for m in topic if m.header.get("x")]
    assert len(topic) == TOTAL + len(dead)
    assert sorted(m.header["x"] for m in copies) == sorted(dead)
    assert sorted(body(m)["n"] for m in copies) == sorted(
        body(m)["n"] for m in originals if m.bookmark in dead
    )


def _queue(cluster: Cluster, name: str) -> Any:
    return cluster.api(name, "/api/queues/work")


def _linked(cluster: Cluster) -> None:
    for name, other in (("a", "b"), ("b", "a")):
        wait_until(lambda n=name, o=other: cluster.destination(n, o)["connected"], 30,
                   message=f"{name} -> {other} connected")  # fmt: skip


def test_the_replica_redrives_what_a_killed_owner_gave_up_on(tmp_path: Path) -> None:
    cluster = Cluster.both_ways(tmp_path, sow=SOW)
    cluster.start()
    a, b = cluster.procs["a"], cluster.procs["b"]
    try:
        _linked(cluster)

        async def on_the_owner() -> set[str]:
            await publish(a, 10)
            async with Client(a.ws_url, "c") as c:
                sub = await subscribe_queue(c, "work", max_backlog=10)
                msgs = [await sub.get(30) for _ in range(10)]
                for msg in msgs:
                    if msg.json()["n"] < 4:
                        msg.reject("bad input")
                    else:
                        msg.ack()
                await sub.settled()
            return {m.bookmark for m in msgs if m.json()["n"] < 4}

        given_up = asyncio.run(on_the_owner())
        # b holds the letters and the queue's removals before the owner dies
        wait_until(lambda: set(letters(b)) == given_up, 30, message="b has the 4 letters")
        wait_until(lambda: _queue(cluster, "b")["depth"] == 0, 30, message="b's copy is empty")
        a.kill()
        wait_until(lambda: not cluster.destination("b", "a")["connected"], 30)

        async def redrive_on_b() -> list[Message]:
            worker = asyncio.create_task(work(b, 4))
            r = await asyncio.to_thread(
                httpx.post, b.http_url + "/api/queues/work/redrive", json={}, timeout=30
            )
            assert r.status_code == 200 and r.json()["redriven"] == 4, r.text
            return await worker

        worked = asyncio.run(redrive_on_b())
        assert sorted(m.header["x"] for m in worked) == sorted(given_up)
        a.start()
        _linked(cluster)
        # a learns of the redrive from b: its letters are marked, the copies acked
        wait_until(lambda: letters(a) == {}, 30, message="a's letters marked")
        wait_until(lambda: _queue(cluster, "a")["depth"] == 0, 30, message="a's copy empty")
        assert set(letters(a, redriven=True)) == given_up
        topic = asyncio.run(replay(a, "work-in"))
        dead_topic = asyncio.run(replay(a, "work-dead"))
    finally:
        cluster.stop()
    copies = [m for m in topic if m.header.get("x")]
    assert len(topic) == 14 and sorted(m.header["x"] for m in copies) == sorted(given_up)
    # a letter, then its mark: two messages per original on the dead-letter topic
    heads = [body(m)["dead_letter"] for m in dead_topic]
    assert sorted(h["bookmark"] for h in heads) == sorted([*given_up, *given_up])
    assert sum(h.get("redriven") is not None for h in heads) == 4
