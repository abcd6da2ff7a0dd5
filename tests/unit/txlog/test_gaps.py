"""PublisherGaps against a set oracle: which sequences of a publisher the log is missing."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from spool.server.txlog import TransactionLog
from spool.server.txlog.publishers.gaps import PublisherGaps
from spool.server.txlog.publishers.holdings import HeldPlan, plan_held, read_held
from tests.unit.txlog.helpers import INSTANCE, config, fill, run

PUBS = (11, 22)


class GapsMachine(RuleBasedStateMachine):
    """Appends in order (with jumps) and late fills, checked against the held set."""

    def __init__(self) -> None:
        super().__init__()
        self.table = PublisherGaps(max_gaps=10_000)
        self.held: dict[int, set[int]] = {p: set() for p in PUBS}

    def _last(self, pub: int) -> int:
        return max(self.held[pub], default=0)

    @rule(pub=st.sampled_from(PUBS), steps=st.lists(st.integers(1, 4), min_size=1, max_size=6))
    def append_in_order(self, pub: int, steps: list[int]) -> None:
        last = self._last(pub)
        seqs = []
        s = last
        for step in steps:
            s += step
            seqs.append(s)
        self.table.advanced(pub, last, seqs)
        self.held[pub].update(seqs)

    @rule(pub=st.sampled_from(PUBS), data=st.data())
    def fill_late(self, pub: int, data: st.DataObject) -> None:
        last = self._last(pub)
        if last < 2:
            return
        s = data.draw(st.integers(1, last))
        was_missing = s not in self.held[pub]
        assert self.table.fill(pub, s) == was_missing
        self.held[pub].add(s)

    @rule(pub=st.sampled_from(PUBS), data=st.data())
    def lose(self, pub: int, data: st.DataObject) -> None:
        """Held sequences are lost (a fence): they are missing again."""
        last = self._last(pub)
        if last < 2:
            return
        lo = data.draw(st.integers(1, last - 1))
        hi = data.draw(st.integers(lo, last - 1))  # the highest stays held
        self.table.add(pub, lo, hi)
        self.held[pub].difference_update(range(lo, hi + 1))

    @invariant()
    def matches_the_oracle(self) -> None:
        for pub in PUBS:
            last = self._last(pub)
            for s in range(1, last + 3):
                expected = s <= last and s not in self.held[pub]
                assert self.table.missing(pub, s) == expected, (pub, s)

    @invariant()
    def rebuild_gives_the_same_gaps(self) -> None:
        held = [(p, [(s, s) for s in seqs]) for p, seqs in self.held.items()]
        rebuilt = PublisherGaps.rebuild_from(held)
        for pub in PUBS:
            assert rebuilt.gaps(pub) == self.table.gaps(pub)


TestGapsMachine = GapsMachine.TestCase
TestGapsMachine.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)


def test_the_cross_source_failover_case() -> None:
    """C holds 99, then B's 101 arrives (gap 100), then A's late 100 fills it."""
    gaps = PublisherGaps()
    gaps.advanced(7, 0, range(1, 100))
    gaps.advanced(7, 99, [101])
    assert gaps.missing(7, 100)
    assert not gaps.missing(7, 99) and not gaps.missing(7, 101)
    assert gaps.fill(7, 100)
    assert not gaps.missing(7, 100)
    assert gaps.gaps(7) == []
    assert not gaps.fill(7, 100)  # a second copy is a duplicate


def test_the_oldest_gaps_are_forgotten_past_the_bound() -> None:
    gaps = PublisherGaps(max_gaps=3)
    gaps.advanced(1, 0, [2, 4, 6, 8])  # gaps 1, 3, 5, 7
    assert gaps.gaps(1) == [(3, 3), (5, 5), (7, 7)]
    assert gaps.forgotten == 1
    assert not gaps.missing(1, 1)  # forgotten: counts as held


def test_a_fill_that_splits_the_newest_gap_keeps_the_bound() -> None:
    gaps = PublisherGaps(max_gaps=2)
    gaps.advanced(1, 0, [2, 10])  # gaps [1,1], [3,9]
    assert gaps.fill(1, 5)  # [3,4], [6,9]: three intervals, the oldest goes
    assert gaps.gaps(1) == [(3, 4), (6, 9)]
    assert gaps.forgotten == 1


@given(st.lists(st.tuples(st.integers(1, 50), st.integers(0, 5)), max_size=20))
def test_rebuild_from_overlapping_intervals(pieces: list[tuple[int, int]]) -> None:
    intervals = [(lo, lo + n) for lo, n in pieces]
    held = {s for lo, hi in intervals for s in range(lo, hi + 1)}
    table = PublisherGaps.rebuild_from([(5, intervals)])
    top = max(held, default=0)
    for s in range(1, top + 2):
        assert table.missing(5, s) == (s <= top and s not in held)


def _held(last: int, gaps: list[tuple[int, int]]) -> set[int]:
    return set(range(1, last + 1)) - {s for lo, hi in gaps for s in range(lo, hi + 1)}


@settings(max_examples=300)
@given(
    held=st.sets(st.integers(1, 40)),
    fenced=st.lists(st.tuples(st.integers(1, 45), st.integers(0, 6)), max_size=3),
    exact=st.booleans(),
)
def test_holdings_with_fences_count_every_fenced_interval_as_held(
    held: set[int], fenced: list[tuple[int, int]], exact: bool
) -> None:
    """with_fenced against a set oracle: the held set, plus every seq of a fence's
    intervals, exact or not (the repair alone fills a fenced range); other publishers
    untouched. lacks_any against the same oracle."""
    from spool.server.txlog.damage.fences import Fence
    from spool.server.txlog.publishers.holdings import lacks_any, with_fenced

    pub, other = 11, 22
    last = max(held, default=0)
    gaps, s = [], 1
    while s <= last:  # the gaps of ``held``, as intervals
        if s in held:
            s += 1
            continue
        e = s
        while e + 1 <= last and e + 1 not in held:
            e += 1
        gaps.append((s, e))
        s = e + 1
    holdings = {pub: (last, gaps), other: (5, [(2, 3)])} if held else {other: (5, [(2, 3)])}
    fences = [
        Fence(100 + i, 100 + i + n, 100, "crc mismatch", "scrub", 0, "j", identities=[(pub, lo, lo + n)], exact=exact)
        for i, (lo, n) in enumerate(fenced)
    ]  # fmt: skip
    out = with_fenced(holdings, fences)
    want = set(held)
    for lo, n in fenced:
        want |= set(range(lo, lo + n + 1))
    got = _held(*out[pub]) if pub in out else set()
    assert got == want
    for lo, n in fenced:
        assert not lacks_any(out, [(pub, lo, lo + n)])
        assert lacks_any(holdings, [(pub, lo, lo + n)]) == (not set(range(lo, lo + n + 1)) <= held)
    assert out[other] == (5, [(2, 3)])
    if pub in out:
        gaps_out = out[pub][1]
        assert gaps_out == sorted(gaps_out)
        assert all(lo <= hi for lo, hi in gaps_out)


def test_a_block_that_cannot_be_read_counts_its_ranges_as_held(tmp_path: Path) -> None:
    """The gaps inside an index block are read from its record headers at open; a block
    that cannot be read whole (an I/O error, a journal shorter than its index says)
    claims no gap: its ranges count as held, so no peer is asked for records the log
    may hold. A block read whole claims exactly the sequences it lacks."""
    pub = 0x1234

    async def body() -> None:
        log = TransactionLog(config(tmp_path), INSTANCE, block_bytes=512, track_gaps=True)
        await log.open()
        for s in (1, 2, 5, 6):  # one block: range 1..6, four records
            log.append(topic="t", message_type="json", pub_hash=pub, pub_seq=s, body=b"{}")
        await fill(log, 40)  # another publisher's records close the block
        plan = plan_held(log._journals.items)  # the journals as the log holds them
        assert [sorted(ranges) for _j, _span, ranges in plan.reads] == [[pub]]
        read = read_held(HeldPlan(dict(plan.held), list(plan.reads)))
        assert sorted(read[pub]) == [(1, 1), (2, 2), (5, 5), (6, 6)]
        journal = plan.reads[0][0]
        real = journal.source
        assert real is not None

        class Unreadable:
            def read(self, offset: int, length: int) -> bytes:
                raise OSError(5, "Input/output error")

        journal.source = Unreadable()  # type: ignore[assignment]
        try:
            read = read_held(HeldPlan(dict(plan.held), list(plan.reads)))
        finally:
            journal.source = real
        assert read[pub] == [(1, 6)]
        await log.close()

    run(body)
