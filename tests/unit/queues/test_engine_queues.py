"""Queue scenarios on the in-process engine (virtual clock): deliveries, acks with
sow_delete, leases that run out, disconnects, backlog limits, barriers, recovery."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from spool.server.queues.checkpoint import decode
from spool.server.txlog.errors import JournalPinned
from spool.server.txlog.format.record import RecordKind
from tests.support.engine import EngineHarness, FakeClient, scenario
from tests.support.faults import FaultySeam
from tests.support.server import sow_topic

Msg = tuple[dict[str, Any], bytes]


def queue_xml(
    extra: str = "", *, name: str = "work", under: str = "work-in", tag: str = "Queue"
) -> str:
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
    async with harness(
        tmp_path,
        queue_xml(
            "<LeasePeriod>30s</LeasePeriod><MaxPerSubscriptionBacklog>5</MaxPerSubscriptionBacklog>"
        ),
    ) as h:
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
    async with harness(
        tmp_path, queue_xml("<MaxPerSubscriptionBacklog>10</MaxPerSubscriptionBacklog>")
    ) as h:
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


@scenario
async def test_backlog_is_the_smaller_of_max_backlog_and_the_queue_limit(tmp_path: Path) -> None:
    async with harness(
        tmp_path, queue_xml("<MaxPerSubscriptionBacklog>3</MaxPerSubscriptionBacklog>")
    ) as h:
        p = await h.logon("pub")
        big, default = await h.logon("big"), await h.logon("default")
        big.send(sub(options="max_backlog=100"))
        default.send(sub())
        await h.settle()
        assert big.acks("processed")[0]["max_backlog"] == 3
        assert default.acks("processed")[0]["max_backlog"] == 1  # no max_backlog: 1
        p.send(*(pub(i) for i in range(10)))
        await h.settle()
        assert (len(big.deliveries()), len(default.deliveries())) == (3, 1)
        info = h.broker.queues.info("work")
        assert (info.leased, info.backlog, info.depth) == (4, 6, 10)


@scenario
async def test_max_backlog_is_refused_outside_queues(tmp_path: Path) -> None:
    async with harness(tmp_path, queue_xml()) as h:
        c = await h.logon("c")
        c.send(sub(topic="work-in", options="max_backlog=3"))
        c.send(sub("t", options="live"))
        c.send(sub("u", bm="0"))
        await h.settle()
        fails = [(a["cid"], a["reason"]) for a in c.acks() if a.get("status") == "failure"]
        assert fails == [
            ("s", "invalid options"),
            ("t", "invalid options"),
            ("u", "invalid options"),
        ]


@scenario
async def test_barrier_waits_for_every_message_ahead(tmp_path: Path) -> None:
    q = queue_xml("<BarrierExpression>/barrier = 1</BarrierExpression>"
                  "<MaxPerSubscriptionBacklog>10</MaxPerSubscriptionBacklog>")  # fmt: skip
    async with harness(tmp_path, q) as h:
        p = await h.logon("pub")
        c = await h.logon("c")
        c.send(sub(options="max_backlog=10"))
        await h.settle()
        p.send(pub(1), pub(2), pub(3, barrier=1), pub(4))
        await h.settle()
        assert [n for n, _, _ in got(c)] == [1, 2, 4]
        bms = {n: bm for n, bm, _ in got(c)}
        c.send(ack(bms[1], bms[4]))
        await h.settle()
        assert [n for n, _, _ in got(c)] == [1, 2, 4]  # 2 is still ahead of the barrier
        c.send(ack(bms[2]))
        await h.settle()
        assert [n for n, _, _ in got(c)] == [1, 2, 4, 3]


@scenario
async def test_priority_cancel_expire_and_max_cancels(tmp_path: Path) -> None:
    q = queue_xml("<Priority>/p</Priority><MaxCancels>2</MaxCancels>")
    async with harness(tmp_path, q) as h:
        p = await h.logon("pub")
        p.send(pub(1, p=1), pub(2, p=9), pub(3, p=5))
        await h.settle()
        c = await h.logon("c")
        c.send(sub())
        await h.settle()
        assert [n for n, _, _ in got(c)] == [2]
        bm2 = got(c)[0][1]
        c.send(ack(bm2, options="cancel", cid="c1"))
        await h.settle()
        assert [(n, dc) for n, _, dc in got(c)] == [(2, 1), (2, 2)]
        c.send(ack(bm2, options="cancel", cid="c2"))  # the second cancel: it leaves
        await h.settle()
        assert [n for n, _, _ in got(c)] == [2, 2, 3]
        c.send(ack(got(c)[-1][1], options="expire", cid="e"))
        await h.settle()
        assert [n for n, _, _ in got(c)] == [2, 2, 3, 1]
        removed = h.broker.queues.info("work").removed
        assert removed == {"max_cancels": 1, "expired": 1}


@scenario
async def test_a_filter_ack_removes_matching_messages(tmp_path: Path) -> None:
    async with harness(tmp_path, queue_xml()) as h:
        p = await h.logon("pub")
        p.send(*(pub(i) for i in range(6)))
        await h.settle()
        c = await h.logon("c")
        c.send(
            (
                {
                    "c": "sow_delete",
                    "t": "work",
                    "f": "/n >= 3",
                    "cid": "f",
                    "a": "processed,stats",
                },
                b"",
            )
        )
        await h.settle()
        assert c.acks("stats")[0]["records_deleted"] == 3
        assert h.broker.queues.info("work").depth == 3
        c.send(({"c": "sow_delete", "t": "work", "cid": "x", "a": "processed"}, b""))
        c.send(ack("1|1|", options="bogus", cid="y"))
        await h.settle()
        fails = [(a["cid"], a["reason"]) for a in c.acks() if a.get("status") == "failure"]
        assert fails == [("x", "invalid message"), ("y", "invalid options")]


@scenario
async def test_a_consumer_filter_and_round_robin(tmp_path: Path) -> None:
    q = queue_xml("<DeliveryFairness>round-robin</DeliveryFairness>"
                  "<MaxPerSubscriptionBacklog>100</MaxPerSubscriptionBacklog>")  # fmt: skip
    async with harness(tmp_path, q) as h:
        p = await h.logon("pub")
        a, b, odd = await h.logon("a"), await h.logon("b"), await h.logon("odd")
        for c in (a, b):
            c.send(sub(options="max_backlog=100", f="/n % 2 = 0"))
        odd.send(sub(options="max_backlog=100", f="/n % 2 = 1"))
        await h.settle()
        p.send(*(pub(i) for i in range(40)))
        await h.settle()
        assert sorted(n for n, _, _ in got(odd)) == list(range(1, 40, 2))
        assert (len(got(a)), len(got(b))) == (10, 10)
        assert all(n % 2 == 0 for n, _, _ in got(a) + got(b))


@scenario
async def test_at_most_once_removes_on_delivery(tmp_path: Path) -> None:
    async with harness(tmp_path, queue_xml("<Semantics>at-most-once</Semantics>")) as h:
        p = await h.logon("pub")
        c = await h.logon("c")
        c.send(sub())
        await h.settle()
        p.send(*(pub(i) for i in range(5)))
        await h.settle()
        assert [(n, dc) for n, _, dc in got(c)] == [(i, 1) for i in range(5)]
        assert all(hd["lp"] == 0 for hd, _ in c.deliveries())
        assert h.broker.queues.info("work").depth == 0


@scenario
async def test_expiration_removes_unread_messages_on_the_clock(tmp_path: Path) -> None:
    async with harness(tmp_path, queue_xml("<Expiration>10s</Expiration>")) as h:
        p = await h.logon("pub")
        p.send(pub(1))
        await h.settle()
        await h.clock.advance(5)
        p.send(pub(2))
        await h.settle()
        await h.clock.advance(5.5)
        await h.settle()
        assert h.broker.queues.info("work").depth == 1
        c = await h.logon("c")
        c.send(sub())
        await h.settle()
        assert [n for n, _, _ in got(c)] == [2]


@scenario
async def test_state_is_recovered_from_the_log(tmp_path: Path) -> None:
    q = queue_xml("<MaxPerSubscriptionBacklog>10</MaxPerSubscriptionBacklog>")
    async with harness(tmp_path, q) as h:
        p = await h.logon("pub")
        c = await h.logon("c")
        c.send(sub(options="max_backlog=10"))
        await h.settle()
        p.send(*(pub(i) for i in range(6)))
        await h.settle()
        c.send(ack(*(bm for n, bm, _ in got(c) if n in (0, 2, 4))))
        await h.settle()
        await h.commit()
        kinds = [r.kind for r in await h.broker.txlog.read_view(1)]  # type: ignore[union-attr]
        assert kinds.count(RecordKind.QUEUE_ACK) == 1
    async with harness(tmp_path, q) as h:
        assert h.broker.queues.info("work").depth == 3
        c = await h.logon("c")
        c.send(sub(options="max_backlog=10"))
        await h.settle()
        assert sorted(n for n, _, _ in got(c)) == [1, 3, 5]


@scenario
async def test_entitlements_read_to_consume_write_to_delete_by_filter(tmp_path: Path) -> None:
    users = (
        "<User><Name>worker</Name><Token>worker-token-0123456789</Token>"
        "<Read>^work$</Read></User>"
        "<User><Name>other</Name><Token>other-token-0123456789</Token>"
        "<Read>^elsewhere$</Read><Write>^work-in$</Write></User>"
    )
    async with harness(tmp_path, queue_xml(), users=users) as h:
        p = await h.logon("pub", user_id="other", pw="other-token-0123456789")
        p.send(pub(1))
        await h.settle()
        w = await h.logon("w", user_id="worker", pw="worker-token-0123456789")
        o = await h.logon("o", user_id="other", pw="other-token-0123456789")
        o.send(sub("x"))
        w.send(sub())
        await h.settle()
        assert [(a["status"], a.get("reason")) for a in o.acks("processed")] == [
            ("failure", "not entitled")
        ]
        assert [n for n, _, _ in got(w)] == [1]
        w.send(({"c": "sow_delete", "t": "work", "f": "/n = 1", "cid": "f", "a": "processed"}, b""))
        w.send(ack(got(w)[0][1], cid="ok"))  # acking what it holds needs no write
        await h.settle()
        assert [(a["cid"], a["status"], a.get("reason")) for a in w.acks("processed")][1:] == [
            ("f", "failure", "not entitled"),
            ("ok", "success", None),
        ]
        assert h.broker.queues.info("work").depth == 0


@scenario
async def test_at_most_once_holds_a_consumer_whose_connection_is_full(tmp_path: Path) -> None:
    q = queue_xml(
        "<Semantics>at-most-once</Semantics><DeliveryFairness>round-robin</DeliveryFairness>"
    )
    tuning = "<SlowClientBufferLimit>1MB</SlowClientBufferLimit>"
    async with harness(
        tmp_path, q, tuning=tuning, transport_extra="<MaxMessageSize>128KB</MaxMessageSize>"
    ) as h:
        p = await h.logon("pub")
        stuck, reader = await h.logon("stuck"), await h.logon("reader")
        stuck.send(sub())
        reader.send(sub())
        await h.settle()
        stuck.transport.stop_reading()
        pad = "x" * 10_000
        for i in range(0, 200, 20):
            p.send(*(pub(n, pad=pad) for n in range(i, i + 20)))
            await h.settle()
        assert not stuck.closed  # held, never cut for a slow client
        assert stuck.session.queue_depth <= 1024 * 1024 // 2
        stuck.transport.resume_reading()
        await h.settle()
        got_both = sorted(n for c in (stuck, reader) for n, _, _ in got(c))
        assert got_both == list(range(200))  # each message once, none lost
        assert len(got(reader)) > len(got(stuck))


@scenario
async def test_replacing_a_queue_subscription_by_a_plain_one_ends_its_leases(
    tmp_path: Path,
) -> None:
    """A queue subscription replaced by a subscription to another topic drops its
    consumer, so no queue message comes under the new subscription's id."""
    async with harness(tmp_path, queue_xml()) as h:
        p = await h.logon("pub")
        a, b = await h.logon("a"), await h.logon("b")
        a.send(sub())
        await h.settle()
        p.send(pub(1), pub(2))
        await h.settle()
        assert [n for n, _, _ in got(a)] == [1]
        a.send(sub(topic="elsewhere", options="replace"))
        b.send(sub())
        await h.settle()
        assert [n for n, _, _ in got(a)] == [1]  # nothing more from the queue
        assert sorted((n, dc) for n, _, dc in got(b)) == [(1, 2)]
        assert h.broker.queues.info("work").consumers == 1


@scenario
async def test_a_restart_reads_the_log_from_the_queue_checkpoint(tmp_path: Path) -> None:
    """Messages acked before the oldest one left are not read again at start-up: the
    queue's checkpoint (written at shutdown, after the log's last fsync) starts recovery
    at the oldest message still in the queue. The same state comes back as from the whole
    log (the checkpoint removed), and a checkpoint naming a record the log does not hold
    is ignored."""
    q = queue_xml("<MaxPerSubscriptionBacklog>500</MaxPerSubscriptionBacklog>")
    async with harness(tmp_path, q) as h:
        p = await h.logon("pub")
        c = await h.logon("c")
        c.send(sub(options="max_backlog=500"))
        await h.settle()
        p.send(*(pub(i) for i in range(300)))
        await h.settle()
        c.send(ack(*(bm for n, bm, _ in got(c) if n < 200 or n % 7 == 0)))
        await h.settle()
        first_left = next(bm for n, bm, _ in got(c) if n == 200)
    path = next(tmp_path.rglob("*.queues.ack"))

    def recovered(h: EngineHarness) -> dict[str, Any]:
        (event,) = [e for e in h.broker.events.recent() if e["event"] == "queue_recovered"]
        return event

    async def remaining(h: EngineHarness) -> list[int]:
        c = await h.logon("c")
        c.send(sub(options="max_backlog=500"))
        await h.settle()
        return sorted(n for n, _, _ in got(c))

    expect = [n for n in range(200, 300) if n % 7]
    async with harness(tmp_path, q) as h:
        event = recovered(h)
        assert event["messages"] == 100 and event["depth"] == len(expect)
        oldest = h.broker.queues.queues["work"].machine.get(first_left)
        assert oldest is not None and event["from_seq"] == oldest.seq
        assert await remaining(h) == expect
    saved = path.read_bytes()
    path.unlink()
    async with harness(tmp_path, q) as h:
        event = recovered(h)
        assert event["messages"] == 300 and event["from_seq"] == 1
        assert await remaining(h) == expect
    # a checkpoint that names another record than the log holds at its seq: ignored
    doc = orjson.loads(saved)
    doc["last"][2] += 1  # its publisher sequence
    path.write_bytes(orjson.dumps(doc))
    async with harness(tmp_path, q) as h:
        event = recovered(h)
        assert event["from_seq"] == 1 and await remaining(h) == expect
        (ignored,) = [e for e in h.broker.events.recent()
                      if e["event"] == "queue_checkpoint_ignored"]  # fmt: skip
        assert "not the one the checkpoint names" in ignored["reason"]


@scenario
async def test_the_queue_checkpoint_is_written_through_the_file_seam(tmp_path: Path) -> None:
    """The checkpoint goes to disk as journals do: a storage that loses what was not
    fsynced when the machine crashes keeps it whole (it is fsynced before its rename),
    and one that refuses the write leaves the previous checkpoint, with an event."""
    seam = FaultySeam(volatile=True)
    q = queue_xml("<MaxPerSubscriptionBacklog>50</MaxPerSubscriptionBacklog>")

    async def work(ns: range) -> EngineHarness:
        """Acks ``ns`` (publishes first), then stops: the checkpoint is written."""
        async with harness(tmp_path, q, files=seam) as h:
            if ns.start == 0:
                p = await h.logon("pub")
                p.send(*(pub(i) for i in range(20)))
                await h.settle()
            c = await h.logon("c")
            c.send(sub(options="max_backlog=50"))
            await h.settle()
            c.send(ack(*(bm for n, bm, _ in got(c) if n in ns)))
            await h.settle()
        return h

    await work(range(10))
    seam.crash()  # the machine, right after the stop
    path = next(tmp_path.rglob("*.queues.ack"))
    saved = decode(path.read_bytes())  # whole
    start = saved.seqs["work"]
    seam.fail("open", only=lambda p: p.name.endswith(".queues.ack.tmp"))
    h = await work(range(10, 15))
    (failed,) = [e for e in h.broker.events.recent() if e["event"] == "queue_checkpoint_failed"]
    assert "injected open failure" in failed["error"]
    assert decode(path.read_bytes()) == saved
    seam.heal()
    async with harness(tmp_path, q, files=seam) as h:
        (event,) = [e for e in h.broker.events.recent() if e["event"] == "queue_recovered"]
        assert event["from_seq"] == start and event["depth"] == 5


@scenario
async def test_the_log_is_kept_from_the_checkpoint_on_disk(tmp_path: Path) -> None:
    """Retention never takes the record the checkpoint on disk names, even once every
    message before it was acked: a crash before the next checkpoint would otherwise
    find a checkpoint the log no longer holds (the whole log read, the transfer counters
    counted from its start). The next checkpoint lets the pin move on."""
    q = queue_xml("<MaxPerSubscriptionBacklog>500</MaxPerSubscriptionBacklog>")
    pad = "x" * 10_000
    async with harness(tmp_path, q) as h:
        txlog, queues = h.broker.txlog, h.broker.queues
        assert txlog is not None
        p = await h.logon("pub")
        c = await h.logon("c")
        c.send(sub(options="max_backlog=500"))
        await h.settle()
        p.send(*(pub(i, pad=pad) for i in range(40)))
        await h.settle()
        await h.commit()
        assert await queues.save_checkpoint()
        named = txlog.last_seq
        c.send(ack(*(bm for _, bm, _ in got(c))))  # the queue is empty now
        await h.settle()
        p.send(*(pub(i, pad=pad) for i in range(40, 200)))  # a few journals further
        await h.settle()
        c.send(ack(*(bm for n, bm, _ in got(c) if n >= 40)))
        await h.settle()
        first = txlog.journals()[0]
        assert first.first_seq <= named <= first.last_seq < txlog.last_seq
        assert first.pinned_by == "queue:work"
        with pytest.raises(JournalPinned):
            await txlog.remove(first.id)
        await h.commit()
        assert await queues.save_checkpoint()
        assert txlog.journals()[0].pinned_by is None
        await txlog.remove(first.id)
    async with harness(tmp_path, q) as h:
        events = [e["event"] for e in h.broker.events.recent()]
        assert "queue_recovered" in events and "queue_checkpoint_ignored" not in events


@scenario
async def test_a_failed_subscribe_leaves_the_queue_subscription_of_its_sub_id(
    tmp_path: Path,
) -> None:
    """Only a subscribe whose options are valid and name ``replace`` replaces a queue
    subscription: ``replace`` inside another option (a conflation key's path, an unknown
    name) does not, so a subscribe that fails leaves it consuming."""
    async with harness(tmp_path, queue_xml()) as h:
        p = await h.logon("pub")
        a = await h.logon("a")
        a.send(sub())
        await h.settle()
        p.send(pub(1), pub(2))
        await h.settle()
        assert [n for n, _, _ in got(a)] == [1]
        a.send(sub(topic="elsewhere", options="noreplace"))
        a.send(sub(topic="elsewhere", options="conflation=1s,conflation_key=[/replace]"))
        await h.settle()
        fails = [a["reason"] for a in a.acks() if a.get("status") == "failure"]
        assert fails == ["invalid options", "subid in use"]
        assert h.broker.queues.info("work").consumers == 1
        a.send(ack(got(a)[0][1]))
        await h.settle()
        assert [n for n, _, _ in got(a)] == [1, 2]  # still the queue's consumer


@scenario
async def test_a_refused_queue_option_is_named_whole(tmp_path: Path) -> None:
    """The refusal of an option a queue subscription does not take names the option,
    even one whose value holds commas (``conflation_key=[/a,/b]``)."""
    async with harness(tmp_path, queue_xml()) as h:
        a = await h.logon("a")
        a.send(sub(options="max_backlog=2,conflation=1s,conflation_key=[/a,/b]"))
        await h.settle()
        (fail,) = [a for a in a.acks() if a.get("status") == "failure"]
        assert fail["reason"] == "invalid options"
        assert fail["detail"].startswith("'conflation' is not available on a queue")
        assert h.broker.queues.info("work").consumers == 0


@scenario
async def test_a_sow_subscription_replacing_a_queue_subscription_ends_its_leases(
    tmp_path: Path,
) -> None:
    """A ``delta_subscribe`` or ``sow_and_subscribe`` with ``replace`` that takes the
    sub id of a queue subscription ends it like a plain subscribe does: its leases return
    and no queue message comes under the new subscription's id."""
    orders = sow_topic("orders", "/id")
    async with harness(
        tmp_path,
        queue_xml(
            "<LeasePeriod>1h</LeasePeriod><MaxPerSubscriptionBacklog>5</MaxPerSubscriptionBacklog>"
        )
        + orders,
    ) as h:
        p = await h.logon("pub")
        a, b = await h.logon("a"), await h.logon("b")
        a.send(sub("s1"), sub("s2"))
        await h.settle()
        p.send(pub(1), pub(2), pub(3))
        await h.settle()
        assert sorted(n for n, _, _ in got(a)) == [1, 2]
        a.send(({"c": "delta_subscribe", "t": "orders", "sub_id": "s1", "o": "replace"}, b""))
        a.send(({"c": "sow_and_subscribe", "t": "orders", "sub_id": "s2", "o": "replace"}, b""))
        await h.settle()
        assert not [x for x in a.acks() if x.get("status") == "failure"]
        assert h.broker.queues.info("work").consumers == 0
        b.send(sub(options="max_backlog=3"))
        await h.settle()
        assert sorted((n, dc) for n, _, dc in got(b)) == [(1, 2), (2, 2), (3, 1)]
        assert sorted(n for n, _, _ in got(a)) == [1, 2]  # nothing more from the queue


@scenario
async def test_a_queue_message_keeps_its_correlation_id(tmp_path: Path) -> None:
    """``x`` is passed through on queue deliveries as on any other (docs/protocol.md),
    also after a restart (read back from the log) and from a bounded queue's log."""
    for name, extra in (("plain", ""), ("bounded", "<TargetQueueDepth>1</TargetQueueDepth>")):
        base = tmp_path / name
        async with harness(base, queue_xml(extra)) as h:
            p = await h.logon("pub")
            p.send(({"c": "publish", "t": "work-in", "x": "order-7"}, b'{"n":1}'), pub(2))
            await h.settle()
            c = await h.logon("c")
            c.send(sub())
            await h.settle()
            assert [hd.get("x") for hd, _ in c.deliveries()] == ["order-7"]
            await h.commit()
        async with harness(base, queue_xml(extra)) as h:
            c = await h.logon("c")
            c.send(sub(options="max_backlog=1"))
            await h.settle()
            (first,) = c.deliveries()
            assert first[0].get("x") == "order-7"
            c.send(ack(str(first[0]["bm"])))
            await h.until(lambda c=c: len(c.deliveries()) == 2)  # a refill reads the log
            assert [hd.get("x") for hd, _ in c.deliveries()] == ["order-7", None]
