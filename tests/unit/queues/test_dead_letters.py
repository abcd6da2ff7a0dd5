"""Dead letters on the in-process engine (virtual clock): a message a queue gives up on
(rejected, past MaxCancels or MaxDeliveries, expired) is published to its dead-letter
topic and leaves the queue; the two stay one change across a restart and a crash
between them; nobody but the broker publishes there."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, TypeVar

import orjson
import pytest

from spool.server.bookmarks import format_bookmark
from spool.server.clock import VirtualClock
from spool.server.config.model import DeadLetterConfig, QueueConfig
from spool.server.ports import AppendedRun, Origin
from spool.server.queues import deadletter
from spool.server.queues.checkpoint import checkpoint_name
from spool.server.queues.deadletter import DeadLetter
from spool.server.queues.errors import QueueNotFound
from spool.server.queues.redrive import RedriveRefused
from spool.server.queues.stage import QueueRuntime, QueueStage
from spool.server.txlog.format.record import RecordKind
from tests.support.damage import journals, zero_end_of_last_record
from tests.support.engine import EngineHarness, FakeClient
from tests.support.fabric import A, B, drive, fabric_of, xml
from tests.support.fabric import scenario as fabric_scenario
from tests.support.replication import destination
from tests.support.server import sow_topic
from tests.unit.queues.test_engine_queues import ack, got, harness, pub, queue_xml, scenario, sub

T = TypeVar("T")

DEAD = (
    "<LeasePeriod>10s</LeasePeriod><MaxPerSubscriptionBacklog>5</MaxPerSubscriptionBacklog>"
    "<MaxCancels>1</MaxCancels><MaxDeliveries>2</MaxDeliveries>"
    "<DeadLetter><Topic>work-dead</Topic></DeadLetter>"
)
#: the dead-letter topic as a SOW topic keyed by the message's bookmark
SOW = sow_topic("work-dead", "/dead_letter/bookmark")


def letters(c: FakeClient, sub_id: str = "d") -> list[dict[str, Any]]:
    """The dead letters a subscriber to the dead-letter topic received, decoded."""
    return [orjson.loads(body) for _, body in c.deliveries(sub_id)]


async def _reject_cancel_ack_and_time_out(
    h: EngineHarness,
) -> tuple[FakeClient, FakeClient, dict[int, str]]:
    """Four messages to one consumer: 0 rejected with a reason, 1 cancelled (MaxCancels
    1), 2 acked, 3 delivered twice without an ack (MaxDeliveries 2). Returns the
    subscriber to the dead-letter topic, the consumer and each message's bookmark."""
    d = await h.logon("dead-reader")
    d.send(({"c": "subscribe", "t": "work-dead", "sub_id": "d"}, b""))
    p = await h.logon("pub")
    c = await h.logon("c")
    c.send(sub(options="max_backlog=5"))
    await h.settle()
    p.send(*(pub(n) for n in range(4)))
    await h.settle()
    bms = {n: bm for n, bm, _ in got(c)}
    assert sorted(bms) == [0, 1, 2, 3]
    c.send(
        ({"c": "sow_delete", "t": "work", "bm": bms[0], "o": "reject", "reason": "bad input",
          "cid": "r", "a": "processed,stats"}, b""),
    )  # fmt: skip
    c.send(ack(bms[1], options="cancel", cid="x"), ack(bms[2], cid="a"))
    await h.settle()
    await h.clock.advance(10.5)  # 3's lease ends: delivered again
    await h.settle()
    assert [(n, dc) for n, _, dc in got(c)][-1] == (3, 2)
    await h.clock.advance(10.5)  # and again: past MaxDeliveries
    await h.settle()
    return d, c, bms


@scenario
async def test_messages_given_up_on_become_dead_letters(tmp_path: Path) -> None:
    async with harness(tmp_path, queue_xml(DEAD) + SOW) as h:
        d, _, bms = await _reject_cancel_ack_and_time_out(h)
        info = h.broker.queues.info("work")
        assert info.depth == 0
        assert info.removed == {"rejected": 1, "max_cancels": 1, "acked": 1, "max_deliveries": 1}
        assert (info.dead_letter_topic, info.dead_lettered) == ("work-dead", 3)
        found = letters(d)
        heads = [f["dead_letter"] for f in found]
        assert [f["message"] for f in found] == [{"n": 0}, {"n": 1}, {"n": 3}]
        assert [x["reason"] for x in heads] == ["rejected", "max_cancels", "max_deliveries"]
        assert [x["bookmark"] for x in heads] == [bms[0], bms[1], bms[3]]
        assert [x["deliveries"] for x in heads] == [1, 1, 2]
        assert [x["cancels"] for x in heads] == [0, 1, 0]
        assert [x["detail"] for x in heads] == ["bad input", "", ""]
        assert {(x["queue"], x["topic"], x["instance"]) for x in heads} == {
            ("work", "work-in", h.config.name)
        }
        assert all(x["consumer"].startswith("c/") for x in heads)
        # the SOW topic keeps them by the original bookmark
        q = await h.logon("q")
        q.send(({"c": "sow", "t": "work-dead", "cid": "s", "a": "completed"}, b""))
        await h.settle()
        keys = sorted(orjson.loads(b)["dead_letter"]["bookmark"] for hd, b in q.received()
                      if hd.get("c") == "sow")  # fmt: skip
        assert keys == sorted([bms[0], bms[1], bms[3]])
        # each dead letter is in the log before the ack that takes its message out
        await h.commit()
        records = await h.broker.txlog.read_view(1)  # type: ignore[union-attr]
        order = [(r.kind, r.topic) for r in records if r.topic in ("work", "work-dead")]
        for i, (_, topic) in enumerate(order):
            if topic == "work-dead":
                assert order[i + 1] == (RecordKind.QUEUE_ACK, "work")


@scenario
async def test_dead_letters_stay_out_of_the_queue_after_a_restart(tmp_path: Path) -> None:
    async with harness(tmp_path, queue_xml(DEAD) + SOW) as h:
        await _reject_cancel_ack_and_time_out(h)
        await h.commit()
    async with harness(tmp_path, queue_xml(DEAD) + SOW) as h:
        assert h.broker.queues.info("work").depth == 0
        c = await h.logon("c")
        c.send(sub(options="max_backlog=5"))
        await h.settle()
        assert got(c) == []
        store = h.broker.sow.topics.store("work-dead")
        assert store is not None and len(list(store.records())) == 3


@scenario
async def test_a_crash_between_a_dead_letter_and_its_ack_keeps_the_message_out(
    tmp_path: Path,
) -> None:
    """The ack after a dead letter is torn off the log (the crash came between the two
    writes): the start-up takes the dead letter as the removal, and writes the ack."""
    q = queue_xml(DEAD) + SOW
    async with harness(tmp_path, q) as h:
        p = await h.logon("pub")
        c = await h.logon("c")
        c.send(sub(options="max_backlog=5"))
        p.send(pub(0), pub(1))
        await h.settle()
        bms = {n: bm for n, bm, _ in got(c)}
        c.send(({"c": "sow_delete", "t": "work", "bm": bms[1], "o": "reject"}, b""))
        await h.settle()
        await h.commit()
    jdir = tmp_path / "data" / "journal"
    torn = zero_end_of_last_record(journals(jdir, "spool-test")[-1])
    assert torn.pub_hash == 0  # the ack (a local queue's has no publisher identity)
    (jdir / checkpoint_name("spool-test")).unlink(missing_ok=True)  # read the whole log
    async with harness(tmp_path, q) as h:
        assert h.broker.queues.info("work").depth == 1
        c = await h.logon("c")
        c.send(sub(options="max_backlog=5"))
        await h.settle()
        assert [n for n, _, _ in got(c)] == [0]
        await h.commit()
        txlog = h.broker.txlog
        assert txlog is not None
        records = await txlog.read_view(1)  # up to the torn seq, a fence now
        # the ack, after the fence
        acks = [r for r in await txlog.read_view(h.last_seq) if r.kind == RecordKind.QUEUE_ACK]
        assert [(r.sow_key, r.body) for r in acks] == [
            ("dead_letter", str(_seq_of(records, bms[1])).encode())
        ]
    async with harness(tmp_path, q) as h:  # and the ack now in the log does the same
        assert h.broker.queues.info("work").depth == 1


def _seq_of(records: Any, bookmark: str) -> int:
    return next(r.seq for r in records if r.bookmark == bookmark and r.topic == "work-in")


@scenario
async def test_only_the_broker_publishes_to_a_dead_letter_topic(tmp_path: Path) -> None:
    async with harness(tmp_path, queue_xml(DEAD) + SOW) as h:
        p = await h.logon("pub")
        forged = deadletter.DeadLetter("work", "work-in", "1|1|", 1, "a", "rejected", 1, 0, "",
                                       0, 0)  # fmt: skip
        p.send(({"c": "publish", "t": "work-dead", "cid": "f", "a": "processed"},
                deadletter.encode(forged, b"{}")))  # fmt: skip
        await h.settle()
        (failure,) = p.acks("processed")
        assert failure["status"] == "failure" and failure["reason"] == "invalid topic"
        assert "dead-letter topic of queue 'work'" in failure["detail"]


@scenario
async def test_a_removal_of_a_reason_not_listed_just_leaves(tmp_path: Path) -> None:
    q = queue_xml(
        "<MaxPerSubscriptionBacklog>5</MaxPerSubscriptionBacklog><DeadLetter>"
        "<Topic>work-dead</Topic><Reasons>max_deliveries</Reasons></DeadLetter>"
    )
    async with harness(tmp_path, q) as h:
        d = await h.logon("dead-reader")
        d.send(({"c": "subscribe", "t": "work-dead", "sub_id": "d"}, b""))
        p = await h.logon("pub")
        c = await h.logon("c")
        c.send(sub(options="max_backlog=5"))
        p.send(pub(0))
        await h.settle()
        c.send(({"c": "sow_delete", "t": "work", "bm": got(c)[0][1], "o": "reject"}, b""))
        await h.settle()
        assert h.broker.queues.info("work").removed == {"rejected": 1}
        assert letters(d) == []


@scenario
async def test_a_reason_goes_with_reject_only(tmp_path: Path) -> None:
    async with harness(tmp_path, queue_xml(DEAD) + SOW) as h:
        p = await h.logon("pub")
        c = await h.logon("c")
        c.send(sub(options="max_backlog=5"))
        p.send(pub(0))
        await h.settle()
        bm = got(c)[0][1]
        c.send(({"c": "sow_delete", "t": "work", "bm": bm, "reason": "x", "cid": "1",
                 "a": "processed"}, b""),
               ({"c": "sow_delete", "t": "work", "bm": bm, "o": "reject", "reason": "y" * 1025,
                 "cid": "2", "a": "processed"}, b""))  # fmt: skip
        await h.settle()
        refused = [(a["cid"], a["status"]) for a in c.acks("processed") if a["cid"] != "s"]
        assert refused == [("1", "failure"), ("2", "failure")]
        assert h.broker.queues.info("work").depth == 1


def _replicated(tmp_path: Path) -> dict[str, str]:
    """a and b replicate a queue with a dead-letter topic, and every topic."""
    q = (
        "<Queue><Name>work</Name><MessageType>json</MessageType>"
        f"<UnderlyingTopic>work-in</UnderlyingTopic>{DEAD}</Queue>{SOW}"
    )
    return {
        "a": xml(tmp_path, "a", destination("b", [B], passthrough=(".*",)), sow=q),
        "b": xml(tmp_path, "b", destination("a", [A], passthrough=(".*",)), sow=q),
    }


async def _reject_at_a(clock: VirtualClock, h: dict[str, EngineHarness]) -> None:
    """A message published at a, delivered there and rejected, once b holds it."""
    p = await h["a"].logon("pub")
    p.send(pub(0))
    await drive(clock, lambda: h["b"].broker.queues.info("work").depth == 1)
    c = await h["a"].logon("c")
    c.send(sub(options="max_backlog=5"))
    await drive(clock, lambda: len(got(c)) == 1)
    c.send(({"c": "sow_delete", "t": "work", "bm": got(c)[0][1], "o": "reject"}, b""))
    await drive(clock, lambda: h["a"].broker.queues.info("work").depth == 0)


@fabric_scenario
async def test_a_replicated_queue_dead_letters_once_on_every_instance(tmp_path: Path) -> None:
    async with fabric_of(tmp_path, _replicated(tmp_path)) as (_fabric, clock, h):
        await _reject_at_a(clock, h)
        store = h["b"].broker.sow.topics.store("work-dead")
        assert store is not None
        await drive(clock, lambda: len(list(store.records())) == 1)
        await drive(clock, lambda: h["b"].broker.queues.info("work").depth == 0)
        assert h["b"].broker.queues.info("work").dead_lettered == 0  # a published it


def _appended(topic: str, seq: int, body: bytes, path: tuple[str, ...]) -> AppendedRun:
    return AppendedRun(
        topic=topic, topic_literal=orjson.dumps(topic), pub_hash=7, pub_seqs=[seq],
        origin=Origin("replication", "a", None, None), bodies=[body], first_seq=seq,
        timestamp_us=seq, corr_ids=None, sow_keys=None, kind=RecordKind.PUBLISH,
        publisher_name="", path=path,
    )  # fmt: skip


def test_a_dead_letter_alone_takes_the_message_out_of_a_replicated_queue() -> None:
    """Another instance's dead letter reaches this copy of the queue, and its ack never
    does (that instance crashed between the two, and stays down): the dead letter is
    enough. A local queue takes only its own dead letters (its seqs are this log's)."""
    dead = DeadLetterConfig("work-dead")
    q = QueueRuntime.build(
        QueueConfig(name="work", underlying="work-in", dead_letter=dead), VirtualClock(), "b",
        replicated=True,
    )  # fmt: skip
    local = QueueRuntime.build(
        QueueConfig(name="mine", underlying="work-in", dead_letter=dead), VirtualClock(), "b"
    )
    stage = QueueStage([q, local], lambda _q: None)
    stage.appended(_appended("work-in", 1, b'{"n":1}', ("a",)))
    stage.appended(_appended("work-in", 2, b'{"n":2}', ("a",)))
    assert (q.machine.depth, local.machine.depth) == (2, 2)
    bm = format_bookmark(7, 1)

    def letter(queue: str) -> bytes:
        gone = DeadLetter(queue, "work-in", bm, 1, "a", "rejected", 1, 0, "c/q", 1, 2)
        return deadletter.encode(gone, b'{"n":1}')

    stage.appended(_appended("work-dead", 3, letter("work"), ("a",)))
    stage.appended(_appended("work-dead", 4, letter("mine"), ("a",)))
    assert q.machine.get(bm) is None and q.machine.depth == 1
    assert q.machine.removed == {"elsewhere": 1}
    assert local.machine.depth == 2  # a's seq 1 is not this log's seq 1
    # a body on the dead-letter topic that is not a dead letter changes nothing
    stage.appended(_appended("work-dead", 5, b'{"dead_letter":{}}', ("a",)))
    assert q.machine.depth == 1


async def _durable(h: EngineHarness, work: Awaitable[T]) -> T:
    """``work``, which waits until what it wrote is durable: virtual time moves (the
    log's group commit) until it is done."""
    task = asyncio.ensure_future(work)
    while not task.done():
        await h.clock.advance(0.01)
        await asyncio.sleep(0.001)  # the fsync thread reports
    return task.result()


@scenario
async def test_redrive_sends_dead_letters_back_once_with_their_lineage(tmp_path: Path) -> None:
    async with harness(tmp_path, queue_xml(DEAD) + SOW) as h:
        _, c, bms = await _reject_cancel_ack_and_time_out(h)
        ops = h.broker.operations
        seen = len(c.deliveries())
        done = await _durable(h, ops.redrive_dead_letters(
            "work", filter="/dead_letter/reason = 'rejected'", by="admin"))  # fmt: skip
        assert done["redriven"] == 1
        (sent,) = done["messages"]  # type: ignore[misc]
        assert (sent["original"], sent["topic"]) == (bms[0], "work-in")
        await h.settle()
        (header, body) = c.deliveries()[seen]
        assert orjson.loads(body) == {"n": 0}
        assert (header["bm"], header["x"]) == (sent["bookmark"], bms[0])  # the lineage
        store = h.broker.sow.topics.store("work-dead")
        assert store is not None
        marks = {
            head["bookmark"]: head.get("redriven")
            for head in (orjson.loads(r.body)["dead_letter"] for r in store.records())
        }
        assert marks[bms[0]] is not None and marks[bms[0]]["bookmark"] == sent["bookmark"]
        assert marks[bms[0]]["by"] == "admin" and marks[bms[1]] is None
        # the same again finds nothing left to send; the rest go, each to its topic
        again = await _durable(
            h, ops.redrive_dead_letters("work", filter="/dead_letter/reason = 'rejected'")
        )
        assert again["redriven"] == 0
        rest = await _durable(h, ops.redrive_dead_letters("work", limit=1))
        assert [m["original"] for m in rest["messages"]] == [bms[1]]  # type: ignore[attr-defined]
        rest = await _durable(h, ops.redrive_dead_letters("work"))
        assert [m["original"] for m in rest["messages"]] == [bms[3]]  # type: ignore[attr-defined]
        assert h.broker.queues.info("work").depth == 3
        await h.commit()
    # a restart reads the marks without taking anything out of the queue
    async with harness(tmp_path, queue_xml(DEAD) + SOW) as h:
        assert h.broker.queues.info("work").depth == 3


@scenario
async def test_a_redrive_is_refused_where_it_cannot_mark_or_record(tmp_path: Path) -> None:
    unkeyed = sow_topic("work-dead")
    async with harness(
        tmp_path, queue_xml(DEAD) + unkeyed, topics=("work-in", "work-dead", "work")
    ) as h:
        ops = h.broker.operations
        with pytest.raises(RedriveRefused, match="not a SOW topic with a <Key>"):
            await ops.redrive_dead_letters("work")
    async with harness(tmp_path / "2", queue_xml(DEAD) + SOW,
                       topics=("work-in", "work-dead", "work")) as h:  # fmt: skip
        await _reject_cancel_ack_and_time_out(h)
        ops = h.broker.operations
        with pytest.raises(RedriveRefused, match="does not record 'elsewhere'"):
            await ops.redrive_dead_letters("work", target="elsewhere")
        with pytest.raises(RedriveRefused, match="'work-dead' is a dead-letter topic"):
            await ops.redrive_dead_letters("work", target="work-dead")
        with pytest.raises(QueueNotFound):
            await ops.redrive_dead_letters("nope")


REDRIVE_ACTION = (
    "<Action><Name>redrive</Name><On><Module>amps-action-on-admin</Module></On>"
    "<Do><Module>spool-action-do-redrive-dead-letters</Module><Options><Queue>work</Queue>"
    "<Filter>/dead_letter/reason = 'max_deliveries'</Filter><Limit>5</Limit></Options></Do>"
    "</Action>"
)


@scenario
async def test_the_redrive_action_sends_back_what_its_filter_takes(tmp_path: Path) -> None:
    async with harness(tmp_path, queue_xml(DEAD) + SOW, actions=REDRIVE_ACTION) as h:
        _, _, bms = await _reject_cancel_ack_and_time_out(h)
        run = await _durable(h, h.broker.actions.run_admin("redrive", {}, "ops"))
        (step,) = run.steps
        assert (step.status, step.variables) == ("ok", {"AMPS_DEAD_LETTERS_REDRIVEN": "1"})
        store = h.broker.sow.topics.store("work-dead")
        assert store is not None
        redriven = [
            head["bookmark"]
            for head in (orjson.loads(r.body)["dead_letter"] for r in store.records())
            if "redriven" in head
        ]
        assert redriven == [bms[3]]  # the one past MaxDeliveries
        assert (
            "action redrive"
            in orjson.loads(next(r.body for r in store.records() if b'"redriven"' in r.body))[
                "dead_letter"
            ]["redriven"]["by"]
        )
