"""Queue scenarios on the in-process engine (virtual clock): deliveries, acks with
sow_delete, leases that run out, disconnects, backlog limits, barriers, recovery."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from functools import wraps
from pathlib import Path
from typing import Any

import orjson

from server.txlog.record import RecordKind
from tests.support.engine import EngineHarness, FakeClient

Msg = tuple[dict[str, Any], bytes]


def scenario(fn: Callable[[Path], Awaitable[None]]) -> Callable[[Path], None]:
    @wraps(fn)
    def wrapper(tmp_path: Path) -> None:
        asyncio.run(fn(tmp_path))

    return wrapper


def queue_xml(extra: str = "", *, name: str = "work", under: str = "work-in", tag: str = "Queue") -> str:
    return (
        f"<{tag}><Name>{name}</Name><MessageType>json</MessageType>"
        f"<UnderlyingTopic>{under}</UnderlyingTopic>{extra}</{tag}>"
    )


def harness(tmp_path: Path, queues: str, **kw: Any) -> EngineHarness:
    return EngineHarness(
        tmp_path, sow=queues, journal_size="1MB",
        txlog_extra="<PreallocatedJournalFiles>1</PreallocatedJournalFiles>", **kw,
    )  # fmt: skip


def pub(n: int, topic: str = "work-in", **doc: Any) -> Msg:
    return {"c": "publish", "t": topic}, orjson.dumps({"n": n, **doc})


def sub(sub_id: str = "s", topic: str = "work", options: str = "", **kw: Any) -> Msg:
    header: dict[str, Any] = {"c": "subscribe", "t": topic, "sub_id": sub_id, "cid": sub_id,
                              "a": "processed", **kw}  # fmt: skip
    if options:
        header["o"] = options
    return header, b""


def ack(*bms: str, options: str = "", cid: str = "a") -> Msg:
    header: dict[str, Any] = {"c": "sow_delete", "t": "work", "bm": ",".join(bms), "cid": cid,
                              "a": "processed,stats"}  # fmt: skip
    if options:
        header["o"] = options
    return header, b""


def got(c: FakeClient) -> list[tuple[int, str, int]]:
    """(n, bookmark, delivery number) of every queue delivery so far."""
    return [(orjson.loads(b)["n"], h["bm"], h["dc"]) for h, b in c.deliveries()]


@scenario
async def test_delivery_ack_and_lease_expiry_redelivers(tmp_path: Path) -> None:
    async with harness(tmp_path, queue_xml("<LeasePeriod>30s</LeasePeriod>"
                                           "<MaxPerSubscriptionBacklog>5</MaxPerSubscriptionBacklog>")) as h:
        p = await h.logon("pub")
        c = await h.logon("worker")
        c.send(sub(options="max_backlog=2"))
        await h.settle()
        assert c.acks("processed")[0]["max_backlog"] == 2
        p.send(pub(1), pub(2), pub(3))
        await h.settle()
        first = c.deliveries()
        assert [orjson.loads(b)["n"] for _, b in first] == [1, 2]  # backlog 2
        assert all(hd["t"] == "work" and hd["lp"] == 30_000 and hd["dc"] == 1 for hd, _ in first)
        c.send(ack(first[0][0]["bm"]))
        await h.settle()
        assert c.acks("stats")[-1]["records_deleted"] == 1
        assert [n for n, _, _ in got(c)] == [1, 2, 3]
        # message 2 and 3 are not acked: their leases end after 30 s of virtual time
        await h.clock.advance(29)
        assert len(c.deliveries()) == 3
        await h.clock.advance(1.5)
        await h.settle()
        redelivered = got(c)[3:]
        assert sorted((n, dc) for n, _, dc in redelivered) == [(2, 2), (3, 2)]
        info = h.broker.queues.info("work")
        assert (info.depth, info.leased, info.backlog) == (2, 2, 0)


@scenario
async def test_disconnect_returns_leases_to_another_consumer(tmp_path: Path) -> None:
    async with harness(tmp_path, queue_xml("<MaxPerSubscriptionBacklog>10</MaxPerSubscriptionBacklog>")) as h:
        p = await h.logon("pub")
        a = await h.logon("a")
        a.send(sub(options="max_backlog=10"))
        await h.settle()
        p.send(*(pub(i) for i in range(4)))
        await h.settle()
        assert len(a.deliveries()) == 4
        a.send(ack(a.deliveries()[0][0]["bm"]))
        await h.settle()
        b = await h.logon("b")
        b.send(sub(options="max_backlog=10"))
        await h.settle()
        assert b.deliveries() == []
        await a.session.close()  # the connection drops: its leases end at once
        await h.settle()
        assert sorted((n, dc) for n, _, dc in got(b)) == [(1, 2), (2, 2), (3, 2)]
