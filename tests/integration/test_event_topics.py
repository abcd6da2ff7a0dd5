"""Event topics against a real ``spool serve``: a client subscribed to the clients and
subscriptions topics sees another client log on, subscribe and leave, over the wire; a
client cannot publish there; the configuration's refusals stop the start."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx
import orjson
import pytest

from spool.server.client import Client, Message
from spool.server.protocol import errors
from tests.support.server import SpoolProcess

ServerFactory = Callable[..., SpoolProcess]

CLIENTS = "/spool/events/clients"
SUBS = "/spool/events/subscriptions"
ON = f"<Topic><Name>{CLIENTS}</Name></Topic><Topic><Name>{SUBS}</Name></Topic>"


async def until(sub: Any, want: Callable[[list[dict[str, Any]]], bool]) -> list[dict[str, Any]]:
    """Messages of ``sub`` until ``want`` holds of them all."""
    got: list[dict[str, Any]] = []
    while not want(got):
        msg: Message = await sub.get(30)
        got.append(orjson.loads(msg.data))
    return got


def test_a_watcher_sees_another_client_over_the_wire(
    spool_server_factory: ServerFactory,
) -> None:
    server = spool_server_factory(event_topics=ON)

    async def scenario() -> None:
        async with Client(server.ws_url, "watcher") as watcher:
            clients = await watcher.subscribe(CLIENTS, filter="/client = 'worker'")
            subs = await watcher.subscribe(SUBS, filter="/client = 'worker'")
            async with Client(server.ws_url, "worker") as worker:
                await worker.subscribe("orders", sub_id="o", filter="/qty > 5")
                with pytest.raises(errors.InvalidTopic):
                    await worker.publish_acked(CLIENTS, {"event": "logged_on"})
            seen = await until(clients, lambda g: any(d["event"] == "disconnected" for d in g))
            assert [d["event"] for d in seen] == ["logged_on", "disconnected"]
            assert seen[0]["connection"] == seen[1]["connection"]
            assert seen[1]["cause"] == "client" and seen[1]["subscriptions"] == 1
            changes = await until(subs, lambda g: len(g) == 2)
            assert [(d["event"], d["sub_id"], d["filter"], d["reason"]) for d in changes] == [
                ("added", "o", "/qty > 5", None), ("removed", "o", "/qty > 5", "disconnect"),
            ]  # fmt: skip

    asyncio.run(scenario())
    listed = httpx.get(f"{server.http_url}/api/event_topics", timeout=10).json()
    rows = {row["topic"]: row for row in listed["event_topics"]}
    assert sorted(rows) == [CLIENTS, SUBS] and rows[CLIENTS]["recorded"] is True
    assert rows[CLIENTS]["published"] >= 4 and rows[CLIENTS]["dropped"] == 0
    topics = httpx.get(f"{server.http_url}/api/topics", timeout=10).json()["topics"]
    assert {t["topic"]: t["kind"] for t in topics}[SUBS] == "event"
    metrics = httpx.get(f"{server.http_url}/metrics", timeout=10).text
    assert f'spool_event_topic_messages_total{{topic="{CLIENTS}"}}' in metrics


def test_links_without_replication_stop_the_start(spool_server_factory: ServerFactory) -> None:
    server = spool_server_factory(
        event_topics="<Topic><Name>/spool/events/links</Name></Topic>", start=False
    )
    with pytest.raises(RuntimeError) as info:
        server.start()
    assert "/spool/events/links needs <Replication>" in str(info.value)
