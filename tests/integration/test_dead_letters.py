"""Dead letters against a real ``spool serve``: a consumer (the Python client) rejects a
message, the queue's REST view counts it, an operator redrives it over REST, the
consumer gets it again with its lineage, and a restart keeps every place as it was."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx

from spool.server.client import Client, subscribe_queue
from tests.support.server import SpoolProcess, sow_topic

ServerFactory = Callable[..., SpoolProcess]

SOW = (
    "<Queue><Name>work</Name><MessageType>json</MessageType>"
    "<UnderlyingTopic>work-in</UnderlyingTopic><MaxPerSubscriptionBacklog>4"
    "</MaxPerSubscriptionBacklog><DeadLetter><Topic>work-dead</Topic></DeadLetter></Queue>"
    + sow_topic("work-dead", "/dead_letter/bookmark")
)


def api(server: SpoolProcess, path: str) -> Any:
    r = httpx.get(server.http_url + path, timeout=10)
    assert r.status_code == 200, r.text
    return r.json()


def redrive(server: SpoolProcess, body: object) -> httpx.Response:
    return httpx.post(server.http_url + "/api/queues/work/redrive", json=body, timeout=30)


def test_a_rejected_message_is_redriven_with_its_lineage(
    spool_server_factory: ServerFactory,
) -> None:
    server = spool_server_factory(sow=SOW, journal_size="8MB")

    async def reject() -> str:
        async with Client(server.ws_url, "pub") as pub, Client(server.ws_url, "c") as c:
            pub.publish("work-in", {"n": 1})
            await pub.flush()
            sub = await subscribe_queue(c, "work", max_backlog=4)
            msg = await sub.get(10)
            msg.reject("cannot parse")
            await sub.settled()
            assert sub.acks[0].header["records_deleted"] == 1
            return msg.bookmark

    original = asyncio.run(reject())
    info = api(server, "/api/queues/work")
    assert (info["depth"], info["dead_letter_topic"], info["dead_lettered"]) == (
        0, "work-dead", 1,
    )  # fmt: skip
    assert info["removed"] == {"rejected": 1}
    (letter,) = api(server, "/api/queues/work/dead_letters")["letters"]
    assert (letter["bookmark"], letter["reason"], letter["detail"]) == (
        original, "rejected", "cannot parse",
    )  # fmt: skip
    assert letter["data"] == '{"n":1}' and letter["redriven"] is None
    assert api(server, "/api/queues/work/dead_letters?filter=/dead_letter/deliveries%20%3E%201") == {
        "queue": "work", "dead_letter_topic": "work-dead", "letters": [], "redrive_max": 10_000,
    }  # fmt: skip
    bad = httpx.get(server.http_url + "/api/queues/work/dead_letters?redriven=yes", timeout=10)
    assert bad.status_code == 400

    # bad requests change nothing
    assert redrive(server, {"limit": 0}).status_code == 400
    assert redrive(server, {"filter": "/a =="}).status_code == 400
    assert redrive(server, {"bogus": 1}).status_code == 400
    assert redrive(server, {"target": "^work"}).status_code == 400

    async def get_again() -> tuple[str, str, dict[str, Any]]:
        async with Client(server.ws_url, "c2") as c:
            sub = await subscribe_queue(c, "work", max_backlog=4)
            r = await asyncio.to_thread(
                redrive, server, {"filter": "/dead_letter/detail = 'cannot parse'"}
            )
            assert r.status_code == 200, r.text
            (sent,) = r.json()["messages"]
            msg = await sub.get(10)
            assert msg.json() == {"n": 1}
            msg.ack()
            await sub.settled()
            return msg.message.header["x"], msg.bookmark, sent

    lineage, bookmark, sent = asyncio.run(get_again())
    assert lineage == original and sent == {
        "original": original, "topic": "work-in", "bookmark": bookmark
    }  # fmt: skip
    assert redrive(server, {}).json()["redriven"] == 0  # nothing left to send back
    assert api(server, "/api/queues/work/dead_letters")["letters"] == []
    (marked,) = api(server, "/api/queues/work/dead_letters?redriven=true")["letters"]
    assert marked["redriven"]["bookmark"] == bookmark
    server.stop()
    server.start()
    info = api(server, "/api/queues/work")
    assert info["depth"] == 0
    assert api(server, "/api/sow/work-dead")["keys"] == [original]
