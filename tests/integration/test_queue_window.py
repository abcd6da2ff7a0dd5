"""``TargetQueueDepth`` against a real ``spool serve``: a queue of 1,000 messages with a
window of 10, drained by a consumer while ``/api/queues`` is watched, the broker
SIGKILLed half-way and started again on its files."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import httpx

from spool.server.client import Client, subscribe_queue
from tests.integration.test_queues import ServerFactory, api
from tests.support.server import SpoolProcess
from tests.support.wait import async_wait_until, wait_until

TARGET = 10
TOTAL = 1000
QUEUE = (
    "<LocalQueue><Name>work</Name><MessageType>json</MessageType>"
    "<UnderlyingTopic>work-in</UnderlyingTopic><LeasePeriod>30s</LeasePeriod>"
    f"<MaxPerSubscriptionBacklog>{TARGET}</MaxPerSubscriptionBacklog>"
    f"<TargetQueueDepth>{TARGET}</TargetQueueDepth></LocalQueue>"
)


def _gauge(server: SpoolProcess, name: str) -> int:
    text = httpx.get(server.http_url + "/metrics", timeout=10).text
    found = re.search(rf"^{name} ([0-9.e+]+)$", text, re.M)
    assert found is not None, name
    return int(float(found.group(1)))


def _all_durable(server: SpoolProcess) -> bool:
    return _gauge(server, "spool_txlog_durable_seq") >= _gauge(server, "spool_txlog_last_seq")


async def _view(server: SpoolProcess) -> dict[str, Any]:
    info: dict[str, Any] = await asyncio.to_thread(api, server, "/api/queues/work")
    return info


async def _consume(
    server: SpoolProcess, name: str, count: int, acked: set[int], seen: list[int]
) -> None:
    """Ack ``count`` messages (or until ``acked`` has every message); the queue's depth in
    ``/api/queues`` never passes the target on the way."""
    async with Client(server.ws_url, name) as c:
        sub = await subscribe_queue(c, "work", max_backlog=TARGET)
        done = 0
        while done < count and len(acked) < TOTAL:
            m = await sub.get(30)
            n = m.json()["n"]
            seen.append(n)
            assert n not in acked, f"message {n} was delivered again after its ack"
            m.ack()
            acked.add(n)
            done += 1
            if done % 50 == 0:
                info = await _view(server)
                assert info["depth"] <= TARGET, info
                # acks still on their way are counted by the broker, at most a backlog
                left = TOTAL - len(acked)
                assert left <= info["depth"] + info["inactive"] <= left + TARGET, info
        await sub.settled()
        assert not sub.errors
        # more delivered than acked when the broker dies: leased, not acked
        if len(acked) < TOTAL:
            await sub.get(30)


def test_a_window_of_ten_over_a_thousand_messages_survives_a_sigkill(
    spool_server_factory: ServerFactory,
) -> None:
    server = spool_server_factory(sow=QUEUE, journal_size="8MB")

    async def publish() -> None:
        async with Client(server.ws_url, "pub") as pub:
            for n in range(TOTAL):
                pub.publish("work-in", {"n": n})
            await pub.flush()

    asyncio.run(publish())
    info = api(server, "/api/queues/work")
    assert (info["depth"], info["inactive"], info["target_queue_depth"]) == (
        TARGET,
        TOTAL - TARGET,
        TARGET,
    )
    metrics = httpx.get(server.http_url + "/metrics", timeout=10).text
    assert f'spool_queue_inactive{{queue="work"}} {float(TOTAL - TARGET)}' in metrics

    acked: set[int] = set()
    seen: list[int] = []
    asyncio.run(_consume(server, "c1", 400, acked, seen))
    assert seen[:400] == list(range(400))  # log order
    wait_until(lambda: _all_durable(server), 30, message="acks durable")
    server.kill()
    server.start()

    async def rest() -> None:
        await async_wait_until(lambda: api(server, "/api/queues/work")["depth"] == TARGET, 30)
        info = await _view(server)
        assert info["inactive"] == TOTAL - 400 - TARGET
        await _consume(server, "c2", TOTAL, acked, seen)

    asyncio.run(rest())
    assert acked == set(range(TOTAL))
    # the messages leased (not acked) at the kill came again; nothing acked did
    assert len(seen) == TOTAL
    wait_until(lambda: api(server, "/api/queues/work")["inactive"] == 0, 20, message="empty")
    info = api(server, "/api/queues/work")
    assert (info["depth"], info["deferred_acks"], info["removed"]) == (0, 0, {"acked": 600})
