"""Event topics on a broker on a virtual clock: a subscriber sees the broker's own life
as JSON messages (clients, subscriptions, SOW samples), bookmark subscribers replay them
when they are recorded; clients and the broker's other publishes cannot write there; with
the section off, nothing is built and the names are ordinary topics."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest

from spool.server.engine_errors import PublishRefused
from tests.support.engine import EngineHarness, FakeClient
from tests.support.server import sow_topic

CLIENTS = "/spool/events/clients"
SUBS = "/spool/events/subscriptions"
SOW_STATS = "/spool/stats/sow"
ON = (
    f"<Topic><Name>{CLIENTS}</Name></Topic><Topic><Name>{SUBS}</Name></Topic>"
    f"<Topic><Name>{SOW_STATS}</Name><Interval>5s</Interval></Topic>"
)


def docs(c: FakeClient, sub_id: str) -> list[dict[str, Any]]:
    return [orjson.loads(body) for _, body in c.deliveries(sub_id)]


def test_a_subscriber_sees_other_clients_come_subscribe_and_go(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with EngineHarness(tmp_path, event_topics=ON, sow=sow_topic("orders", "/id")) as h:
            watcher = await h.logon("watcher")
            watcher.send(({"c": "subscribe", "t": CLIENTS, "sub_id": "c"}, b""),
                         ({"c": "subscribe", "t": SUBS, "sub_id": "s"}, b""))  # fmt: skip
            await h.settle()
            c = await h.logon("worker", version="py-2")
            c.send(({"c": "subscribe", "t": "orders", "sub_id": "o", "f": "/qty > 5"}, b""))
            await h.settle()
            await c.session.close("bye")
            await h.settle()
            clients = [d for d in docs(watcher, "c") if d["client"] in ("worker", None)
                       and d["connection"] == c.session.connection]  # fmt: skip
            assert [d["event"] for d in clients] == ["connected", "logged_on", "disconnected"]
            assert clients[1]["version"] == "py-2" and clients[2]["reason"] == "bye"
            assert all(d["instance"] == "spool-test" for d in clients)
            subs = [d for d in docs(watcher, "s") if d["client"] == "worker"]
            assert [(d["event"], d["sub_id"], d["kind"], d["filter"], d["reason"]) for d in subs] == [
                ("added", "o", "sow", "/qty > 5", None),
                ("removed", "o", "sow", "/qty > 5", "disconnect"),
            ]  # fmt: skip
            # the watcher's own subscriptions too: both went out at the turn after them
            own = [d["sub_id"] for d in docs(watcher, "s") if d["client"] == "watcher"]
            assert own == ["c", "s"]

    asyncio.run(scenario())


def test_the_sow_is_sampled_and_recorded_events_replay(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with EngineHarness(tmp_path, event_topics=ON, sow=sow_topic("orders", "/id")) as h:
            pub = await h.logon("pub")
            pub.send(*(({"c": "publish", "t": "orders"}, orjson.dumps({"id": i}))
                       for i in range(3)))  # fmt: skip
            await h.commit()
            reader = await h.logon("reader")
            reader.send(({"c": "subscribe", "t": SOW_STATS, "sub_id": "w"}, b""))
            await h.settle()
            await h.clock.advance(5)
            await h.settle()
            (sample,) = [d for d in docs(reader, "w") if d["topic"] == "orders"]
            assert (sample["event"], sample["records"]) == ("sample", 3)
            await h.commit()
            # recorded (the log records .*): a bookmark subscriber replays the connects
            late = await h.logon("late")
            late.send(({"c": "subscribe", "t": CLIENTS, "sub_id": "r", "bm": "0"}, b""))
            await h.settle()
            await h.commit()  # a bookmark subscription gets what is durable
            await h.until(lambda: len(docs(late, "r")) >= 6)
            names = [d["client"] for d in docs(late, "r") if d["event"] == "logged_on"]
            assert names[:2] == ["pub", "reader"]

    asyncio.run(scenario())


def test_only_the_broker_publishes_to_an_event_topic_that_is_on(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with EngineHarness(tmp_path, event_topics=ON, sow=sow_topic("o", "/id")) as h:
            c = await h.logon("forger")
            c.send(({"c": "publish", "t": CLIENTS, "cid": "p", "a": "processed"},
                    b'{"event":"logged_on","client":"admin"}'))  # fmt: skip
            await h.settle()
            (ack,) = [a for a in c.acks() if a.get("cid") == "p"]
            assert ack["status"] == "failure" and ack["reason"] == "invalid topic"
            assert "only the broker" in ack["detail"]
            with pytest.raises(PublishRefused):
                await h.broker.operations.publish(CLIENTS, b"{}")

    asyncio.run(scenario())


def test_with_the_section_off_nothing_is_built(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with EngineHarness(tmp_path) as h:
            b = h.broker
            assert b.event_topics is None and not b.happenings.clients
            c = await h.logon("c")
            assert c.session.subs.listener is None
            c.send(({"c": "publish", "t": CLIENTS, "cid": "p", "a": "processed"}, b"{}"))
            await h.settle()
            (ack,) = [a for a in c.acks() if a.get("cid") == "p"]
            assert ack["status"] == "success"

    asyncio.run(scenario())


def test_the_connections_a_shutdown_closes_are_in_the_log_after_it(tmp_path: Path) -> None:
    async def scenario() -> None:
        on = f"<Topic><Name>{CLIENTS}</Name></Topic>"
        async with EngineHarness(tmp_path, event_topics=on) as h:
            for name in ("a", "b"):
                await h.logon(name)
            await h.settle()
        async with EngineHarness(tmp_path, event_topics=on) as h:
            reader = await h.logon("reader")
            reader.send(({"c": "subscribe", "t": CLIENTS, "sub_id": "r", "bm": "0"}, b""))

            def gone() -> list[dict[str, Any]]:
                return [d for d in docs(reader, "r") if d["event"] == "disconnected"
                        and d["client"] in ("a", "b")]  # fmt: skip

            await h.until(lambda: len(gone()) == 2)
            assert {d["cause"] for d in gone()} == {"shutting_down"}

    asyncio.run(scenario())


USERS = (
    "<User><Name>ops</Name><Token>ops-token-0123456789ab</Token><Admin>true</Admin>"
    "<Read>.*</Read><Write>.*</Write></User>"
    "<User><Name>wide</Name><Token>wide-token-0123456789</Token><Read>.*</Read></User>"
    "<User><Name>app</Name><Token>app-token-01234567890</Token><Read>^orders$</Read>"
    "<Write>^orders$</Write></User>"
)


def test_read_entitlements_apply_and_wide_readers_are_named(tmp_path: Path) -> None:
    async def scenario() -> None:
        on = f"<Topic><Name>{CLIENTS}</Name></Topic>"
        async with EngineHarness(tmp_path, event_topics=on, users=USERS) as h:
            warned = [e for e in h.broker.events.recent()
                      if e["event"] == "event_topics_readable"]  # fmt: skip
            assert [(e["user"], e["topics"]) for e in warned] == [("wide", [CLIENTS])]
            app = await h.logon("app", user_id="app", pw="app-token-01234567890")
            app.send(({"c": "subscribe", "t": CLIENTS, "sub_id": "c", "cid": "c",
                       "a": "processed"}, b""),
                     ({"c": "subscribe", "t": ".*", "sub_id": "all"}, b""))  # fmt: skip
            await h.settle()
            (refused,) = [a for a in app.acks() if a.get("cid") == "c"]
            assert refused["status"] == "failure" and refused["reason"] == "not entitled"
            await h.logon("other", user_id="ops", pw="ops-token-0123456789ab")
            await h.settle()
            assert app.deliveries("all") == []  # a regex subscription skips what it may not read

    asyncio.run(scenario())
