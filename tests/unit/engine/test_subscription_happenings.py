"""The happenings of subscriptions on a broker on a virtual clock: a sink of
``subscriptions`` hears each subscription of every kind begin and end (unsubscribed,
replaced, with its connection) and each ``sow`` query accepted; a refused command is no
happening."""

from __future__ import annotations

import asyncio
from pathlib import Path

from spool.server.ports import ClientHappening, SubscriptionHappening
from tests.support.engine import EngineHarness, HappeningRecorder
from tests.support.server import sow_topic

QUEUE = (
    "<Queue><Name>work</Name><MessageType>json</MessageType>"
    "<UnderlyingTopic>work-in</UnderlyingTopic><LeasePeriod>1h</LeasePeriod></Queue>"
)


def told(sink: HappeningRecorder) -> list[tuple[str, ...]]:
    """(event, sub_id, kind, command, reason) of each subscription happening, in order."""
    return [
        (x.event, x.sub_id, x.kind, x.command, x.reason or "")
        for x in sink.got
        if isinstance(x, SubscriptionHappening)
    ]


def test_every_kind_begins_and_ends_through_the_sink(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with EngineHarness(tmp_path, sow=sow_topic("orders", "/id") + QUEUE) as h:
            sink = h.sink("subscriptions", "clients")
            c = await h.logon("c")
            c.send(
                ({"c": "subscribe", "t": "news", "sub_id": "live", "f": "/x = 1"}, b""),
                ({"c": "subscribe", "t": "news", "sub_id": "bm", "bm": "0"}, b""),
                ({"c": "subscribe", "t": "^n", "sub_id": "re"}, b""),
                ({"c": "subscribe", "t": "orders", "sub_id": "sow"}, b""),
                ({"c": "sow_and_subscribe", "t": "orders", "sub_id": "sas"}, b""),
                ({"c": "sow_and_subscribe", "t": "orders", "sub_id": "hist", "bm": "0"}, b""),
                ({"c": "subscribe", "t": "work", "sub_id": "q"}, b""),
                ({"c": "sow", "t": "orders", "cid": "query1"}, b""),
            )
            await h.settle()
            assert told(sink) == [
                ("added", "live", "live", "subscribe", ""),
                ("added", "bm", "bookmark", "subscribe", ""),
                ("added", "re", "live", "subscribe", ""),
                ("added", "sow", "sow", "subscribe", ""),
                ("added", "sas", "sow", "sow_and_subscribe", ""),
                ("added", "hist", "bookmark", "sow_and_subscribe", ""),
                ("added", "q", "queue", "subscribe", ""),
                ("queried", "query1", "query", "sow", ""),
            ]
            first = next(x for x in sink.got if isinstance(x, SubscriptionHappening))
            assert (first.client, first.topic, first.filter, first.connection) == (
                "c", "news", "/x = 1", c.session.connection,
            )  # fmt: skip
            assert [x.bookmark_kind for x in sink.got if isinstance(x, SubscriptionHappening)
                    and x.sub_id == "bm"] == ["epoch"]  # fmt: skip
            del sink.got[:]
            # a replace across kinds, an unsubscribe of two, a refused subscribe
            c.send(
                ({"c": "subscribe", "t": "orders", "sub_id": "live", "o": "replace"}, b""),
                ({"c": "unsubscribe", "sub_id": "re,q"}, b""),
                ({"c": "subscribe", "t": "news", "sub_id": "bm"}, b""),  # in use: refused
            )
            await h.settle()
            assert told(sink) == [
                ("removed", "live", "live", "subscribe", "replaced"),
                ("added", "live", "sow", "subscribe", ""),
                ("removed", "re", "live", "subscribe", "unsubscribe"),
                ("removed", "q", "queue", "subscribe", "unsubscribe"),
            ]
            del sink.got[:]
            # a disconnect ends what is left, before the connection's own end
            await c.session.close("bye")
            await h.settle()
            assert sorted(t[1] for t in told(sink)) == ["bm", "hist", "live", "sas", "sow"]
            assert {t[4] for t in told(sink)} == {"disconnect"}
            last = sink.got[-1]
            assert isinstance(last, ClientHappening) and last.event == "disconnected"

    asyncio.run(scenario())


def test_a_sink_of_clients_only_leaves_the_tables_unheard(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with EngineHarness(tmp_path) as h:
            sink = h.sink("clients")
            c = await h.logon("c")
            assert c.session.subs.listener is None
            c.send(({"c": "subscribe", "t": "news", "sub_id": "s"}, b""))
            await h.settle()
            assert told(sink) == []

    asyncio.run(scenario())
