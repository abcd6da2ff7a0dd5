"""Where a bookmark is: as published, and as delivered (a delayed message at its due record).

Random logs of publishes, scheduled records and due records written at or after their due
times, in any order and some never, on a virtual clock; the oracle is the list of records
written. Every lookup - from memory, with blocking reads, in a worker thread, through a
replay planning's prefetched view, on the running log and after a reopen (files only) -
must give what the model says: as published, the record the message was recorded as; as
delivered, its due record when the log holds it, else its scheduled record.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spool.server.clock import VirtualClock, time_us
from spool.server.txlog import TransactionLog
from spool.server.txlog.format.record import DUE_KEY, RecordKind, schedule_field
from spool.server.txlog.read.locator import MAX_DUE_BLOCKS
from spool.server.txlog.storage.search import SpanQuery
from tests.unit.txlog.helpers import INSTANCE, config, run

KW: dict[str, Any] = {"topic": "t", "message_type": "json"}


@dataclass(slots=True)
class Written:
    seq: int
    ts: int
    kind: RecordKind
    pub: int
    ps: int
    due: int | None = None


def _open(tmp: Path, clock: VirtualClock, tail: int) -> TransactionLog:
    cfg = config(tmp, journal_size=8192, preallocated=0, flush_interval=0)
    return TransactionLog(cfg, INSTANCE, clock=clock, block_bytes=512, tail_cache_bytes=tail)


class Model:
    """The log and the records it was given."""

    def __init__(self, log: TransactionLog, clock: VirtualClock) -> None:
        self.log = log
        self.clock = clock
        self.written: list[Written] = []
        self.last: dict[int, int] = {}
        self.pending: list[Written] = []

    def _note(self, kind: RecordKind, pub: int, ps: int, due: int | None = None) -> Written:
        w = Written(self.log.last_seq, self.log.last_timestamp_us, kind, pub, ps, due)
        self.written.append(w)
        return w

    def publish(self, pub: int) -> None:
        ps = self.last[pub] = self.last.get(pub, 0) + 1
        assert self.log.append_many(**KW, pub_hash=pub, pub_seqs=[ps], bodies=[b"{}"]) == 1
        self._note(RecordKind.PUBLISH, pub, ps)

    def schedule(self, pub: int, delay_us: int) -> None:
        ps = self.last[pub] = self.last.get(pub, 0) + 1
        due = time_us(self.clock) + delay_us
        field = schedule_field(due, "")
        assert self.log.append_many(
            **KW, pub_hash=pub, pub_seqs=[ps], bodies=[b"{}"], sow_keys=[field],
            kind=RecordKind.SCHEDULED,
        ) == 1  # fmt: skip
        self.pending.append(self._note(RecordKind.SCHEDULED, pub, ps, due))

    def deliver(self, pick: list[int]) -> None:
        """Due records of some of the messages due by now, in the order ``pick`` says."""
        now = time_us(self.clock)
        ready = [w for w in self.pending if w.due is not None and w.due <= now]
        for i in pick:
            if not ready:
                return
            w = ready.pop(i % len(ready))
            self.pending.remove(w)
            assert self.log.append_due(**KW, pub_hash=w.pub, pub_seqs=[w.ps], bodies=[b"{}"]) == 1
            self._note(RecordKind.DUE, w.pub, w.ps)

    def published(self, pub: int, ps: int) -> Written | None:
        return next(
            (w for w in self.written if (w.pub, w.ps) == (pub, ps) and w.kind != RecordKind.DUE),
            None,
        )

    def delivered(self, pub: int, ps: int) -> int | None:
        """The oracle: the due record of a scheduled message, else its record."""
        w = self.published(pub, ps)
        if w is None:
            return None
        if w.kind != RecordKind.SCHEDULED:
            return w.seq
        due = next(
            (
                d.seq
                for d in self.written
                if d.kind == RecordKind.DUE and (d.pub, d.ps) == (pub, ps)
            ),
            None,
        )
        return due if due is not None else w.seq

    def bookmarks(self) -> list[tuple[int, int]]:
        return sorted({(w.pub, w.ps) for w in self.written} | {(9, 1), (7, 10**6)})


async def _check(m: Model) -> None:
    log = m.log
    await log.wait_durable(log.last_seq)
    marks = m.bookmarks()
    located = await log.locate_all(marks, [])
    view = log.with_lookups(located)
    for pub, ps in marks:
        w = m.published(pub, ps)
        published = None if w is None else w.seq
        delivered = m.delivered(pub, ps)
        assert log.seq_for_bookmark(pub, ps, delivered=False) == published, (pub, ps)
        assert await log.locate_bookmark(pub, ps) == published, (pub, ps)
        assert log.seq_for_bookmark(pub, ps) == delivered, (pub, ps)
        assert await log.locate_bookmark(pub, ps, delivered=True) == delivered, (pub, ps)
        assert located.bookmarks[(pub, ps)] == delivered
        assert view.seq_for_bookmark(pub, ps) == delivered
        memory = log._locator.bookmark_in_memory(pub, ps, delivered=True)
        assert isinstance(memory, SpanQuery) or memory == delivered
    assert log.lookups_need_io(marks, []) == any(
        isinstance(log._locator.bookmark_in_memory(h, s, delivered=True), SpanQuery)
        for h, s in marks
    )


steps = st.lists(
    st.one_of(
        st.tuples(st.just("publish"), st.sampled_from([7, 8]), st.integers(1, 4)),
        st.tuples(st.just("schedule"), st.sampled_from([7, 8]), st.integers(0, 3_000_000)),
        st.tuples(st.just("advance"), st.integers(1, 2_000_000)),
        st.tuples(st.just("deliver"), st.lists(st.integers(0, 50), max_size=6)),
    ),
    min_size=1,
    max_size=40,
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(script=steps, tail=st.sampled_from([0, 1 << 20]))
def test_a_bookmark_is_found_as_published_and_as_delivered(
    tmp_path_factory: pytest.TempPathFactory, script: list[tuple[Any, ...]], tail: int
) -> None:
    tmp = tmp_path_factory.mktemp("due")

    async def body() -> None:
        clock = VirtualClock()
        m = Model(_open(tmp, clock, tail), clock)
        await m.log.open()
        for step in script:
            match step:
                case ("publish", pub, n):
                    for _ in range(n):
                        m.publish(pub)
                case ("schedule", pub, delay):
                    m.schedule(pub, delay)
                case ("advance", dt):
                    await clock.advance(dt / 1e6)
                case ("deliver", pick):
                    m.deliver(pick)
        await _check(m)
        await m.log.close()
        m.log = _open(tmp, clock, tail)  # the files alone answer now
        await m.log.open()
        await _check(m)
        await m.log.close()

    run(body)


def test_a_due_record_written_long_after_its_due_time_resumes_at_the_scheduled_record(
    tmp_path: Path,
) -> None:
    """More blocks of due records than the search reads lie between the due time and the
    due record (it was written after downtime, behind many others): the answer is the
    scheduled record, earlier than where the message was delivered, never later."""

    async def body() -> None:
        clock = VirtualClock()
        m = Model(_open(tmp_path, clock, 1 << 20), clock)
        await m.log.open()
        m.schedule(7, 1_000_000)  # the one looked for
        for _ in range(600):  # others, due at the same time
            m.schedule(8, 1_000_000)
        await clock.advance(2.0)
        late = m.pending.pop(0)
        m.deliver([0] * 600)
        m.pending.append(late)
        m.deliver([0])
        blocks = sum(
            1
            for j in m.log._journals.items
            for _span in j.index.spans_from(DUE_KEY, m.written[0].seq, 1000)
        )
        assert blocks > MAX_DUE_BLOCKS
        scheduled = m.written[0].seq
        assert m.log.seq_for_bookmark(7, 1) == scheduled
        assert await m.log.locate_bookmark(7, 1, delivered=True) == scheduled
        # a message of 8 delivered in time is found at its due record
        first = m.published(8, 1)
        assert first is not None and m.log.seq_for_bookmark(8, 1) == m.delivered(8, 1) > first.seq
        await m.log.close()

    run(body)


def test_a_due_record_is_searched_from_its_due_time(tmp_path: Path) -> None:
    """Due records of other messages written before the due time are not read: the search
    starts at the first record stamped at the due time."""

    async def body() -> None:
        clock = VirtualClock()
        m = Model(_open(tmp_path, clock, 0), clock)
        await m.log.open()
        m.schedule(7, 60_000_000)
        for _ in range(1000):  # more blocks of earlier due records than the search reads
            m.schedule(8, 0)
            m.deliver([0])
        await clock.advance(61.0)
        m.deliver([0])
        assert m.log.seq_for_bookmark(7, 1) == m.written[-1].seq
        await m.log.close()

    run(body)


def test_old_lookups_are_unchanged_without_delayed_messages(tmp_path: Path) -> None:
    """A log without scheduled records: both lookups are the lookup as it always was."""

    async def body() -> None:
        clock = VirtualClock()
        m = Model(_open(tmp_path, clock, 0), clock)
        await m.log.open()
        for i in range(300):
            m.publish(7 if i % 3 else 8)
        await _check(m)
        for pub, ps in m.bookmarks():
            assert m.log.seq_for_bookmark(pub, ps) == m.log.seq_for_bookmark(
                pub, ps, delivered=False
            )
        await m.log.close()

    run(body)


def test_a_lookup_as_published_never_takes_a_due_record(tmp_path: Path) -> None:
    """A block of late records whose range covers a scheduled message's sequence may hold
    that message's due record: it is not the record the message was published as, even
    when memory holds that block and the scheduled record must be read from its file."""

    async def body() -> None:
        cfg = config(tmp_path, journal_size=64 * 1024, preallocated=0, flush_interval=0)
        log = TransactionLog(
            cfg, INSTANCE, clock=VirtualClock(), block_bytes=1024, tail_cache_bytes=0,
            track_gaps=True,
        )  # fmt: skip
        await log.open()
        kw = {**KW, "pub_hash": 7, "bodies": [b"{}"]}
        index = log._journals.items[-1].index

        def close_block() -> None:
            blocks = index.block_count
            while index.block_count == blocks:
                log.append_many(**{**kw, "pub_hash": 8}, pub_seqs=[log.publisher_last(8) + 1])

        log.append_many(**kw, pub_seqs=[1])
        log.append_many(**kw, pub_seqs=[5], sow_keys=[schedule_field(0, "")],
                        kind=RecordKind.SCHEDULED)  # fmt: skip
        scheduled = log.last_seq
        log.append_many(**kw, pub_seqs=[9])
        close_block()
        await log.wait_durable(log.last_seq)  # that block is in its file only now
        log.append(topic="t", message_type="json", pub_hash=7, pub_seq=2, body=b"{}", late=True)
        assert log.append_due(**kw, pub_seqs=[5]) == 1
        due = log.last_seq
        log.append(topic="t", message_type="json", pub_hash=7, pub_seq=7, body=b"{}", late=True)
        close_block()  # a block in memory whose late range (2..7) covers 5
        plans = log._locator._plans(7, 5)
        assert [p.span.seq < log._tail.first for p in plans] == [True, False]
        memory = log._locator.bookmark_in_memory(7, 5)
        assert isinstance(memory, SpanQuery) and memory.span.seq <= scheduled
        assert log.seq_for_bookmark(7, 5, delivered=False) == scheduled
        assert log.seq_for_bookmark(7, 5) == due
        await log.close()

    run(body)
