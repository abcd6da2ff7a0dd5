"""The due-time index (server/delayed/dueindex.py): a hypothesis state machine against a
sorted list, scenarios, and what an entry costs in memory."""

from __future__ import annotations

import bisect
import gc
import random
import tracemalloc

import pytest
from hypothesis import assume, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from spool.server.delayed.dueindex import SEQ_BLOCK, DueEntries, DueEntry, DueIndex

S = 1_000_000  # one second in microseconds
HOUR = 3600 * S
DAY = 24 * HOUR
START = 1_763_000_000 * S  # a wall-clock time in microseconds
U64 = 2**64 - 1

#: due times relative to now: past, the next seconds, within the hour, the day, the week,
#: and the boundaries of seconds, minutes, hours and days
OFFSETS = st.one_of(
    st.integers(-HOUR, 0),
    st.integers(0, 3 * S),
    st.integers(0, HOUR),
    st.integers(HOUR, DAY),
    st.integers(DAY, 8 * DAY),
    st.sampled_from([0, 1, S - 1, S, 60 * S, HOUR, DAY, 7 * DAY]),
)
#: how far the next seq is from the last: the next record, or a block or more later
GAPS = st.one_of(st.integers(1, 5), st.sampled_from([SEQ_BLOCK - 1, SEQ_BLOCK, 3 * SEQ_BLOCK]))
#: how far time moves: not at all, a tick, to the next bucket-sized boundary, days
STEPS = st.one_of(
    st.sampled_from([0, 1, S, 60 * S, HOUR, DAY]),
    st.integers(0, 5 * S),
    st.integers(0, 2 * DAY),
)


class DueIndexModel(RuleBasedStateMachine):
    """The index against a sorted list of the same entries."""

    def __init__(self) -> None:
        super().__init__()
        self.index = DueIndex()
        self.model: list[DueEntry] = []
        #: every seq ever added: a log position names one record
        self.used: set[int] = set()
        self.now = START
        self.last_seq = 0

    @initialize(load=st.sampled_from([1, 2, 4, 512]))
    def build(self, load: int) -> None:
        self.index = DueIndex(load=load)

    def _add(self, due: int, seq: int, pub_hash: int, pub_seq: int) -> None:
        self.used.add(seq)
        self.index.add(due, seq, pub_hash, pub_seq)
        bisect.insort(self.model, (due, seq, pub_hash, pub_seq))

    def _next_seq(self, gap: int) -> int:
        self.last_seq += gap
        while self.last_seq in self.used:
            self.last_seq += 1
        return self.last_seq

    @rule(offset=OFFSETS, gap=GAPS, pub_hash=st.integers(0, U64), pub_seq=st.integers(0, U64))
    def add(self, offset: int, gap: int, pub_hash: int, pub_seq: int) -> None:
        self._add(self.now + offset, self._next_seq(gap), pub_hash, pub_seq)

    @rule(data=st.data(), gap=GAPS)
    def add_at_a_pending_due_time(self, data: st.DataObject, gap: int) -> None:
        assume(self.model)
        due = data.draw(st.sampled_from(self.model))[0]
        self._add(due, self._next_seq(gap), 7, self.last_seq)

    @rule(offset=OFFSETS, seq=st.integers(1, 4 * SEQ_BLOCK))
    def add_an_earlier_seq(self, offset: int, seq: int) -> None:
        """Entries need not come in seq order (recovery, a repaired record)."""
        assume(seq not in self.used)
        self._add(self.now + offset, seq, 1, seq)

    @rule(offset=OFFSETS, spread=st.sampled_from([0, 1, S, HOUR]), n=st.integers(1, 40))
    def add_a_burst(self, offset: int, spread: int, n: int) -> None:
        """Many entries at once: chunks fill and split."""
        rnd = random.Random(n * 31 + spread)
        for _ in range(n):
            self._add(self.now + offset + rnd.randint(0, spread), self._next_seq(1), 3, n)

    @rule(step=STEPS)
    def advance(self, step: int) -> None:
        self.now += step

    @rule(limit=st.integers(1, 50), behind=st.sampled_from([0, 0, 0, 1, S]))
    def pop_due(self, limit: int, behind: int) -> None:
        """``behind``: the wall clock stepped back since the last call."""
        now = self.now - behind
        popped = self.index.pop_due(now, limit)
        due = [e for e in self.model if e[0] <= now]
        assert popped == due[:limit]  # in order, nothing not due
        if len(popped) < limit:
            assert len(popped) == len(due)  # nothing due left
        del self.model[: len(popped)]

    @rule(size=st.integers(1, 30))
    def page_through(self, size: int) -> None:
        pages: list[DueEntry] = []
        after: tuple[int, int] | None = None
        while page := self.index.upcoming(after, size):
            assert len(page) <= size
            assert after is None or (page[0][0], page[0][1]) > after  # moves on
            pages.extend(page)
            after = (page[-1][0], page[-1][1])
        assert pages == self.model

    @rule(data=st.data(), limit=st.integers(0, 30), nudge=st.sampled_from([-1, 0, 1]))
    def upcoming_after(self, data: st.DataObject, limit: int, nudge: int) -> None:
        """From any position: an entry's own, or between and around entries."""
        if len(self.model) > 0 and data.draw(st.booleans()):
            due, seq = data.draw(st.sampled_from(self.model))[:2]
            after = (due, seq + nudge)
        else:
            after = (self.now + data.draw(OFFSETS), data.draw(st.integers(0, self.last_seq + 1)))
        expected = [e for e in self.model if (e[0], e[1]) > after][:limit]
        assert self.index.upcoming(after, limit) == expected

    @invariant()
    def agrees(self) -> None:
        index, model = self.index, self.model
        assert len(index) == len(model)
        assert index.peek() == (model[0][0] if model else None)
        entries = index.entries()
        assert isinstance(entries, DueEntries) and len(entries) == len(model)
        assert list(entries) == model
        bound = index.lowest_seq_bound()
        if not model:
            assert bound is None
        else:
            low = min(e[1] for e in model)
            assert bound is not None and bound <= low < bound + SEQ_BLOCK


TestDueIndexModel = DueIndexModel.TestCase
TestDueIndexModel.settings = settings(max_examples=150, stateful_step_count=60)


def test_equal_due_times_come_out_in_seq_order_whatever_the_order_added() -> None:
    index = DueIndex(load=1)
    for seq in (5, 2, 9, 1, 7):
        index.add(START, seq, seq, seq)
    index.add(START - 1, 100, 0, 0)
    assert [e[1] for e in index.upcoming(None, 10)] == [100, 1, 2, 5, 7, 9]
    assert [e[1] for e in index.pop_due(START, 3)] == [100, 1, 2]
    assert [e[1] for e in index.pop_due(START, 10)] == [5, 7, 9]
    assert len(index) == 0 and index.peek() is None and index.lowest_seq_bound() is None


def test_nothing_is_popped_before_its_due_time() -> None:
    index = DueIndex()
    index.add(START + S, 1, 0, 0)
    assert index.pop_due(START + S - 1, 10) == []
    assert index.pop_due(START + S, 10) == [(START + S, 1, 0, 0)]


def test_the_seq_bound_follows_the_lowest_block_still_pending() -> None:
    index = DueIndex()
    index.add(START + 2, 3 * SEQ_BLOCK + 5, 0, 0)
    index.add(START + 1, SEQ_BLOCK + 9, 0, 0)
    index.add(START + 3, SEQ_BLOCK + 10, 0, 0)
    assert index.lowest_seq_bound() == SEQ_BLOCK
    index.pop_due(START + 2, 10)  # block 1 keeps seq SEQ_BLOCK + 10
    assert index.lowest_seq_bound() == SEQ_BLOCK
    index.pop_due(START + 3, 10)
    assert index.lowest_seq_bound() is None


def test_entries_are_a_copy() -> None:
    index = DueIndex()
    index.add(START, 1, 2, 3)
    entries = index.entries()
    index.add(START - 1, 4, 5, 6)
    index.pop_due(START, 10)
    assert list(entries) == [(START, 1, 2, 3)]


def test_entries_of_rows_are_sorted() -> None:
    rows = [(3, 1, 0, 0), (1, 9, U64, U64), (1, 2, 0, 0)]
    assert list(DueEntries.of(rows)) == sorted(rows)


def test_values_out_of_64_bits_are_refused() -> None:
    index = DueIndex()
    with pytest.raises(OverflowError):
        index.add(START, 1, U64 + 1, 0)
    with pytest.raises(OverflowError):
        index.add(START, 1, -1, 0)


#: a generous bound: the columns take 32 bytes an entry, their growth and chunks a little more
BYTES_PER_ENTRY_BOUND = 40


def test_an_entry_takes_about_32_bytes() -> None:
    n = 100_000
    rnd = random.Random(5)
    rows = [
        (START + rnd.randrange(7 * DAY), seq, rnd.getrandbits(64), seq) for seq in range(1, n + 1)
    ]
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        index = DueIndex()
        for row in rows:
            index.add(*row)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(index) == n
    per_entry = held / n
    assert per_entry <= BYTES_PER_ENTRY_BOUND, f"{per_entry:.1f} bytes an entry"
