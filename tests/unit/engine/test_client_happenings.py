"""The happenings of client connections on a broker on a virtual clock: what a sink of
``clients`` is told of a connection's life, in order, with one connection number, and
nothing without such a sink."""

from __future__ import annotations

import asyncio
from pathlib import Path

from spool.server.clock import time_us
from spool.server.ports import ClientHappening
from tests.support.engine import EngineHarness

TOKEN = "alice-token-0123456789"
USERS = f"<User><Name>alice</Name><Token>{TOKEN}</Token><Read>.*</Read><Write>.*</Write></User>"


def test_a_connection_is_told_connected_logged_on_and_disconnected(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with EngineHarness(tmp_path) as h:
            sink = h.sink("clients")
            other = await h.logon("other")
            start = time_us(h.clock)
            c = await h.logon("c", version="py-1.0", o="failover")
            c.send(({"c": "subscribe", "t": "news", "sub_id": "s"}, b""))
            c.send(({"c": "publish", "t": "news"}, b"{}"))
            await h.settle()
            await h.clock.advance(2.5)
            await c.session.close("bye", cause="client")
            await h.settle()
            mine = [x for x in sink.got if isinstance(x, ClientHappening) and x.connection
                    == c.session.connection]  # fmt: skip
            assert [x.event for x in mine] == ["connected", "logged_on", "disconnected"]
            connected, logged_on, gone = mine
            assert connected.client is None and connected.transport == "websocket-json"
            assert connected.remote == c.session.remote and connected.time_us == start
            assert (logged_on.client, logged_on.version, logged_on.options) == (
                "c", "py-1.0", "failover",
            )  # fmt: skip
            assert (gone.client, gone.reason, gone.cause, gone.subscriptions) == (
                "c", "bye", "client", 1,
            )  # fmt: skip
            assert (gone.msgs_in, gone.time_us) == (1, start + 2_500_000)
            # another connection has its own number
            assert other.session.connection != c.session.connection
            assert {x.connection for x in sink.got} == {1, 2}

    asyncio.run(scenario())


def test_a_refused_logon_is_told_with_the_name_asked_and_no_secret(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with EngineHarness(tmp_path, users=USERS) as h:
            sink = h.sink("clients")
            c = h.connect()
            c.send(({"c": "logon", "cid": "l", "client_name": "x", "user_id": "alice",
                     "pw": "not-the-token"}, b""))  # fmt: skip
            await h.until(lambda: c.acks())
            await h.settle()
            told = [x for x in sink.got if isinstance(x, ClientHappening)]
            # a failed logon closes the connection
            assert [x.event for x in told] == ["connected", "logon_failed", "disconnected"]
            failed = told[1]
            assert (failed.event, failed.client, failed.user) == ("logon_failed", "x", "alice")
            assert failed.reason == "auth failure"
            assert "not-the-token" not in repr(sink.got)

    asyncio.run(scenario())


def test_without_a_sink_nothing_is_built(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with EngineHarness(tmp_path) as h:
            assert h.broker.happenings.clients is False
            c = await h.logon("c")
            await c.session.close("bye")
            assert c.session.connection == 1

    asyncio.run(scenario())
