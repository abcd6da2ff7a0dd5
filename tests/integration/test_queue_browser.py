"""The queue message browser and stuck-queue alert against a real ``spool serve`` with
users: pages with a cursor, admin only, entitlement-checked; a message no consumer
matches makes the queue stuck (``/healthz`` degraded, an alert, events) until a consumer
takes it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from spool.server.client import Client, subscribe_queue
from tests.support.roster import bearer
from tests.support.server import SpoolProcess, config_xml
from tests.support.wait import wait_until

FEED = "feed-token-0123456789"
OPS = "ops-token-0123456789"  # admin, entitled to every topic
AUDITOR = "auditor-token-0123456789"  # admin, entitled to other topics only
VIEWER = "viewer-token-0123456789"  # entitled, not an admin
USERS = (
    f"<User><Name>feed</Name><Token>{FEED}</Token><Read>.*</Read><Write>.*</Write></User>"
    f"<User><Name>ops</Name><Token>{OPS}</Token><Admin>true</Admin><Read>.*</Read></User>"
    f"<User><Name>auditor</Name><Token>{AUDITOR}</Token><Admin>true</Admin>"
    "<Read>^orders$</Read></User>"
    f"<User><Name>viewer</Name><Token>{VIEWER}</Token><Read>.*</Read></User>"
)
QUEUE = (
    "<Queue><Name>work</Name><MessageType>json</MessageType>"
    "<UnderlyingTopic>work-in</UnderlyingTopic><LeasePeriod>30s</LeasePeriod>"
    "<MaxPerSubscriptionBacklog>4</MaxPerSubscriptionBacklog>"
    "<StuckMessageAge>1s</StuckMessageAge></Queue>"
)
TOTAL = 250

ServerFactory = Callable[..., SpoolProcess]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[SpoolProcess]:
    proc = SpoolProcess(
        tmp_path, config_xml(tmp_path / "data", users=USERS, sow=QUEUE, topics=("work-in", "work"))
    )
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def _get(server: SpoolProcess, path: str, token: str = OPS) -> httpx.Response:
    return httpx.get(server.http_url + path, headers=bearer(token), timeout=10)


def _json(server: SpoolProcess, path: str, token: str = OPS) -> Any:
    r = _get(server, path, token)
    assert r.status_code == 200, r.text
    return r.json()


async def _publish(server: SpoolProcess, n: int) -> None:
    async with Client(server.ws_url, "pub", user_id="feed", password=FEED) as pub:
        for i in range(n):
            pub.publish("work-in", {"n": i, "kind": "odd" if i % 2 else "even"})
        await pub.flush()


def test_pages_walk_the_queue_once_with_a_cursor(server: SpoolProcess) -> None:
    asyncio.run(_publish(server, TOTAL))
    wait_until(lambda: _json(server, "/api/queues/work")["depth"] == TOTAL, 30,
               message="every message in the queue")  # fmt: skip
    seen: list[int] = []
    after = 0
    pages = 0
    while True:
        page = _json(server, f"/api/queues/work/messages?after={after}&limit=40")
        assert len(page["messages"]) <= 40 and page["depth"] == TOTAL
        seen.extend(orjson_n(m["data"]) for m in page["messages"])
        for m in page["messages"]:
            assert m["reason"] == "no_consumer" and m["owner"] == "spool-test"
            assert m["deliveries"] == 0 and m["lease_holder"] is None and m["epoch"] == 0
            assert m["bookmark"].count("|") == 2
        pages += 1
        if page["next_after"] is None:
            break
        after = page["next_after"]
    assert seen == list(range(TOTAL)) and pages == 7
    for bad in ("limit=0", "limit=501", "after=-1", "limit=x"):
        r = _get(server, f"/api/queues/work/messages?{bad}")
        assert r.status_code == 400, (bad, r.text)
    assert _get(server, "/api/queues/nope/messages").status_code == 404


def orjson_n(data: str) -> int:
    import orjson

    value = orjson.loads(data)["n"]
    assert isinstance(value, int)
    return value


def test_only_entitled_admins_see_messages(server: SpoolProcess) -> None:
    asyncio.run(_publish(server, 3))
    wait_until(lambda: _json(server, "/api/queues/work")["depth"] == 3, 30, message="3 queued")
    r = _get(server, "/api/queues/work/messages", VIEWER)
    assert r.status_code == 403 and "not an admin" in r.json()["detail"]
    r = _get(server, "/api/queues/work/messages", AUDITOR)
    assert r.status_code == 403, r.text
    assert "not entitled to read queue 'work'" in r.json()["detail"]
    r = httpx.get(server.http_url + "/api/queues/work/messages", timeout=10)
    assert r.status_code == 401
    assert len(_json(server, "/api/queues/work/messages", OPS)["messages"]) == 3
    # the queue listing itself shows no message data: any user may read it
    assert _json(server, "/api/queues", VIEWER)["queues"][0]["depth"] == 3


def test_a_message_no_consumer_matches_makes_the_queue_stuck_until_taken(
    server: SpoolProcess,
) -> None:
    async def scenario() -> None:
        await _publish(server, 1)  # {"n": 0, "kind": "even"}
        async with Client(server.ws_url, "odd", user_id="feed", password=FEED) as c:
            await subscribe_queue(c, "work", max_backlog=4, filter="/kind = 'odd'")
            health = await asyncio.to_thread(
                wait_until,
                lambda: (h := _json(server, "/healthz"))["status"] == "degraded" and h,
                30,
                message="healthz degraded",
            )
            assert health["reasons"] == [{"id": "queue-stuck:work", "title": "Queue work is stuck"}]
            q = _json(server, "/api/queues/work")
            assert q["stuck"] is True and q["oldest_undelivered_age"] >= 1.0
            (alert,) = _json(server, "/api/instance")["alerts"]
            assert alert["id"] == "queue-stuck:work" and "filter matches" in alert["message"]
            (m,) = _json(server, "/api/queues/work/messages")["messages"]
            assert m["reason"] == "no_consumer_matches"
            metrics = _get(server, "/metrics").text
            assert 'spool_queue_stuck{queue="work"} 1.0' in metrics
            assert 'spool_queue_oldest_undelivered_age_seconds{queue="work"}' in metrics
            # a consumer that takes it: delivered and acked, the alert clears
            async with Client(server.ws_url, "any", user_id="feed", password=FEED) as c2:
                sub = await subscribe_queue(c2, "work", max_backlog=4)
                async for msg in sub:
                    msg.ack()
                    break
                await sub.settled()
                await asyncio.to_thread(
                    wait_until, lambda: _json(server, "/healthz") == {"status": "ok"}, 30,
                    message="healthz ok again",
                )  # fmt: skip
        events = [
            e["event"] for e in _json(server, "/api/events?category=queue&limit=100")["events"]
        ]
        assert "queue_stuck" in events and "queue_unstuck" in events

    asyncio.run(scenario())
