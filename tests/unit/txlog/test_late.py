"""Late records: a publisher's message appended below its highest sequence, filling a gap.

The oracle is the set of bookmarks each publisher has in the log. Through appends in
order (with jumps), late fills, rolls, clean reopens and crashes (``abort``), the log must
say exactly which sequences are missing (``publishers.missing``), find every held bookmark
(``seq_for_bookmark`` / ``locate_bookmark``, own key or late key), refuse a second copy of
a late record, and keep the publisher's highest where it was.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from spool.server.txlog import PublisherSequenceRegression, TransactionLog
from spool.server.txlog.format.record import FLAG_LATE
from tests.unit.txlog.helpers import INSTANCE, config, read_all, run

PUBS = (101, 202)


def _open(tmp: Path) -> TransactionLog:
    return TransactionLog(
        config(tmp, journal_size=4096, preallocated=0), INSTANCE, track_gaps=True, block_bytes=512
    )


def _append(log: TransactionLog, pub: int, s: int, *, late: bool = False) -> None:
    log.append(
        topic="t", message_type="json", pub_hash=pub, pub_seq=s, body=b'{"s":%d}' % s, late=late
    )


def test_a_late_copy_fills_its_gap_once_and_is_found(tmp_path: Path) -> None:
    async def body() -> None:
        log = _open(tmp_path)
        await log.open()
        for s in range(1, 100):
            _append(log, 7, s)
        _append(log, 7, 101)  # B's copy of 101 before A's 100
        assert log.publishers.missing(7, 100)
        assert not log.publishers.missing(7, 99)
        _append(log, 7, 100, late=True)
        assert log.publisher_last(7) == 101
        assert not log.publishers.missing(7, 100)
        with pytest.raises(PublisherSequenceRegression):
            _append(log, 7, 100, late=True)  # a second copy is a duplicate
        with pytest.raises(PublisherSequenceRegression):
            _append(log, 7, 50, late=True)  # never missing
        await log.wait_durable(log.last_seq)
        late_seq = log.seq_for_bookmark(7, 100)
        assert late_seq == log.last_seq
        records = [r for b in await read_all(log) for r in b]
        assert records[-1].pub_seq == 100 and records[-1].flags & FLAG_LATE
        await log.close()
        reopened = _open(tmp_path)
        await reopened.open()
        assert reopened.seq_for_bookmark(7, 100) == late_seq
        assert await reopened.locate_bookmark(7, 101) == late_seq - 1
        assert reopened.publisher_last(7) == 101
        assert not reopened.publishers.missing(7, 100)
        await reopened.close()

    run(body)


def test_without_gap_tracking_late_appends_are_refused(tmp_path: Path) -> None:
    async def body() -> None:
        log = TransactionLog(config(tmp_path), INSTANCE)
        await log.open()
        _append(log, 7, 1)
        _append(log, 7, 3)
        assert not log.publishers.missing(7, 2)
        with pytest.raises(PublisherSequenceRegression):
            _append(log, 7, 2, late=True)
        await log.close()

    run(body)


def test_holdings_report_the_highest_and_the_gaps(tmp_path: Path) -> None:
    async def body() -> None:
        log = _open(tmp_path)
        await log.open()
        for s in (3, 4, 5, 9):
            _append(log, 7, s)
        _append(log, 8, 1)
        assert log.publishers.holdings() == {7: (9, [(1, 2), (6, 8)]), 8: (1, [])}
        await log.close()

    run(body)


class LateMachine(RuleBasedStateMachine):
    """Appends, late fills, reopen and crash against the set of held bookmarks."""

    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="spool-late-"))
        self.loop = asyncio.new_event_loop()
        self.log = _open(self.tmp)
        self.loop.run_until_complete(self.log.open())
        self.held: dict[int, set[int]] = {p: set() for p in PUBS}
        self.durable: dict[int, set[int]] = {p: set() for p in PUBS}

    def teardown(self) -> None:
        self.loop.run_until_complete(self.log.close())
        self.loop.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def _last(self, pub: int) -> int:
        return max(self.held[pub], default=0)

    @rule(pub=st.sampled_from(PUBS), steps=st.lists(st.integers(1, 3), min_size=1, max_size=8))
    def append_in_order(self, pub: int, steps: list[int]) -> None:
        s = self._last(pub)
        seqs = []
        for step in steps:
            s += step
            seqs.append(s)
        appended = self.log.append_many(
            topic="t", message_type="json", pub_hash=pub, pub_seqs=seqs,
            bodies=[b"{}"] * len(seqs),
        )  # fmt: skip
        assert appended == len(seqs)
        self.held[pub].update(seqs)

    @rule(pub=st.sampled_from(PUBS), data=st.data())
    def late(self, pub: int, data: st.DataObject) -> None:
        last = self._last(pub)
        if last < 2:
            return
        s = data.draw(st.integers(1, last - 1))
        if s in self.held[pub]:
            with pytest.raises(PublisherSequenceRegression):
                _append(self.log, pub, s, late=True)
        else:
            _append(self.log, pub, s, late=True)
            self.held[pub].add(s)

    @rule()
    def sync(self) -> None:
        self.loop.run_until_complete(self.log.wait_durable(self.log.last_seq))
        self.durable = {p: set(v) for p, v in self.held.items()}

    @rule()
    def reopen(self) -> None:
        self.loop.run_until_complete(self.log.close())
        self.log = _open(self.tmp)
        self.loop.run_until_complete(self.log.open())
        self.durable = {p: set(v) for p, v in self.held.items()}

    @precondition(lambda self: True)
    @rule()
    def crash(self) -> None:
        """What was not durable is gone (abort drops the pending appends)."""
        self.loop.run_until_complete(self.log.abort())
        self.log = _open(self.tmp)
        self.loop.run_until_complete(self.log.open())
        # a group commit may have completed after the last sync: read what survived
        survived: dict[int, set[int]] = {p: set() for p in PUBS}
        for batch in self.loop.run_until_complete(read_all(self.log)):
            for i in range(len(batch)):
                survived[batch.pub_hashes[i]].add(batch.pub_seqs[i])
        for p in PUBS:
            assert self.durable[p] <= survived[p] <= self.held[p]
        self.held = survived
        self.durable = {p: set(v) for p, v in survived.items()}

    @invariant()
    def gaps_match_the_oracle(self) -> None:
        for pub in PUBS:
            last = self._last(pub)
            assert self.log.publisher_last(pub) == last
            for s in range(1, last + 2):
                assert self.log.publishers.missing(pub, s) == (
                    s <= last and s not in self.held[pub]
                )

    @invariant()
    def every_held_bookmark_is_found(self) -> None:
        self.loop.run_until_complete(self.log.wait_durable(self.log.last_seq))
        for pub in PUBS:
            for s in self.held[pub]:
                seq = self.loop.run_until_complete(self.log.locate_bookmark(pub, s))
                assert seq is not None, (pub, s)
                batch = self.loop.run_until_complete(self.log.read_view(seq, max_count=1))
                assert (batch.pub_hashes[0], batch.pub_seqs[0]) == (pub, s)


TestLateMachine = LateMachine.TestCase
TestLateMachine.settings = settings(max_examples=25, stateful_step_count=25, deadline=None)


def test_resync_starts_at_the_oldest_journal_holding_what_the_other_side_lacks(
    tmp_path: Path,
) -> None:
    async def body() -> None:
        log = _open(tmp_path)
        await log.open()
        for s in range(1, 301):
            _append(log, 7, s)
            if s % 3 == 0:
                _append(log, 8, s // 3)
        await log.wait_durable(log.last_seq)
        journals = [j for j in log.journals() if j.state != "preallocated"]
        assert len(journals) >= 3, journals  # small journals: it rolled
        everything = {7: (300, []), 8: (100, [])}
        assert log.resync_start(everything) == log.last_seq + 1
        assert log.resync_start({7: (300, [])}) == journals[0].id  # lacks publisher 8
        assert log.resync_start({}) == journals[0].id
        # lacks 7's 250..260 only: the journal that holds them (or an older one)
        start = log.resync_start({7: (300, [(250, 260)]), 8: (100, [])})
        holder = log.seq_for_bookmark(7, 250)
        assert holder is not None
        assert start <= holder
        assert start > journals[0].id  # not from the beginning
        # lacks only what comes after 290
        start = log.resync_start({7: (290, []), 8: (100, [])})
        assert start <= log.seq_for_bookmark(7, 291)  # type: ignore[operator]
        await log.close()

    run(body)


def test_a_late_record_above_the_publishers_other_records_stays_its_highest(
    tmp_path: Path,
) -> None:
    """A publisher's highest moved past what the log holds (the instance's own identity
    after a lost tail), then a late record in that gap, then a crash: after the reopen
    the late record still counts as held, and a second copy of it is a duplicate."""

    async def body() -> None:
        log = _open(tmp_path)
        await log.open()
        for s in (1, 2, 3):
            _append(log, 7, s)
        log.publishers.skip(7, 2)  # 4 and 5 may exist elsewhere
        _append(log, 7, 4, late=True)
        await log.wait_durable(log.last_seq)
        await log.abort()  # a crash: no publisher table written at close
        reopened = _open(tmp_path)
        await reopened.open()
        assert reopened.publisher_last(7) >= 4
        assert reopened.holds(7, 4)
        with pytest.raises(PublisherSequenceRegression):
            _append(reopened, 7, 4)  # the copy from another route
        await reopened.close()

    run(body)
