"""``TargetQueueDepth`` on the in-process engine (virtual clock, real log files): the
active window, refills from the log as active messages leave, removal by filter of
inactive messages, priority among active messages only, the log pin, and recovery."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from tests.support.engine import EngineHarness, FakeClient
from tests.unit.queues.test_engine_queues import ack, got, harness, pub, queue_xml, scenario, sub


def bounded(target: int, extra: str = "") -> str:
    return queue_xml(
        f"<TargetQueueDepth>{target}</TargetQueueDepth>"
        f"<MaxPerSubscriptionBacklog>100</MaxPerSubscriptionBacklog>{extra}",
        tag="LocalQueue",
    )


def info(h: EngineHarness) -> dict[str, Any]:
    return h.broker.queues.info("work").to_dict()


def held(c: FakeClient, acked: set[str]) -> list[str]:
    return [bm for _, bm, _ in got(c) if bm not in acked]


async def drain(h: EngineHarness, c: FakeClient, total: int, *, most: int) -> list[int]:
    """Ack what ``c`` holds until ``total`` were delivered; the depth never passes
    ``most`` on the way. Returns the delivered ``n`` in delivery order."""
    acked: set[str] = set()
    while len(got(c)) < total or held(c, acked):
        bms = held(c, acked)
        if not bms:
            await h.until(lambda: held(c, acked))
            continue
        assert info(h)["depth"] <= most
        c.send(ack(*bms))
        acked.update(bms)
        await h.settle()
    return [n for n, _, _ in got(c)]


@scenario
async def test_only_the_target_is_active_and_the_rest_follows_as_acks_make_room(
    tmp_path: Path,
) -> None:
    async with harness(tmp_path, bounded(3)) as h:
        p = await h.logon("pub")
        c = await h.logon("c")
        c.send(sub(options="max_backlog=100"))
        p.send(*(pub(i) for i in range(10)))
        await h.settle()
        i = info(h)
        assert (i["depth"], i["inactive"], i["target_queue_depth"]) == (3, 7, 3)
        assert [n for n, _, _ in got(c)] == [0, 1, 2]  # the others are not delivered
        assert await drain(h, c, 10, most=3) == list(range(10))  # log order
        i = info(h)
        assert (i["depth"], i["inactive"], i["deferred_acks"]) == (0, 0, 0)
        assert i["removed"] == {"acked": 10}
        # past the log's end new messages enter directly again
        p.send(pub(10))
        await h.settle()
        assert [n for n, _, _ in got(c)][-1] == 10 and info(h)["inactive"] == 0


@scenario
async def test_the_pin_holds_the_log_from_the_first_inactive_message(tmp_path: Path) -> None:
    async with harness(tmp_path, bounded(2)) as h:
        p = await h.logon("pub")
        p.send(*(pub(i) for i in range(6)))
        await h.settle()
        txlog = h.broker.txlog
        assert txlog is not None
        pin = {i.owner: i.seq for i in txlog.pins()}["queue:work"]
        first = 1 + min(r.seq for r in await txlog.read_appended(1) if r.topic == "work-in")
        # messages 0 and 1 active: the pin is at message 0 (the oldest active)
        assert pin == first - 1
        c = await h.logon("c")
        c.send(sub(options="max_backlog=100"))
        await h.settle()
        c.send(ack(*(bm for _, bm, _ in got(c))))
        await h.settle()
        await h.until(lambda: len(got(c)) == 4)
        # 0 and 1 acked, 2 and 3 active (leased): the pin follows the oldest active
        assert {i.owner: i.seq for i in txlog.pins()}["queue:work"] == first + 1


@scenario
async def test_priority_orders_the_active_messages_only(tmp_path: Path) -> None:
    async with harness(tmp_path, bounded(2, "<Priority>/p</Priority>")) as h:
        p = await h.logon("pub")
        p.send(pub(0, p=1), pub(1, p=2), pub(2, p=9), pub(3, p=5))
        await h.settle()
        c = await h.logon("c")
        c.send(sub(options="max_backlog=1"))
        await h.settle()
        # 2 (p=9) is inactive: among the active 0 and 1, 1 goes first
        assert [n for n, _, _ in got(c)] == [1]
        acked: set[str] = set()
        for _ in range(3):
            bms = held(c, acked)
            c.send(ack(*bms))
            acked.update(bms)
            await h.settle()
            await h.until(lambda: held(c, acked))
        assert [n for n, _, _ in got(c)] == [1, 2, 3, 0]


@scenario
async def test_a_removal_by_filter_reaches_inactive_messages_and_survives_a_restart(
    tmp_path: Path,
) -> None:
    q = bounded(2)
    async with harness(tmp_path, q) as h:
        p = await h.logon("pub")
        p.send(*(pub(i) for i in range(10)))
        await h.settle()
        w = await h.logon("w")
        w.send(({"c": "sow_delete", "t": "work", "f": "/n >= 1 AND /n < 7", "cid": "f",
                 "a": "processed,stats"}, b""))  # fmt: skip
        await h.until(lambda: w.acks("stats"))
        stats = w.acks("stats")[0]
        assert (stats["matches"], stats["records_deleted"]) == (6, 6)
        # 1 was active (removed), 2..6 inactive (their acks deferred): the refill that
        # follows skips them and takes 7
        await h.until(lambda: info(h)["depth"] == 2)
        i = info(h)
        assert (i["inactive"], i["deferred_acks"]) == (2, 0)
        assert i["removed"] == {"acked": 6}  # the inactive ones counted with the active one
        await h.commit()
    async with harness(tmp_path, q) as h:
        c = await h.logon("c")
        c.send(sub(options="max_backlog=100"))
        await h.settle()
        assert await drain(h, c, 4, most=2) == [0, 7, 8, 9]


@scenario
async def test_recovery_rebuilds_the_window_and_loses_no_ack(tmp_path: Path) -> None:
    q = bounded(3)
    async with harness(tmp_path, q) as h:
        p = await h.logon("pub")
        c = await h.logon("c")
        c.send(sub(options="max_backlog=100"))
        p.send(*(pub(i) for i in range(12)))
        await h.settle()
        acked: set[str] = set()
        # ack 5 messages, one refill at a time: 0..4 acked, 5..7 active, 8..11 inactive
        while len(acked) < 5:
            bm = held(c, acked)[0]
            c.send(ack(bm))
            acked.add(bm)
            await h.settle()
            await h.until(lambda: len(held(c, acked)) == 3)
        assert (info(h)["depth"], info(h)["inactive"]) == (3, 4)
        await h.commit()
    async with harness(tmp_path, q) as h:
        # the log replayed with the same target: 5, 6, 7 active again (the acks of 3 and 4,
        # past the replay's cursor, were deferred and skipped by the first refill)
        await h.until(lambda: info(h)["depth"] == 3)
        i = info(h)
        assert (i["inactive"], i["deferred_acks"]) == (4, 0)
        c = await h.logon("c")
        c.send(sub(options="max_backlog=100"))
        await h.settle()
        delivered = await drain(h, c, 7, most=3)
        assert delivered == [5, 6, 7, 8, 9, 10, 11]  # acked ones not delivered again


@scenario
async def test_expired_and_cancelled_messages_make_room_too(tmp_path: Path) -> None:
    q = bounded(2, "<Expiration>10s</Expiration><MaxCancels>1</MaxCancels>")
    async with harness(tmp_path, q) as h:
        p = await h.logon("pub")
        p.send(*(pub(i) for i in range(4)))
        await h.settle()
        await h.clock.advance(5)
        p.send(pub(4))
        await h.settle()
        await h.clock.advance(6)  # 0..3 expired (2 and 3 as they are activated), 4 not
        await h.settle()
        await h.until(lambda: info(h)["removed"].get("expired") == 4)
        assert (info(h)["depth"], info(h)["inactive"]) == (1, 0)
        c = await h.logon("c")
        c.send(sub(options="max_backlog=10"))
        await h.settle()
        assert [orjson.loads(b)["n"] for _, b in c.deliveries()] == [4]


def _events(h: EngineHarness, name: str) -> list[dict[str, Any]]:
    return [e for e in h.broker.events.recent(500) if e.get("event") == name]


@scenario
async def test_a_failed_refill_is_tried_again_on_a_timer_with_back_off(tmp_path: Path) -> None:
    """The log refuses a refill (a journal byte damaged under the running broker): the
    messages stay inactive, the failure is reported, and the refill is tried again 0.5 s
    later, then 1 s after that (nothing else happens meanwhile: no ack, no publish);
    once the journal reads again the queue goes on by itself."""
    q = bounded(2)
    async with harness(tmp_path, q) as h:
        p = await h.logon("pub")
        p.send(*(pub(i) for i in range(6)))
        await h.settle()
        await h.commit()
    async with harness(tmp_path, q) as h:  # a fresh start: the refill reads the files
        c = await h.logon("c")
        c.send(sub(options="max_backlog=100"))
        await h.settle()
        assert [n for n, _, _ in got(c)] == [0, 1]
        journal = next(f for f in (tmp_path / "data").rglob("*.journal") if b'{"n":3}' in
                       f.read_bytes())  # fmt: skip
        at = journal.read_bytes().index(b'{"n":3}') + 5
        original = journal.read_bytes()[at : at + 1]
        with journal.open("r+b") as f:  # the digit of message 3: its CRC no longer holds
            f.seek(at)
            f.write(b"9")
        c.send(ack(*(bm for _, bm, _ in got(c))))
        await h.until(lambda: _events(h, "queue_refill_failed"))
        failed = _events(h, "queue_refill_failed")
        assert [(e["failures"], e["retry_in_s"]) for e in failed] == [(1, 0.5)]
        assert info(h)["inactive"] == 4
        other = await h.logon("other")
        other.send(sub(options="max_backlog=1"))  # a new consumer wants a refill too: it
        await h.settle()  # waits for the timer as well
        assert len(_events(h, "queue_refill_failed")) == 1
        other.send(({"c": "unsubscribe", "sub_id": "s"}, b""))
        await h.settle()
        await h.clock.advance(0.5)
        await h.until(lambda: len(_events(h, "queue_refill_failed")) == 2)
        assert _events(h, "queue_refill_failed")[-1]["retry_in_s"] == 1.0
        await h.clock.advance(0.9)
        await h.settle()
        assert len(_events(h, "queue_refill_failed")) == 2  # not before its time
        with journal.open("r+b") as f:
            f.seek(at)
            f.write(original)
        await h.clock.advance(0.1)
        await h.until(lambda: len(got(c)) == 4)
        assert [e["failures"] for e in _events(h, "queue_refill_recovered")] == [2]
        assert await drain(h, c, 6, most=2) == [0, 1, 2, 3, 4, 5]
