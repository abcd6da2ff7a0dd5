"""``delivered`` of ``GET /api/subscriptions`` against a real ``spool serve``: every path
that delivers to a subscription counts, and counts exactly what its client received.

One broker with a SOW topic and a queue; a live subscriber, a bookmark subscriber that
replays then goes live, ``sow_and_subscribe`` subscribers (from now and from a
bookmark) and a queue consumer that gives one message back each receive known numbers
of messages, then the admin API is read once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx

from spool.server.client import Client, Message, Subscription, subscribe_queue
from tests.support.server import SpoolProcess, sow_topic

ServerFactory = Callable[..., SpoolProcess]

QUEUE = (
    "<Queue><Name>work</Name><MessageType>json</MessageType>"
    "<UnderlyingTopic>work-in</UnderlyingTopic><LeasePeriod>30s</LeasePeriod>"
    "<MaxPerSubscriptionBacklog>4</MaxPerSubscriptionBacklog></Queue>"
)


async def take(sub: Subscription, n: int) -> list[Message]:
    return [await sub.get(20.0) for _ in range(n)]


def delivered(server: SpoolProcess) -> dict[tuple[str, str], Any]:
    r = httpx.get(server.http_url + "/api/subscriptions", timeout=10)
    assert r.status_code == 200, r.text
    return {(s["client"], s["sub_id"]): s["delivered"] for s in r.json()["subscriptions"]}


def test_delivered_counts_every_path_to_a_subscription(
    spool_server_factory: ServerFactory,
) -> None:
    server = spool_server_factory(sow=sow_topic("prices", "/id") + QUEUE, journal_size="8MB")

    async def body() -> None:
        async with (
            Client(server.ws_url, "pub") as pub,
            Client(server.ws_url, "live") as live,
            Client(server.ws_url, "replayer") as replayer,
            Client(server.ws_url, "sow") as sow,
            Client(server.ws_url, "worker") as worker,
        ):
            # before anyone subscribes: 5 ticks in the log, 4 prices in the SOW
            for i in range(5):
                pub.publish("ticks", {"i": i})
            for i in range(4):
                pub.publish("prices", {"id": i, "px": i})
            await pub.flush()
            plain = await live.subscribe("ticks", sub_id="plain")
            old = await replayer.subscribe("ticks", bookmark="0", sub_id="old", completed=True)
            assert len(await take(old, 5)) == 5
            await asyncio.wait_for(old.completed.wait(), 20)
            now = await sow.sow_and_subscribe("prices", sub_id="now")
            snapshot = await take(now, 4)
            assert {m.command for m in snapshot} == {"sow"}
            await asyncio.wait_for(now.snapshot_done.wait(), 20)
            mark = snapshot[-1].bookmark
            assert mark is not None
            then = await sow.sow_and_subscribe("prices", sub_id="then", bookmark=mark)
            assert {m.command for m in await take(then, 4)} == {"sow"}
            queue = await subscribe_queue(worker, "work", max_backlog=4, sub_id="jobs")

            # live from here: 7 ticks (live fan-out, and the replayer's cursor after
            # its cut-over), 3 price updates, 3 queue messages
            for i in range(5, 12):
                pub.publish("ticks", {"i": i})
            for i in range(3):
                pub.publish("prices", {"id": i, "px": 10 + i})
            for i in range(3):
                pub.publish("work-in", {"job": i})
            await pub.flush()
            assert len(await take(plain, 7)) == 7
            assert len(await take(old, 7)) == 7
            assert {m.command for m in await take(now, 3)} == {"publish"}
            assert {m.command for m in await take(then, 3)} == {"publish"}
            jobs = [await queue.get(20.0) for _ in range(3)]
            # one given back comes again: a second delivery of the same message
            jobs[0].cancel()
            again = await queue.get(20.0)
            assert (again.data, again.delivery_count) == (jobs[0].data, 2)
            for msg in (*jobs[1:], again):
                msg.ack()
            await queue.settled()

            assert delivered(server) == {
                ("live", "plain"): 7,
                ("replayer", "old"): 12,
                ("sow", "now"): 7,
                ("sow", "then"): 7,
                ("worker", "jobs"): 4,
            }

    asyncio.run(body())
