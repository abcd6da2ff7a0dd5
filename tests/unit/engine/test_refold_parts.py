"""A repaired range taken into the SOW and queues a part at a time, with live publishes
between the parts (server/publishing.py ``PublishPipeline.refold``).

One instance on the virtual clock: its middle journal is damaged while it is stopped, so
its start-up rebuild goes past the fenced records; the test then writes the original
records back in place of the fence (what a repair does) and checks that the state equals
the fold of the whole log, however the apply is cut into parts and whatever is published
between them.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest

from spool.server.queues.checkpoint import checkpoint_name
from spool.server.sow.subscribers import DELETED
from spool.server.txlog.format.record import Record
from tests.support.damage import flip_byte, journals, records_of
from tests.support.engine import EngineHarness
from tests.support.fabric import drive
from tests.support.repair import (
    Publisher,
    consume_all,
    folded_sow,
    jobs,
    order,
    sow_state,
)
from tests.support.replication import replication_xml
from tests.support.server import sow_topic

CONFIG = sow_topic("orders", "/k", durability="transient") + (
    "<Queue><Name>work</Name><MessageType>json</MessageType>"
    "<UnderlyingTopic>work-in</UnderlyingTopic><LeasePeriod>1h</LeasePeriod>"
    "<MaxPerSubscriptionBacklog>100</MaxPerSubscriptionBacklog></Queue>"
)
#: filler bodies: about a thousand fill a 1 MB journal
PAD = b'{"pad":"' + b"x" * 1000 + b'"}'
KEYS = [f"k{i}" for i in range(12)]
#: messages published to the queue in the fenced range: more than the keys, so the
#: queue's part of a refold outlasts the SOW's
JOBS = [f"r{i}" for i in range(1, 31)]
#: enough keys that applying them one per step of the loop outlasts a live delete
MANY = [f"k{i}" for i in range(200)]


def _config(tmp_path: Path) -> str:
    return replication_xml(
        tmp_path / "a" / "data", "a", destinations=(), sow=CONFIG, journal_size="1MB",
        txlog_extra="<PreallocatedJournalFiles>1</PreallocatedJournalFiles>",
    )  # fmt: skip


async def _damaged(tmp_path: Path, keys: list[str] = KEYS) -> tuple[EngineHarness, list[Record]]:
    """The instance restarted on a log whose middle journal is fenced, with the records
    the fence replaced (as a peer would send them back). ``keys`` are stored, then
    updated in the fenced range (the two last ones deleted there)."""
    h = EngineHarness(tmp_path / "a", _config(tmp_path))
    await h.__aenter__()
    try:
        pub = Publisher(h, await h.logon("pub"))
        await pub.send("orders", [order(k, 1) for k in keys])
        await pub.send("work-in", jobs("q1", "q2"))
        await pub.send("pad", [PAD] * 1100)
        lost_from = h.last_seq + 1
        # the range that will be fenced: every key updated, two deleted, new messages
        await pub.send("orders", [order(k, 2) for k in keys])
        pub.delete(keys[-2])
        pub.delete(keys[-1])
        await pub.send("work-in", jobs(*JOBS))
        lost_to = h.last_seq
        txlog = h.broker.txlog
        assert txlog is not None
        lost = await txlog.read_appended(
            lost_from, max_count=10_000, max_bytes=1 << 24, upto_seq=lost_to
        )
        assert [r.seq for r in lost] == list(range(lost_from, lost_to + 1))
        await pub.send("pad", [PAD] * 1100)
        await pub.send("orders", [order("k0", 3)])  # a later update of a repaired key
    finally:
        await h.__aexit__(None, None, None)
    journal_dir = tmp_path / "a" / "data" / "journal"
    middle = journals(journal_dir, "a")[1]
    damaged = [r for r in records_of(middle) if lost_from <= r.seq <= lost_to]
    assert [r.seq for r in damaged] == [r.seq for r in lost]
    for rec in reversed(damaged):
        flip_byte(middle, rec.offset + rec.length // 2)
    (journal_dir / checkpoint_name("a")).unlink()  # the queue reads the whole log
    again = EngineHarness(tmp_path / "a", _config(tmp_path))
    await again.__aenter__()
    await drive(again.clock, lambda: again.broker.ready)
    return again, lost


def test_live_changes_between_two_parts_are_not_undone(tmp_path: Path) -> None:
    """The stages' side of the contract: a part applied, then a live update and a live
    delete of keys whose repaired records are not applied yet, fed to the stages as later
    records, then the rest: the live changes stand (no repaired put undoes a delete)."""
    asyncio.run(_between_parts(tmp_path))


async def _between_parts(tmp_path: Path) -> None:
    h, lost = await _damaged(tmp_path)
    try:
        txlog, pipeline = h.broker.txlog, h.broker.pipeline
        assert txlog is not None
        fence = txlog.fences[0]
        # the instance's own refold waits: the test takes the range in itself
        async with pipeline.refolding():
            await txlog.fill_fence(fence.first_seq, lost)
            folds = pipeline.folds()
            for fold in folds:
                fold.repaired(lost)
            seq = fence.last_seq + 1
            later = await txlog.read_appended(seq, max_count=10_000)
            for fold in folds:
                fold.later(later)
            for fold in folds:
                fold.apply(1)  # one key and one queue record: the rest waits
            assert not all(fold.done for fold in folds)
            last = txlog.last_seq
            pub = Publisher(h, await h.logon("live"))
            await pub.send("orders", [order("k5", 9)])
            pub.delete("k6")
            await drive(h.clock, lambda: h.durable_seq == last + 2)
            live = await txlog.read_appended(last + 1, max_count=10)
            assert len(live) == 2
            while not all(fold.done for fold in folds):
                for fold in folds:
                    fold.later(live)
                    fold.apply(1)
                live = []
            pipeline.unfolded = []
        state = sow_state(h)
        assert state == await folded_sow(h)
        want = {k: 2 for k in KEYS[:10] if k != "k6"} | {"k0": 3, "k5": 9}
        assert {k: orjson.loads(v[0])["v"] for k, v in state.items()} == want
        want = sorted(["q1", "q2", *JOBS])
        assert await consume_all(h, want) == want  # each once
    finally:
        await h.__aexit__(None, None, None)


@pytest.mark.parametrize("part", [1, 5, 2048])
def test_the_instance_takes_a_repaired_range_in_by_parts(tmp_path: Path, part: int) -> None:
    """The pipeline's side: however the apply is cut, the instance ends with the fold of
    its whole log, every message not acked in its queue once, and one state_refolded."""
    asyncio.run(_by_parts(tmp_path, part))


async def _by_parts(tmp_path: Path, part: int) -> None:
    h, lost = await _damaged(tmp_path)
    try:
        txlog, pipeline = h.broker.txlog, h.broker.pipeline
        assert txlog is not None
        pipeline.refold_part = part
        fence = txlog.fences[0]
        assert pipeline.unfolded == [(fence.first_seq, fence.last_seq)]
        await txlog.fill_fence(fence.first_seq, lost)
        await drive(h.clock, lambda: not pipeline.unfolded)
        assert sow_state(h) == await folded_sow(h)
        refolded = [e for e in h.broker.events.recent(500) if e["event"] == "state_refolded"]
        assert [(e["first_seq"], e["last_seq"]) for e in refolded] == [
            (fence.first_seq, fence.last_seq)
        ]
        want = sorted(["q1", "q2", *JOBS])
        assert await consume_all(h, want) == want  # each once
    finally:
        await h.__aexit__(None, None, None)


def test_a_live_delete_while_the_instance_takes_a_range_in_stands(tmp_path: Path) -> None:
    """The pipeline feeds the stages what was appended between two parts: a key deleted
    live while the refold runs, before its repaired update is applied, stays deleted."""
    asyncio.run(_live_delete(tmp_path))


async def _live_delete(tmp_path: Path) -> None:
    h, lost = await _damaged(tmp_path, MANY)
    try:
        txlog, pipeline = h.broker.txlog, h.broker.pipeline
        assert txlog is not None
        pipeline.refold_part = 1
        fence = txlog.fences[0]
        victim = MANY[-3]  # updated in the fenced range; its repaired update comes late
        store = h.broker.sow.topics.store("orders")
        assert store is not None
        deleted_while_running: list[bool] = []

        async def delete_mid_way() -> None:
            # one step of the loop at a time, as the refold applies one key per step
            while orjson.loads(sow_state(h)["k1"][0])["v"] != 2:
                await asyncio.sleep(0)
            deleted_while_running.append(bool(pipeline.unfolded))
            record = store.get(victim)
            assert record is not None and orjson.loads(record.body)["v"] == 1
            removed, failure = h.broker.sow.deletes.remove(store, [record], DELETED)
            assert (removed, failure) == (1, None)

        deleter = asyncio.create_task(delete_mid_way())
        await txlog.fill_fence(fence.first_seq, lost)
        # the refold reads the range in the log's threads, then applies a key per step
        # of the loop, with no virtual time; the deleter busy-waits for it, so nothing
        # may settle the loop (moving the clock does) before it is done
        await asyncio.wait_for(deleter, timeout=60)
        await drive(h.clock, lambda: not pipeline.unfolded)
        # the fold of the whole log reads durable records: the live delete's too
        await drive(h.clock, lambda: h.durable_seq == h.last_seq)
        assert deleted_while_running == [True], "the delete did not come between two parts"
        state = sow_state(h)
        assert victim not in state
        assert state == await folded_sow(h)
    finally:
        await h.__aexit__(None, None, None)
