"""A hypothesis state machine over the publisher table of a log on real files, with the
instance's own identity among its publishers, checked against a set oracle.

The oracle is, per publisher, the set of sequences the log holds. Rules: appends of other
publishers (their sequences may jump, opening gaps), appends of the own identity (one
after its highest, as the broker numbers them), late copies filling gaps (for the own
identity: only records it gave out that the log lost, as a peer sends them back), waits
for durability, clean reopens and crashes (of the process, or of the machine: the file
seam loses what was not fsynced), the last record optionally torn or truncated after the
crash, which recovery cuts.

After every step: for each publisher, the log holds exactly the oracle's sequences (up to
its highest and above it), its holdings' gaps are the sequences below the highest it does
not hold, and another publisher's highest is its highest held. The own identity's highest
is at least every sequence it ever gave out (every own record that was durable, which a
peer may hold, lost since or not), so its next record never takes such a bookmark, across
every crash and reopen.

What a crash keeps depends on whether the flusher had taken the last appends (thread
timing), so no rule has a precondition on the log's contents: choices are numbers mapped
onto what is there (``pick``), and a rule with nothing to act on does nothing.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from spool.server.txlog import TransactionLog
from tests.support.damage import (
    journals,
    records_of,
    truncate_inside_last_record,
    zero_end_of_last_record,
)
from tests.unit.txlog.helpers import INSTANCE, FaultySeam, config

T = TypeVar("T")
OTHERS = (0x1111, 0x2222)
PICKS = st.integers(min_value=0, max_value=1 << 30)


def pick(choices: list[T], n: int) -> T:
    """The ``n``-th of ``choices``, wrapping around (a draw that does not depend on state)."""
    return choices[n % len(choices)]


def _lacking(held: set[int], highest: int) -> list[tuple[int, int]]:
    """The sequences 1..``highest`` not in ``held``, as intervals."""
    out: list[tuple[int, int]] = []
    nxt = 1
    for s in sorted(held):
        if s > nxt:
            out.append((nxt, s - 1))
        nxt = s + 1
    if nxt <= highest:
        out.append((nxt, highest))
    return out


def _merged(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Intervals sorted, adjacent and overlapping ones joined."""
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(intervals):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


class PublishersMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="txlog-pubs-"))
        self.loop = asyncio.new_event_loop()
        self.seam = FaultySeam(volatile=True)
        self.log = self._open()
        self.own = self.log.own_pub_hash
        #: per publisher, the sequences the log holds
        self.held: dict[int, set[int]] = {p: set() for p in (self.own, *OTHERS)}
        #: ``(seq, pub, pub_seq)`` appended since the log opened, for a crash to cut
        self.appended: list[tuple[int, int, int]] = []
        #: every sequence of the own identity that was durable: a peer may hold it
        self.given: set[int] = set()

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coro)

    def _open(self) -> TransactionLog:
        log = TransactionLog(
            config(self.tmp, journal_size=4 * 1024, preallocated=0, flush_interval=0),
            INSTANCE, files=self.seam, block_bytes=256, track_gaps=True,
        )  # fmt: skip
        self._run(log.open())
        return log

    def _append(self, pub: int, s: int, size: int, *, late: bool = False) -> None:
        rec = self.log.append(
            topic="t", message_type="json", pub_hash=pub, pub_seq=s, body=b"x" * size,
            late=late,
        )  # fmt: skip
        self.held[pub].add(s)
        self.appended.append((rec.seq, pub, s))

    def _durable(self, upto: int) -> None:
        """Records up to ``upto`` are durable: the own identity gave those out."""
        self.given.update(s for seq, pub, s in self.appended if pub == self.own and seq <= upto)

    # -- appends ----------------------------------------------------------------------------

    @rule(
        which=PICKS,
        jumps=st.lists(st.sampled_from([0, 0, 0, 1, 3]), min_size=1, max_size=6),
        size=st.integers(min_value=0, max_value=300),
    )
    def append_other(self, which: int, jumps: list[int], size: int) -> None:
        pub = pick(list(OTHERS), which)
        for jump in jumps:
            self._append(pub, self.log.publisher_last(pub) + 1 + jump, size)

    @rule(n=st.integers(min_value=1, max_value=4), size=st.integers(min_value=0, max_value=300))
    def append_own(self, n: int, size: int) -> None:
        """As the broker numbers its own records: one after the highest."""
        for _ in range(n):
            s = self.log.publisher_last(self.own) + 1
            assert s not in self.given, f"own sequence {s} given out before"
            self._append(self.own, s, size)

    @rule(which=PICKS, at=PICKS, size=st.integers(min_value=0, max_value=300))
    def late(self, which: int, at: int, size: int) -> None:
        """A late copy fills a gap: another route's record of another publisher, or a
        record of the own identity that the log lost and a peer sends back."""
        pub = pick([self.own, *OTHERS], which)
        if pub == self.own:
            lost = sorted(self.given - self.held[pub])
        else:
            lost = sorted(set(range(1, self.log.publisher_last(pub))) - self.held[pub])
        if not lost:
            return
        s = pick(lost, at)
        assert self.log.publishers.missing(pub, s), (pub, s)
        self._append(pub, s, size, late=True)
        event("late copy of the own identity" if pub == self.own else "late copy")

    @rule()
    def sync(self) -> None:
        self._run(self.log.wait_durable(self.log.last_seq))
        self._durable(self.log.durable_seq)

    # -- crashes and reopens --------------------------------------------------------------

    @rule()
    def close_and_reopen(self) -> None:
        self._run(self.log.close())
        self.seam.settle()
        self._durable(self.log.last_seq)
        self._reopen()

    @rule(power=st.booleans(), damage=st.sampled_from(["none", "torn", "truncated"]))
    def crash(self, power: bool, damage: str) -> None:
        """A crash at a group-commit boundary (of the machine with ``power``: what was not
        fsynced is lost), then optionally the last record on disk torn or cut short."""
        self._run(self.log.abort())
        if power:
            self.seam.crash()
        else:
            self.seam.settle()
        durable = self.log.durable_seq
        self._durable(durable)
        for _seq, pub, s in (a for a in self.appended if a[0] > durable):
            self.held[pub].discard(s)
        if damage != "none":
            self._damage(damage)
        self._reopen()

    def _damage(self, how: str) -> None:
        last = journals(self.tmp / "journal", INSTANCE)[-1]
        records = records_of(last)
        if not records:
            return
        if how == "torn":
            hit = zero_end_of_last_record(last, min(40, records[-1].length - 8))
        else:
            hit = truncate_inside_last_record(last, keep=min(48, records[-1].length - 1))
        if hit.pub_hash in self.held:
            self.held[hit.pub_hash].discard(hit.pub_seq)
            event(
                f"{how} record of "
                + ("the own identity" if hit.pub_hash == self.own else "a publisher")
            )

    def _reopen(self) -> None:
        self.log = self._open()
        assert self.log.own_pub_hash == self.own  # the same log: the same identity
        self.appended = []

    # -- the oracle -----------------------------------------------------------------------

    @invariant()
    def table_matches_the_oracle(self) -> None:
        holdings = self.log.publishers.holdings()
        for pub, held in self.held.items():
            highest = self.log.publisher_last(pub)
            if pub == self.own:
                assert highest >= max(self.given | held, default=0), (highest, self.given)
            else:
                assert highest == max(held, default=0)
            # the own identity numbers ahead, so its highest may be far above what it
            # holds: the sequences it lacks are compared as intervals
            expected = _lacking(held, highest)
            _last, gaps = holdings.get(pub, (0, []))
            assert _merged(gaps) == expected, (pub == self.own, gaps, expected)
            for s in held:
                assert self.log.holds(pub, s), (pub == self.own, s)
            for lo, hi in expected:
                assert not self.log.holds(pub, lo) and not self.log.holds(pub, hi)
            assert not self.log.holds(pub, highest + 1)

    def teardown(self) -> None:
        try:
            self._run(self.log.close())
        finally:
            self.loop.close()
            shutil.rmtree(self.tmp, ignore_errors=True)


PublishersMachine.TestCase.settings = settings(
    max_examples=100,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestPublishersMachine = PublishersMachine.TestCase
