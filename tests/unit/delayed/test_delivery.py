"""Delayed delivery on the engine, on a virtual clock (docs/protocol.md "Publish options"):
a publish with ``deliver_at`` / ``deliver_after`` is stored and acked at once, delivered
to nobody until its due time, then delivered once, by a due record written then, to live
subscribers and the SOW; across a restart (with and without the checkpoint) it is
delivered on time and never twice."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from spool.server.bookmarks import format_time_bookmark
from spool.server.clock import VirtualClock
from spool.server.delayed.checkpoint import checkpoint_name
from spool.server.txlog.format.record import RecordKind, split_schedule_field
from tests.support.damage import flip_byte, journals, records_of
from tests.support.engine import EngineHarness, FakeClient, scenario
from tests.support.server import sow_topic

Msg = tuple[dict[str, Any], bytes]
SCHEDULED, DUE, PUBLISH = RecordKind.SCHEDULED, RecordKind.DUE, RecordKind.PUBLISH


def harness(tmp_path: Path, **kw: Any) -> EngineHarness:
    """A broker recording every topic, ``orders`` a SOW topic keyed by ``/id``."""
    kw.setdefault("journal_size", "1MB")
    return EngineHarness(tmp_path, sow=sow_topic("orders", "/id"), **kw)


def publish(n: int, o: str | None = None, *, t: str = "t", **header: Any) -> Msg:
    """Publish ``n`` (its sequence, and ``cid`` ``pN``) asking for ``processed``."""
    options = {} if o is None else {"o": o}
    return {"c": "publish", "t": t, "s": n, "cid": f"p{n}", "a": "processed", **options,
            **header}, b'{"id":%d}' % n  # fmt: skip


def subscribe(client: FakeClient, topic: str = "t", sub_id: str = "s") -> None:
    client.send(({"c": "subscribe", "t": topic, "sub_id": sub_id}, b""))


def delivered(client: FakeClient, sub_id: str = "s") -> list[int]:
    return [orjson.loads(body)["id"] for _, body in client.deliveries(sub_id)]


async def records(h: EngineHarness) -> list[tuple[RecordKind, int, str]]:
    """``(kind, publisher sequence, SOW key field)`` of every record in the log."""
    await h.commit()
    log = h.broker.txlog
    assert log is not None
    out: list[tuple[RecordKind, int, str]] = []
    seq = log.first_seq
    while batch := await log.read_batch(seq, max_count=500, upto_seq=log.last_seq):
        out.extend((r.kind, r.pub_seq, r.sow_key) for r in batch)
        seq = batch[-1].seq + 1
    return out


def now_us(h: EngineHarness) -> int:
    return int(h.clock.time() * 1_000_000)


async def advance(h: EngineHarness, seconds: float) -> None:
    await h.clock.advance(seconds)
    await h.settle()


@scenario
async def test_a_delayed_publish_is_acked_now_and_delivered_at_its_time(tmp_path: Path) -> None:
    async with harness(tmp_path) as h:
        sub = await h.logon("sub")
        subscribe(sub)
        pub = await h.logon("pub")
        start = now_us(h)
        pub.send(publish(1, "deliver_after=30s"), publish(2))
        await h.settle()
        assert [(a["cid"], a["status"]) for a in pub.acks("processed")] == [
            ("p1", "success"),
            ("p2", "success"),
        ]
        assert delivered(sub) == [2]
        await advance(h, 29.99)
        assert delivered(sub) == [2]
        await advance(h, 0.02)
        assert delivered(sub) == [2, 1]
        # the delivered copy carries the bookmark it was published with
        (header, _), _ = sub.deliveries("s")[1], None
        assert header["bm"].startswith(sub.deliveries("s")[0][0]["bm"].split("|")[0] + "|1|")
        kinds = await records(h)
        assert [(k, s) for k, s, _ in kinds] == [(SCHEDULED, 1), (PUBLISH, 2), (DUE, 1)]
        due, rest = split_schedule_field(kinds[0][2])
        assert due == start + 30_000_000 and rest == ""
        info = h.broker.delayed.info() if h.broker.delayed else None
        assert info is not None and info.pending == 0 and info.delivered == 1


@scenario
async def test_messages_fall_due_in_due_order_then_publish_order(tmp_path: Path) -> None:
    async with harness(tmp_path) as h:
        sub = await h.logon("sub")
        subscribe(sub)
        pub = await h.logon("pub")
        at = format_time_bookmark(now_us(h) + 10_000_000)
        pub.send(
            publish(1, "deliver_after=20s"),
            publish(2, f"deliver_at={at}"),
            publish(3, "deliver_after=10s"),
            publish(4, "deliver_after=5s"),
        )
        await h.settle()
        await advance(h, 6)
        assert delivered(sub) == [4]
        await advance(h, 5)
        assert delivered(sub) == [4, 2, 3]
        await advance(h, 10)
        assert delivered(sub) == [4, 2, 3, 1]


@scenario
async def test_a_moment_already_past_is_delivered_at_once_after_it_is_stored(
    tmp_path: Path,
) -> None:
    async with harness(tmp_path) as h:
        sub = await h.logon("sub")
        subscribe(sub)
        pub = await h.logon("pub")
        pub.send(publish(1, f"deliver_at={format_time_bookmark(now_us(h) - 5_000_000)}"))
        await advance(h, 0.001)
        assert delivered(sub) == [1]
        assert [(k, s) for k, s, _ in await records(h)] == [(SCHEDULED, 1), (DUE, 1)]


@scenario
async def test_a_sow_record_is_stored_at_its_due_time_with_its_lifetime_from_then(
    tmp_path: Path,
) -> None:
    async with harness(tmp_path) as h:
        pub = await h.logon("pub")
        pub.send(publish(7, "deliver_after=60s", t="orders", e=30))
        await h.settle()
        store = h.broker.sow.topics.store("orders")
        assert store is not None and store.keys() == []
        await advance(h, 60.01)
        assert store.keys() == ["7"]
        await advance(h, 29)
        assert store.keys() == ["7"]  # 30 s from the due time, not from the publish
        await advance(h, 2)
        assert store.keys() == []


@scenario
async def test_a_repeated_sequence_is_a_duplicate_of_the_delayed_message(tmp_path: Path) -> None:
    async with harness(tmp_path) as h:
        sub = await h.logon("sub")
        subscribe(sub)
        pub = await h.logon("pub")
        pub.send(publish(1, "deliver_after=5s"))
        await h.settle()
        pub.send(publish(1, "deliver_after=5s"), publish(1))
        await h.settle()
        assert [a["status"] for a in pub.acks("processed")] == ["success", "failure", "failure"]
        await advance(h, 6)
        assert delivered(sub) == [1]
        assert [(k, s) for k, s, _ in await records(h)] == [(SCHEDULED, 1), (DUE, 1)]


@scenario
async def test_refusals_name_why(tmp_path: Path) -> None:
    xml_kw = {"topics": ("t", "orders")}
    async with harness(tmp_path, **xml_kw) as h:
        pub = await h.logon("pub")
        pub.send(
            publish(1, "deliver_after=5s", t="unrecorded"),
            publish(2, "deliver_after=99999999999999s"),
            ({**publish(3, "deliver_after=5s", t="orders")[0], "c": "delta_publish"}, b"{}"),
        )
        await h.settle()
        got = {a["cid"]: (a["status"], a.get("detail", "")) for a in pub.acks("processed")}
        assert got["p1"] == (
            "failure",
            "delayed delivery needs a topic the transaction log records; 'unrecorded' is "
            "not recorded here",
        )
        assert got["p2"] == ("failure", "deliver_after reaches past the year 9999")
        assert got["p3"][0] == "failure" and "delta_publish" in got["p3"][1]
        assert await records(h) == []


@scenario
async def test_pending_messages_are_delivered_on_time_after_a_restart(tmp_path: Path) -> None:
    h = harness(tmp_path)
    async with h:
        pub = await h.logon("pub")
        pub.send(publish(1, "deliver_after=30s"), publish(2, "deliver_after=10s"))
        pub.send(publish(3, "deliver_after=1s"))
        await h.settle()
        await advance(h, 2)  # 3 is delivered before the stop
    path = h.config.transaction_log.journal_directory / checkpoint_name(h.config.name)  # type: ignore[union-attr]
    assert path.exists()
    again = harness(tmp_path, clock=h.clock)
    async with again:
        assert again.broker.delayed is not None
        assert again.broker.delayed.info().pending == 2
        sub = await again.logon("sub")
        subscribe(sub)
        await advance(again, 7)
        assert delivered(sub) == []
        await advance(again, 2)
        # (the records are read from the journal file now, in a worker thread)
        await again.until(lambda: delivered(sub) == [2])
        await advance(again, 20)
        await again.until(lambda: delivered(sub) == [2, 1])
        kinds = [(k, s) for k, s, _ in await records(again)]
        assert kinds.count((DUE, 3)) == kinds.count((DUE, 2)) == kinds.count((DUE, 1)) == 1


@scenario
async def test_without_its_checkpoint_start_up_finds_the_pending_ones_in_the_log(
    tmp_path: Path,
) -> None:
    h = harness(tmp_path)
    async with h:
        pub = await h.logon("pub")
        pub.send(publish(1, "deliver_after=30s"), publish(2, "deliver_after=1s"))
        await h.settle()
        await advance(h, 2)
    tl = h.config.transaction_log
    assert tl is not None
    (tl.journal_directory / checkpoint_name(h.config.name)).unlink()
    again = harness(tmp_path, clock=h.clock)
    async with again:
        sub = await again.logon("sub")
        subscribe(sub)
        await advance(again, 30)
        await again.until(lambda: delivered(sub) == [1])
        await advance(again, 1)
        assert delivered(sub) == [1]  # 2 was delivered before the restart: not again


@scenario
async def test_a_repaired_range_gives_back_the_pending_ones_recovery_could_not_read(
    tmp_path: Path,
) -> None:
    """Records a fence hid from recovery come back with their repair: a scheduled one
    not delivered yet is taken in (once), one delivered already is not."""
    async with harness(tmp_path) as h:
        sub = await h.logon("sub")
        subscribe(sub)
        pub = await h.logon("pub")
        pub.send(publish(1, "deliver_after=1s"), publish(2, "deliver_after=60s"))
        pub.send(publish(3, "deliver_after=90s"))
        await h.settle()
        await advance(h, 2)
        assert delivered(sub) == [1]
        delayed = h.broker.delayed
        assert delayed is not None
        # as if recovery had not read message 2's record (fenced then)
        (gone,) = delayed.index.pop_due(now_us(h) + 60_000_000, 1)
        assert gone[3] == 2
        await h.commit()
        added = await h.drive(delayed.take_repaired(1, h.last_seq))
        assert added == 1 and len(delayed.index) == 2
        await advance(h, 60)
        await h.until(lambda: delivered(sub) == [1, 2])
        await advance(h, 30)
        await h.until(lambda: delivered(sub) == [1, 2, 3])


@scenario
async def test_a_damaged_scheduled_record_waits_for_its_repair_and_holds_no_other_back(
    tmp_path: Path,
) -> None:
    h = harness(tmp_path)
    async with h:
        pub = await h.logon("pub")
        pub.send(*(publish(n, f"deliver_after={10 * n}s") for n in (1, 2, 3)))
        await h.settle()
    tl = h.config.transaction_log
    assert tl is not None
    (journal,) = journals(tl.journal_directory, h.config.name)
    first = next(r for r in records_of(journal) if r.pub_seq == 1)
    flip_byte(journal, first.offset + first.length // 2)
    again = harness(tmp_path, clock=h.clock)
    async with again:
        delayed = again.broker.delayed
        assert delayed is not None
        sub = await again.logon("sub")
        subscribe(sub)
        await advance(again, 31)
        await again.until(lambda: delivered(sub) == [2, 3])
        info = delayed.info()
        assert (info.pending, info.waiting) == (1, True)  # 1 waits for a repair
        fenced = [e for e in again.broker.events.recent(1000)
                  if e["event"] == "delayed_record_fenced"]  # fmt: skip
        assert fenced and fenced[0]["first_seq"] == first.seq


class SteppedClock(VirtualClock):
    """A virtual clock whose wall-clock reading an operator (or NTP) can step."""

    def __init__(self) -> None:
        super().__init__()
        self.step = 0.0

    def time(self) -> float:
        return super().time() + self.step


@scenario
async def test_a_wall_clock_stepped_back_and_forth_delays_delivery_by_at_most_a_second(
    tmp_path: Path,
) -> None:
    clock = SteppedClock()
    async with harness(tmp_path, clock=clock) as h:
        sub = await h.logon("sub")
        subscribe(sub)
        pub = await h.logon("pub")
        start = now_us(h)
        pub.send(publish(1, "deliver_after=10s"))
        await advance(h, 2)
        clock.step = -3600.0  # the wall clock an hour back...
        # ...when a message due earlier than the head makes the timer compute its nap
        pub.send(publish(2, f"deliver_at={format_time_bookmark(start + 9_000_000)}"))
        await advance(h, 1)
        clock.step = 0.0  # ...and it is set right again
        await advance(h, 5.5)
        assert delivered(sub) == []
        await advance(h, 2.5)  # due at 9 s and 10 s: naps end every second
        assert delivered(sub) == [2, 1]


@scenario
async def test_a_due_record_lost_to_damage_is_written_again(tmp_path: Path) -> None:
    """No peer holds this log's due records: one that is damaged is replaced by a new
    one at the end of the log, so its message is delivered again rather than never."""
    h = harness(tmp_path)
    async with h:
        pub = await h.logon("pub")
        pub.send(publish(1, "deliver_after=1s"), publish(2, "deliver_after=1s"))
        await advance(h, 2)
    tl = h.config.transaction_log
    assert tl is not None
    (journal,) = journals(tl.journal_directory, h.config.name)
    rows = records_of(journal)
    # message 1 as stored (seq 1), then as delivered: its due record (seq 3)
    assert [r.seq for r in rows if r.pub_seq == 1] == [1, 3]
    due_of_1 = rows[2]
    flip_byte(journal, due_of_1.offset + due_of_1.length // 2)
    again = harness(tmp_path, clock=h.clock)
    async with again:
        log = again.broker.txlog
        assert log is not None
        await again.drive(again.until(lambda: log.last_seq == 5))
        await again.commit()
        # (a replay here waits at the fence, as for any fenced record: read past it)
        after = await log.read_batch(5, max_count=10)
        assert [(r.kind, r.pub_seq) for r in after] == [(DUE, 1)]
        lost = [e for e in again.broker.events.recent(1000)
                if e["event"] == "delayed_due_records_lost"]  # fmt: skip
        assert lost and lost[0]["messages"] == 1
        await advance(again, 20)
        assert log.last_seq == 5  # audited once: nothing more is written


@scenario
async def test_the_audit_finds_due_records_written_long_after_their_due_time(
    tmp_path: Path,
) -> None:
    """1,200 messages of 1 KB all fall due at one moment: the last due records come more
    than 64 blocks of due records after the first record of that moment, past where the
    bounded lookup as delivered searches. A fence after them must not make the audit
    deliver any of them again: it reads the log for their due records."""
    h = harness(tmp_path, journal_size="64MB")
    pad = "x" * 1000
    async with h:
        pub = await h.logon("pub")
        for n in range(1, 1201):
            pub.send(({"c": "publish", "t": "t", "s": n, "o": "deliver_after=1s"},
                      b'{"id":%d,"pad":"%s"}' % (n, pad.encode())))  # fmt: skip
        await h.settle()
        await advance(h, 2)
        await h.until(lambda: h.broker.delayed is not None and h.broker.delayed.delivered == 1200)
        pub.send(publish(5000), publish(5001))
        await h.settle()
    tl = h.config.transaction_log
    assert tl is not None
    (journal,) = journals(tl.journal_directory, h.config.name)
    plain = next(r for r in records_of(journal) if r.pub_seq == 5000)
    flip_byte(journal, plain.offset + plain.length // 2)
    again = harness(tmp_path, clock=h.clock, journal_size="64MB")
    async with again:
        log = again.broker.txlog
        delayed = again.broker.delayed
        assert log is not None and delayed is not None
        assert [(f.first_seq, f.last_seq) for f in log.fences] == [(plain.seq, plain.seq)]
        last = log.last_seq
        # the bounded lookup does not find the last due records: the audit must read
        pub_hash = (await log.read_batch(1, max_count=1))[0].pub_hash
        stored_at = await log.locate_bookmark(pub_hash, 1200)
        assert await log.locate_bookmark(pub_hash, 1200, delivered=True) == stored_at
        assert await again.drive(delayed.audit_fences()) == 0
        await advance(again, 2)
        assert log.last_seq == last  # no due record written again
