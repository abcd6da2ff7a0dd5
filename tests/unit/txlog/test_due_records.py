"""Due records in the log: ``append_due``, the key they are indexed under, and what they
must leave alone.

A due record repeats the bookmark of a scheduled record the log already holds, long after
its publisher's later messages. The oracle is what the log holds per publisher: its
highest sequence, its gaps, where each bookmark was first recorded. Through publishes
(with jumps), late fills, scheduled records, due records in any order, journal rolls,
reopens, crashes and indexes rebuilt from the journals, the publisher table, the gap
table, bookmark lookups and resyncs must say what they said without the due records,
and the index must file every due record under ``DUE_KEY`` with its own seq.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
from dataclasses import astuple
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from spool.server.clock import VirtualClock
from spool.server.txlog import TransactionLog
from spool.server.txlog.cli import register
from spool.server.txlog.format.record import (
    DUE_KEY,
    FLAG_LATE,
    Record,
    RecordKind,
    is_publisher_key,
    late_key,
    schedule_field,
)
from spool.server.txlog.publishers.holdings import plan_held
from spool.server.txlog.publishers.table import Holdings
from spool.server.txlog.storage.journal import Journal
from tests.support.damage import flip_byte, journals, records_of, remove_journal
from tests.support.wait import async_wait_until
from tests.unit.txlog.helpers import INSTANCE, config, read_all, run

PUBS = (101, 202)
T0 = 1_764_547_200_000_000


def _open(tmp: Path, **kw: int) -> TransactionLog:
    return TransactionLog(
        config(tmp, journal_size=4096, preallocated=0, **kw), INSTANCE, track_gaps=True,
        block_bytes=512,
    )  # fmt: skip


def _schedule(log: TransactionLog, pub: int, pub_seq: int, due_us: int, field: str = "") -> int:
    """Append one scheduled record; its seq."""
    assert log.append_many(
        topic="t", message_type="json", pub_hash=pub, pub_seqs=[pub_seq],
        bodies=[b'{"s":%d}' % pub_seq], sow_keys=[schedule_field(due_us, field)],
        kind=RecordKind.SCHEDULED,
    ) == 1  # fmt: skip
    return log.last_seq


def _journals(log: TransactionLog) -> list[Journal]:
    return list(log._journals.items)


async def _records(log: TransactionLog) -> list[Record]:
    """Every record of the log, once all are durable."""
    await log.wait_durable(log.last_seq)
    return [r for b in await read_all(log) for r in b]


def test_a_due_record_repeats_its_bookmark_under_its_own_key(tmp_path: Path) -> None:
    async def body() -> None:
        log = _open(tmp_path)
        await log.open()
        kw: dict[str, Any] = {"topic": "t", "message_type": "json", "pub_hash": 7}
        assert log.append_many(**kw, pub_seqs=[1, 2, 3], bodies=[b"a", b"b", b"c"]) == 3
        scheduled = _schedule(log, 7, 4, T0, "k1")
        assert log.append_many(**kw, pub_seqs=[5], bodies=[b"e"]) == 1
        table, holdings = dict(log.publishers.table), log.publishers.holdings()
        assert log.append_due(**kw, pub_seqs=[4], bodies=[b'{"s":4}'], sow_keys=["k1"]) == 1
        due = log.last_seq
        assert log.publishers.table == table and log.publishers.holdings() == holdings
        assert log.publisher_last(7) == 5 and not log.publishers.missing(7, 4)
        assert await log.locate_bookmark(7, 4) == scheduled  # where it was published
        await log.wait_durable(due)
        (record,) = await log.read_batch(due)
        assert (record.kind, record.pub_hash, record.pub_seq, record.flags) == (
            RecordKind.DUE,
            7,
            4,
            0,
        )
        assert (record.topic, record.body, record.sow_key) == ("t", b'{"s":4}', "k1")
        (journal,) = _journals(log)
        summary = journal.index.publisher(DUE_KEY)
        assert summary is not None
        assert (summary.min_pub_seq, summary.max_pub_seq, summary.count) == (due, due, 1)
        # a next message of the publisher is still a next one
        assert log.append_many(**kw, pub_seqs=[5], bodies=[b"again"]) == 0
        assert log.append_many(**kw, pub_seqs=[6], bodies=[b"f"]) == 1
        await log.close()

    run(body)


def test_append_due_refuses_what_the_log_refuses(tmp_path: Path) -> None:
    async def body() -> None:
        size = 4096
        log = TransactionLog(
            config(tmp_path, journal_size=size, preallocated=0, max_size=2 * size + 10,
                   flush_interval=0),
            INSTANCE, clock=VirtualClock(), block_bytes=512,
        )  # fmt: skip
        await log.open()
        kw: dict[str, Any] = {"topic": "t", "message_type": "json", "pub_hash": 7}
        assert log.append_due(**kw, pub_seqs=[], bodies=[]) == 0
        # a field that does not fit ends the run before it
        assert (
            log.append_due(**kw, pub_seqs=[1, 2], bodies=[b"a", b"b"], corr_ids=["x", "y" * 70_000])
            == 1
        )
        total = 1
        while (got := log.append_due(**kw, pub_seqs=[1] * 10, bodies=[b"x" * 100] * 10)) == 10:
            total += got
        total += got
        assert log.last_seq == total  # MaxSize: the records before the refused roll went in
        assert log.append_due(**kw, pub_seqs=[1], bodies=[b"x" * 100]) == 0
        assert log.publishers.table == {}
        await log.close()
        assert log.append_due(**kw, pub_seqs=[1], bodies=[b"x"]) == 0  # closed

    run(body)


def test_a_journal_of_due_records_verifies_clean(tmp_path: Path) -> None:
    """``spool journal verify`` reads a log with scheduled and due records as intact."""

    async def body() -> None:
        log = _open(tmp_path)
        await log.open()
        for s in range(1, 60):
            _schedule(log, 7, s, T0 + s, "")
            if s % 3 == 0:
                log.append_due(topic="t", message_type="json", pub_hash=7, pub_seqs=[s - 1],
                               bodies=[b"{}"])  # fmt: skip
        await log.close()

    run(body)
    p = argparse.ArgumentParser(prog="spool")
    register(p.add_subparsers(dest="command", required=True))
    args = p.parse_args(["journal", "verify", str(tmp_path / "journal")])
    assert args.func(args) == 0


class DueMachine(RuleBasedStateMachine):
    """A log against what its publishers hold, with due records written in any order."""

    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="spool-due-"))
        self.loop = asyncio.new_event_loop()
        self.log = _open(self.tmp)
        self.loop.run_until_complete(self.log.open())
        #: (pub, pub_seq) -> seq of the record that holds it (publish, scheduled, late)
        self.held: dict[tuple[int, int], int] = {}
        #: scheduled bookmarks without a due record yet
        self.pending: list[tuple[int, int]] = []

    def teardown(self) -> None:
        self.loop.run_until_complete(self.log.close())
        self.loop.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def _last(self, pub: int) -> int:
        return max((s for p, s in self.held if p == pub), default=0)

    @rule(pub=st.sampled_from(PUBS), steps=st.lists(st.integers(1, 3), min_size=1, max_size=6))
    def publish(self, pub: int, steps: list[int]) -> None:
        s = self._last(pub)
        seqs = []
        for step in steps:
            s += step
            seqs.append(s)
        first = self.log.last_seq + 1
        assert self.log.append_many(
            topic="t", message_type="json", pub_hash=pub, pub_seqs=seqs,
            bodies=[b"{}"] * len(seqs),
        ) == len(seqs)  # fmt: skip
        self.held.update({(pub, ps): first + i for i, ps in enumerate(seqs)})

    @rule(pub=st.sampled_from(PUBS), step=st.integers(1, 2), due=st.integers(0, 10**6))
    def schedule(self, pub: int, step: int, due: int) -> None:
        ps = self._last(pub) + step
        self.held[(pub, ps)] = _schedule(self.log, pub, ps, T0 + due)
        self.pending.append((pub, ps))

    @rule(data=st.data())
    def deliver(self, data: st.DataObject) -> None:
        if not self.pending:
            return
        pub, ps = self.pending.pop(data.draw(st.integers(0, len(self.pending) - 1)))
        assert self.log.append_due(
            topic="t", message_type="json", pub_hash=pub, pub_seqs=[ps], bodies=[b"{}"]
        ) == 1  # fmt: skip

    @rule(pub=st.sampled_from(PUBS), data=st.data())
    def late(self, pub: int, data: st.DataObject) -> None:
        gaps = [s for s in range(1, self._last(pub)) if (pub, s) not in self.held]
        if not gaps:
            return
        s = data.draw(st.sampled_from(gaps))
        rec = self.log.append(
            topic="t", message_type="json", pub_hash=pub, pub_seq=s, body=b"{}", late=True
        )
        self.held[(pub, s)] = rec.seq

    @rule()
    def reopen(self) -> None:
        self.loop.run_until_complete(self.log.close())
        self.log = _open(self.tmp)
        self.loop.run_until_complete(self.log.open())

    @rule()
    def reindex(self) -> None:
        """Indexes and ``clients.ack`` are caches: rebuilt from the journals, the same."""
        self.reopen()
        before = self._index_rows()
        self.loop.run_until_complete(self.log.close())
        for p in (self.tmp / "journal").iterdir():
            if p.name.endswith((".index", ".clients.ack")):
                p.unlink()
        self.log = _open(self.tmp)
        self.loop.run_until_complete(self.log.open())
        assert self._index_rows() == before

    @rule()
    def crash(self) -> None:
        """What was not durable is gone: the model becomes what survived."""
        self.loop.run_until_complete(self.log.abort())
        self.log = _open(self.tmp)
        self.loop.run_until_complete(self.log.open())
        records = self.loop.run_until_complete(_records(self.log))
        kept = {(r.pub_hash, r.pub_seq): r.seq for r in records if r.kind is not RecordKind.DUE}
        assert kept.items() <= self.held.items()
        self.held = kept
        delivered = {(r.pub_hash, r.pub_seq) for r in records if r.kind is RecordKind.DUE}
        self.pending = [
            (r.pub_hash, r.pub_seq)
            for r in records
            if r.kind is RecordKind.SCHEDULED and (r.pub_hash, r.pub_seq) not in delivered
        ]

    def _index_rows(self) -> list[tuple[int, list[tuple[int, ...]]]]:
        """Each journal's keys: lowest and highest sequence, seq of the highest, count."""
        return [
            (j.base, sorted(astuple(p) for p in j.index.publishers())) for j in _journals(self.log)
        ]

    @invariant()
    def the_publishers_are_as_without_due_records(self) -> None:
        for pub in PUBS:
            last = self._last(pub)
            assert self.log.publisher_last(pub) == last
            held = {s for p, s in self.held if p == pub}
            for s in range(1, last + 2):
                assert self.log.publishers.missing(pub, s) == (s <= last and s not in held)
        assert DUE_KEY not in self.log.publishers.table
        # another instance that lacks nothing: no journal holds anything to resend to it
        everything: Holdings = {
            key: (1 << 62, []) for pub in self.log.publishers.table for key in (pub, late_key(pub))
        }
        assert self.log.resync_start(everything) == self.log.last_seq + 1

    @invariant()
    def every_bookmark_is_found_where_it_was_first_recorded(self) -> None:
        self.loop.run_until_complete(self.log.wait_durable(self.log.last_seq))
        for (pub, s), seq in self.held.items():
            assert self.loop.run_until_complete(self.log.locate_bookmark(pub, s)) == seq

    @invariant()
    def due_records_are_filed_under_their_own_key(self) -> None:
        """Each block's ``DUE_KEY`` range: the first and last due record's seqs in it, and
        how many; every other key a publisher's."""
        records = self.loop.run_until_complete(_records(self.log))
        due = {r.seq for r in records if r.kind is RecordKind.DUE}
        total = 0
        for j in _journals(self.log):
            for key, lo, hi, n, span in j.index.key_ranges():
                if key != DUE_KEY:
                    assert is_publisher_key(key)
                    continue
                assert lo in due and hi in due
                assert len([s for s in due if lo <= s <= hi]) == n
                assert span is None or span.seq <= lo <= hi < span.seq + span.count
                total += n
        assert total == len(due)
        assert all(not r.flags & FLAG_LATE for r in records if r.kind is RecordKind.DUE)


TestDueMachine = DueMachine.TestCase
TestDueMachine.settings = settings(max_examples=25, stateful_step_count=25, deadline=None)


def test_due_records_take_none_of_the_gap_rebuilds_block_reads(tmp_path: Path) -> None:
    """Due records scattered along the log make sparse ``DUE_KEY`` ranges: the gap rebuild
    at open reads no block for them, so its budget stays for a publisher's real gaps."""

    async def body() -> None:
        log = _open(tmp_path)
        await log.open()
        for s in range(1, 200):
            _schedule(log, 7, 2 * s, T0 + s)  # a gap of 7 at every odd sequence...
            log.append_many(topic="t", message_type="json", pub_hash=8, pub_seqs=[s],
                            bodies=[b"{}"])  # fmt: skip
            if s % 2:
                log.append_due(topic="t", message_type="json", pub_hash=7, pub_seqs=[2 * s],
                               bodies=[b"{}"])  # fmt: skip
        await log.close()
        log = _open(tmp_path)
        await log.open()
        plan = plan_held(_journals(log))
        assert DUE_KEY not in plan.held
        assert all(DUE_KEY not in ranges for _j, _span, ranges in plan.reads)
        # ...which the rebuilt gap table knows (with the budget: from the blocks' headers)
        assert log.publishers.missing(7, 3) and not log.publishers.missing(7, 4)
        await log.close()

    run(body)


def _kind_at(path: Path, offset: int) -> int:
    return path.read_bytes()[offset + 5]


@pytest.mark.parametrize("damage", ["flipped", "missing"])
def test_a_fence_over_due_records_asks_only_for_publishers_records(
    tmp_path: Path, damage: str
) -> None:
    """No peer holds this instance's due records, so a fence names none: its bookmarks
    are publishers' (by the index or by the neighbours), and a fence that lost a due
    record is never exact."""

    async def body() -> None:
        log = _open(tmp_path)
        await log.open()
        for s in range(1, 150):
            _schedule(log, 7, s, T0 + s)
            log.append_many(topic="t", message_type="json", pub_hash=8, pub_seqs=[s],
                            bodies=[b"{}"])  # fmt: skip
            log.append_due(topic="t", message_type="json", pub_hash=7, pub_seqs=[s],
                           bodies=[b"{}"])  # fmt: skip
        await log.close()

    run(body)
    files = journals(tmp_path / "journal", INSTANCE)
    assert len(files) > 3
    if damage == "flipped":
        hit = next(r for r in records_of(files[1])[5:] if _kind_at(files[1], r.offset) == 8)
        flip_byte(files[1], hit.offset + hit.length - 2)
    else:
        remove_journal(files[1], INSTANCE)

    async def reopened() -> None:
        log = _open(tmp_path)
        await log.open()
        log.start_scrub()
        assert log.scrub()
        await async_wait_until(lambda: log.scrub_status.passes, message="a scrub pass")
        (fence,) = log.fences
        assert not fence.exact
        assert fence.identities and all(is_publisher_key(k) for k, _lo, _hi in fence.identities)
        assert {k for k, _lo, _hi in fence.identities} <= {7, 8, log.own_pub_hash}
        await log.close()

    run(reopened)
