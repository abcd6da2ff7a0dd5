"""A subscribing command with ``replace`` on a real broker, for each pair of kinds of
subscription (queue, SOW, plain; server/commandtable.py): a refused one leaves the old
subscription delivering as it was (a queue consumer's leases intact), an accepted one
ends it (a queue subscription's leases return)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from functools import wraps
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.support.engine import EngineHarness, FakeClient
from tests.support.server import sow_topic

Msg = tuple[dict[str, Any], bytes]

USERS = (
    "<User><Name>w</Name><Token>tok-writer-0123456789</Token><Read>.*</Read><Write>.*</Write>"
    "</User><User><Name>c</Name><Token>tok-reader-0123456789</Token>"
    "<Read>^(work|orders|news)$</Read></User>"
)
#: a topic of each kind the reader may read, and what a publish to it is
TOPIC = {"queue": "work", "sow": "orders", "plain": "news"}
PUBLISHED_TO = {"queue": "work-in", "sow": "orders", "plain": "news"}


def scenario(fn: Callable[..., Awaitable[None]]) -> Callable[..., None]:
    @wraps(fn)
    def wrapper(*args: Any, **kw: Any) -> None:
        asyncio.run(fn(*args, **kw))

    return wrapper


def harness(tmp_path: Path) -> EngineHarness:
    queue = (
        "<Queue><Name>work</Name><MessageType>json</MessageType>"
        "<UnderlyingTopic>work-in</UnderlyingTopic><LeasePeriod>1h</LeasePeriod>"
        "<MaxPerSubscriptionBacklog>5</MaxPerSubscriptionBacklog></Queue>"
    )
    return EngineHarness(
        tmp_path, sow=sow_topic("orders", "/id") + sow_topic("vault", "/id") + queue,
        journal_size="1MB", users=USERS,
        txlog_extra="<PreallocatedJournalFiles>1</PreallocatedJournalFiles>",
    )  # fmt: skip


async def logon(h: EngineHarness, name: str, user: str = "c") -> FakeClient:
    token = "tok-writer-0123456789" if user == "w" else "tok-reader-0123456789"
    return await h.logon(name, user_id=user, pw=token)


def old(kind: str) -> Msg:
    """The subscription ``s`` of ``kind`` that a replace then takes over."""
    header: dict[str, Any] = {"c": "subscribe", "t": TOPIC[kind], "sub_id": "s"}
    if kind == "queue":
        header["o"] = "max_backlog=5"
    return header, b""


def pub(kind: str, n: int) -> Msg:
    return {"c": "publish", "t": PUBLISHED_TO[kind]}, orjson.dumps({"id": n, "n": n})


def cmd(name: str, topic: str, cid: str, o: str = "replace", **header: Any) -> Msg:
    return {"c": name, "t": topic, "sub_id": "s", "o": o, "cid": cid, **header}, b""


def seen(c: FakeClient, kind: str) -> list[int]:
    """The ``n`` of each message of ``kind``'s topic delivered under ``s`` so far."""
    return [orjson.loads(b)["n"] for h, b in c.deliveries("s") if h["t"] == TOPIC[kind]]


def failures(c: FakeClient) -> dict[str, str]:
    return {a["cid"]: a["reason"] for a in c.acks() if a.get("status") == "failure"}


BAD_FILTER = "/n = = 1"
NOT_FOUND = "1234567|5|"  # a bookmark this instance's log does not hold

#: new kind -> refused replaces: (command, topic, options, extra header, reason)
REFUSED: dict[str, list[tuple[str, str, str, dict[str, str], str]]] = {
    "sow": [
        ("subscribe", "orders", "replace", {"f": BAD_FILTER}, "bad filter"),
        ("delta_subscribe", "orders", "replace", {"f": BAD_FILTER}, "bad filter"),
        ("sow_and_subscribe", "orders", "replace", {"f": BAD_FILTER}, "bad filter"),
        ("subscribe", "vault", "replace", {}, "not entitled"),
        ("sow_and_subscribe", "vault", "replace", {}, "not entitled"),
        ("subscribe", "orders", "replace,max_backlog=2", {}, "invalid options"),
        ("sow_and_subscribe", "orders", "replace,bookmark_not_found=fail", {"bm": NOT_FOUND},
         "bookmark not found"),
    ],
    "plain": [
        ("subscribe", "news", "replace", {"f": BAD_FILTER}, "bad filter"),
        ("subscribe", "secret", "replace", {}, "not entitled"),
        ("subscribe", "news", "replace,oof", {}, "invalid options"),
        ("subscribe", "news", "replace,bookmark_not_found=fail", {"bm": NOT_FOUND},
         "bookmark not found"),
    ],
    "queue": [
        ("subscribe", "work", "replace", {"f": BAD_FILTER}, "bad filter"),
        ("subscribe", "work", "replace,conflation=1s", {}, "invalid options"),
    ],
}  # fmt: skip

KINDS = ("queue", "sow", "plain")


@pytest.mark.parametrize(("was", "new"), [(a, b) for a in KINDS for b in KINDS])
@scenario
async def test_a_refused_replace_leaves_the_old_subscription_delivering(
    tmp_path: Path, was: str, new: str
) -> None:
    """Whatever check refuses the new subscription, the old one keeps its place: a queue
    consumer its leases (an ack of one still counts) and its share of new messages, a SOW
    or plain subscription its deliveries. A queue subscription replaces only another one,
    so a replace by one of a subscription of another kind is ``subid in use``."""
    async with harness(tmp_path) as h:
        b = h.broker
        w, c = await logon(h, "w", "w"), await logon(h, "c")
        c.send(old(was))
        await h.settle()
        w.send(pub(was, 1))
        await h.settle()
        assert seen(c, was) == [1]
        refused = REFUSED[new]
        c.send(*(cmd(name, topic, str(i), o, **extra)
                 for i, (name, topic, o, extra, _) in enumerate(refused)))  # fmt: skip
        await h.settle()
        expected = {str(i): reason for i, (*_, reason) in enumerate(refused)}
        if new == "queue" and was != "queue":
            expected["0"] = "subid in use"  # after the options, before the filter
        assert failures(c) == expected
        assert c.session.subs["s"].topic == TOPIC[was]
        w.send(pub(was, 2))
        await h.settle()
        assert seen(c, was) == [1, 2]
        if was == "queue":
            info = b.queues.info("work")
            assert (info.consumers, info.leased) == (1, 2)
            bms = [h["bm"] for h, _ in c.deliveries("s")]
            c.send(({"c": "sow_delete", "t": "work", "bm": ",".join(bms), "cid": "ack",
                     "a": "processed,stats"}, b""))  # fmt: skip
            await h.settle()
            assert [a["records_deleted"] for a in c.acks("stats")] == [2]
        else:
            assert b.queues.info("work").consumers == 0
        sow_subscribers = len(b.sow.delivery.router.match("orders"))
        assert sow_subscribers == (1 if was == "sow" else 0)


#: (old kind, new kind) -> an accepted replace of ``s`` by a subscription of the new kind
ACCEPTED: dict[tuple[str, str], Msg] = {
    ("queue", "sow"): cmd("delta_subscribe", "orders", "r"),
    ("queue", "plain"): cmd("subscribe", "news", "r"),
    ("sow", "plain"): cmd("subscribe", "news", "r"),
    ("plain", "sow"): cmd("sow_and_subscribe", "orders", "r"),
}


@pytest.mark.parametrize(("was", "new"), list(ACCEPTED))
@scenario
async def test_an_accepted_replace_ends_the_old_subscription(
    tmp_path: Path, was: str, new: str
) -> None:
    """The old kind delivers nothing more under the sub id, the new one does; a queue
    subscription's leases return (another consumer gets them again)."""
    async with harness(tmp_path) as h:
        b = h.broker
        w, c = await logon(h, "w", "w"), await logon(h, "c")
        c.send(old(was))
        await h.settle()
        w.send(pub(was, 1))
        await h.settle()
        assert seen(c, was) == [1]
        c.send(ACCEPTED[was, new])
        await h.settle()
        assert failures(c) == {}
        assert c.session.subs["s"].topic == TOPIC[new]
        w.send(pub(was, 2), pub(new, 3))
        await h.settle()
        assert seen(c, was) == [1]
        assert seen(c, new) == [3]
        assert b.queues.info("work").consumers == 0
        if was == "queue":
            other = await logon(h, "c2")
            other.send(({"c": "subscribe", "t": "work", "sub_id": "q", "o": "max_backlog=5"},
                        b""))  # fmt: skip
            await h.settle()
            got = [(orjson.loads(b)["n"], h["dc"]) for h, b in other.deliveries("q")]
            assert sorted(got) == [(1, 2), (2, 1)]
        assert len(b.sow.delivery.router.match("orders")) == (1 if new == "sow" else 0)


@scenario
async def test_a_bookmark_sow_and_subscribe_replacing_a_sow_subscription_ends_it(
    tmp_path: Path,
) -> None:
    """``sow_and_subscribe`` with ``bm`` makes a bookmark subscription: replacing a SOW
    subscription of the same topic, it leaves the SOW, so each later change comes once."""
    async with harness(tmp_path) as h:
        b = h.broker
        w, c = await logon(h, "w", "w"), await logon(h, "c")
        c.send(old("sow"))
        await h.settle()
        c.send(cmd("sow_and_subscribe", "orders", "r", bm="0"))
        await h.commit()
        assert failures(c) == {}
        assert b.sow.delivery.router.match("orders") == []
        w.send(pub("sow", 1))
        await h.commit()
        await h.until(lambda: seen(c, "sow"))
        await h.settle()
        assert seen(c, "sow") == [1]
