"""Select lists against a real ``spool serve``, with the Python client over real
websockets: live, bookmark replay, SOW query and delta subscriptions deliver only the
selected fields, and a malformed select list is refused."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from spool.server.client import Client, Message, Subscription
from spool.server.protocol.errors import InvalidOptions
from tests.support.server import SpoolProcess, sow_topic

ServerFactory = Callable[..., SpoolProcess]

SECRET = "x" * 900  # most of a 1 KB message, never delivered
ORDERS = [{"id": i, "px": 10.0 + i, "qty": i, "secret": SECRET} for i in range(5)]


async def take(sub: Subscription, n: int, timeout: float = 20.0) -> list[Any]:
    got: list[Message] = [await sub.get(timeout) for _ in range(n)]
    return [orjson.loads(m.data) for m in got]


def test_every_kind_of_delivery_selects(spool_server_factory: ServerFactory) -> None:
    server = spool_server_factory(name="select", sow=sow_topic("orders", "/id"))

    async def body() -> None:
        async with Client(server.ws_url, "pub") as pub, Client(server.ws_url, "sub") as c:
            live = await c.subscribe("md", options="select=[-/,+/id,+/px]")
            dropped = await c.subscribe("md", options="select=[-/secret]", filter="/qty >= 3")
            for o in ORDERS:
                pub.publish("md", o)
                pub.publish("orders", o)
            await pub.flush()
            assert await take(live, 5) == [{"id": i, "px": 10.0 + i} for i in range(5)]
            assert await take(dropped, 2) == [{"id": i, "px": 10.0 + i, "qty": i} for i in (3, 4)]

            replay = await c.subscribe("md", bookmark="0", options="select=[-/,+/qty]")
            assert await take(replay, 5) == [{"qty": i} for i in range(5)]

            result = await c.sow("orders", filter="/px > 11", options="select=[-/,+/id]")
            assert sorted(orjson.loads(m.data)["id"] for m in result.records) == [2, 3, 4]
            assert all(orjson.loads(m.data).keys() == {"id"} for m in result.records)

            deltas = await c.delta_subscribe("orders", options="select=[-/,+/px]")
            pub.publish("orders", {**ORDERS[0], "px": 99.0})
            pub.publish("orders", {**ORDERS[0], "px": 99.0, "qty": 7})  # nothing selected changed
            pub.publish("orders", {**ORDERS[0], "px": 98.0, "qty": 7})
            await pub.flush()
            # a record it did not hold comes whole (as selected), then the next change
            # of /px: the change of /qty alone between them was not sent
            assert await take(deltas, 2) == [{"px": 99.0}, {"px": 98.0}]

            with pytest.raises(InvalidOptions, match="listed twice"):
                await c.subscribe("md", options="select=[-/,+/id,+/id]")
            with pytest.raises(InvalidOptions, match="bracketed"):
                await c.sow("orders", options="select=+/id")

    asyncio.run(body())
