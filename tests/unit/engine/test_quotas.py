"""What one connection and one user may hold at once, and connections that never log on."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson

from tests.support.engine import EngineHarness, FakeClient
from tests.support.server import sow_topic

TOKENS = {"alice": "alice-token-0123456789", "bob": "bob-token-0123456789ab"}
USERS = "".join(
    f"<User><Name>{name}</Name><Token>{token}</Token><Read>.*</Read><Write>.*</Write></User>"
    for name, token in TOKENS.items()
)


def sub(sub_id: str, topic: str = "t", **header: Any) -> tuple[dict[str, Any], bytes]:
    return {"c": "subscribe", "t": topic, "sub_id": sub_id, "cid": sub_id, "a": "processed",
            **header}, b""  # fmt: skip


def outcome(c: FakeClient, cid: str) -> tuple[str, str | None, str]:
    for a in c.acks("processed"):
        if a.get("cid") == cid:
            return a["status"], a.get("reason"), a.get("detail", "")
    raise AssertionError(f"no ack for {cid}")


def test_subscriptions_per_connection(tmp_path: Path) -> None:
    async def scenario() -> None:
        tuning = "<MaxSubscriptionsPerConnection>3</MaxSubscriptionsPerConnection>"
        async with EngineHarness(tmp_path, tuning=tuning) as h:
            c = await h.logon("c")
            c.send(sub("a"), sub("b"), sub("c"), sub("d"), sub("a", o="replace"))
            await h.until(lambda: len(c.acks("processed")) == 5)
            assert outcome(c, "d")[:2] == ("failure", "limit exceeded")
            detail = outcome(c, "d")[2]
            assert "MaxSubscriptionsPerConnection" in detail and "3" in detail
            # a replace does not count twice; an unsubscribe frees a place
            assert [a["status"] for a in c.acks("processed")].count("success") == 4
            c.send(({"c": "unsubscribe", "sub_id": "b"}, b""), sub("e"))
            await h.until(lambda: len(c.acks("processed")) == 6)
            assert outcome(c, "e")[0] == "success"
            assert sorted(c.session.subs) == ["a", "c", "e"]
            # another connection has its own quota
            other = await h.logon("other")
            other.send(sub("a"))
            await h.until(lambda: other.acks("processed"))
            assert outcome(other, "a")[0] == "success"

    asyncio.run(scenario())


def test_subscriptions_per_user_count_every_connection_of_the_user(tmp_path: Path) -> None:
    async def scenario() -> None:
        tuning = "<MaxSubscriptionsPerUser>3</MaxSubscriptionsPerUser>"
        async with EngineHarness(tmp_path, tuning=tuning, users=USERS) as h:
            one = await h.logon("one", user_id="alice", pw=TOKENS["alice"])
            two = await h.logon("two", user_id="alice", pw=TOKENS["alice"])
            bob = await h.logon("bob", user_id="bob", pw=TOKENS["bob"])
            # the user's connections are served side by side: which of two commands sent
            # at once comes first is not defined, so "one" holds its two before "two" asks
            one.send(sub("a"), sub("b"))
            await h.until(lambda: len(one.acks("processed")) == 2)
            two.send(sub("c"), sub("d"))
            bob.send(sub("a"))
            await h.until(lambda: len(two.acks("processed")) == 2 and bob.acks("processed"))
            assert outcome(two, "c")[0] == "success"
            status, reason, detail = outcome(two, "d")
            assert (status, reason) == ("failure", "limit exceeded")
            assert "user 'alice'" in detail and "MaxSubscriptionsPerUser" in detail
            assert outcome(bob, "a")[0] == "success"
            await one.session.close("bye")
            two.send(sub("d"))
            await h.until(lambda: len(two.acks("processed")) == 3)
            assert two.acks("processed")[-1]["status"] == "success"

    asyncio.run(scenario())


def test_replays_per_connection_count_those_still_reading_history(tmp_path: Path) -> None:
    async def scenario() -> None:
        tuning = (
            "<MaxReplaysPerConnection>2</MaxReplaysPerConnection>"
            "<SlowClientBufferLimit>256KB</SlowClientBufferLimit>"
        )
        async with EngineHarness(
            tmp_path, tuning=tuning, transport_extra="<MaxMessageSize>64KB</MaxMessageSize>"
        ) as h:
            pub = await h.logon("pub")
            body = orjson.dumps({"pad": "x" * 10_000})
            for _ in range(200):  # 2 MB: more than the reader's buffer takes
                pub.send(({"c": "publish", "t": "t"}, body))
            await h.commit()
            c = await h.logon("c")
            c.transport.stop_reading()
            c.send(sub("r1", bm="0"), sub("r2", bm="0"), sub("r3", bm="0"), sub("live"))
            await h.settle()
            c.transport.resume_reading()
            await h.until(lambda: len(c.acks("processed")) == 4)
            assert outcome(c, "r3")[:2] == ("failure", "limit exceeded")
            assert "MaxReplaysPerConnection" in outcome(c, "r3")[2]
            assert outcome(c, "live")[0] == "success"  # not a replay
            # once they caught up they are live subscriptions: replays may start again
            await h.until(
                lambda: all(c.session.subs[s].progress.state == "live" for s in ("r1", "r2"))
            )
            c.send(sub("r3", bm="0"))
            await h.until(lambda: len(c.acks("processed")) == 5)
            assert c.acks("processed")[-1]["status"] == "success"

    asyncio.run(scenario())


def test_pending_queries_per_connection(tmp_path: Path) -> None:
    async def scenario() -> None:
        tuning = (
            "<MaxPendingQueriesPerConnection>2</MaxPendingQueriesPerConnection>"
            "<SlowClientBufferLimit>256KB</SlowClientBufferLimit>"
        )
        async with EngineHarness(
            tmp_path,
            tuning=tuning,
            transport_extra="<MaxMessageSize>64KB</MaxMessageSize>",
            sow=sow_topic("s", "/id", durability="transient"),
        ) as h:
            pub = await h.logon("pub")
            for i in range(200):
                pub.send(({"c": "publish", "t": "s"}, orjson.dumps({"id": i, "p": "x" * 10_000})))
            await h.commit()
            c = await h.logon("c")
            c.transport.stop_reading()

            def query(cid: str) -> tuple[dict[str, Any], bytes]:
                return {"c": "sow", "t": "s", "cid": cid, "a": "processed"}, b""

            c.send(query("q1"), query("q2"), query("q3"))
            await h.settle()
            c.transport.resume_reading()
            await h.until(lambda: len(c.acks("processed")) == 3)
            assert outcome(c, "q3")[:2] == ("failure", "limit exceeded")
            assert "MaxPendingQueriesPerConnection" in outcome(c, "q3")[2]
            assert outcome(c, "q1")[0] == outcome(c, "q2")[0] == "success"

    asyncio.run(scenario())


def test_a_connection_that_does_not_log_on_is_closed_at_its_deadline(tmp_path: Path) -> None:
    async def scenario() -> None:
        tuning = "<LogonTimeout>5s</LogonTimeout>"
        async with EngineHarness(tmp_path, tuning=tuning) as h:
            idle = h.connect()
            ok = await h.logon("ok")
            await h.clock.advance(4.9)
            assert not idle.closed
            await h.clock.advance(0.2)
            await h.until(lambda: idle.closed)
            assert idle.session.close_cause == "logon_timeout"
            assert (idle.session.close_reason or "").startswith("logon required")
            assert not ok.closed
            assert h.broker.clients.waiting_logon == 0
            events = [e["event"] for e in h.broker.events.recent(100)]
            assert "logon_timeout" in events

    asyncio.run(scenario())


def test_connections_before_logon_are_capped_per_address_and_in_all(tmp_path: Path) -> None:
    async def scenario() -> None:
        tuning = (
            "<MaxConnectionsBeforeLogon>3</MaxConnectionsBeforeLogon>"
            "<MaxConnectionsBeforeLogonPerAddress>2</MaxConnectionsBeforeLogonPerAddress>"
        )
        async with EngineHarness(tmp_path, tuning=tuning) as h:
            clients = h.broker.clients
            first = h.connect()
            h.connect()
            # the harness's connections all come from 127.0.0.1
            reason = clients.before_logon_refusal("127.0.0.1")
            assert reason is not None and "MaxConnectionsBeforeLogonPerAddress" in reason
            assert clients.before_logon_refusal("10.0.0.7") is None
            # one logs on: its place is free again
            first.send(({"c": "logon", "cid": "l", "client_name": "first"}, b""))
            await h.until(lambda: first.session.origin is not None)
            assert clients.before_logon_refusal("127.0.0.1") is None
            h.connect()
            h.connect()  # over the per-address cap: the transport would have refused it
            reason = clients.before_logon_refusal("10.0.0.7")
            assert reason is not None and "Tuning/MaxConnectionsBeforeLogon allows" in reason
            assert clients.refused_before_logon == 2

    asyncio.run(scenario())
