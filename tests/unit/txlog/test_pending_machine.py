"""A hypothesis state machine over the group commit's pending state (server/txlog/append/groupcommit.py),
checked against a byte-level oracle.

Rules: runs of records added to the active journal (:meth:`Pending.add`), partial index
blocks closed, rolls to a new journal, and commits that take everything pending and either
"write" it (the oracle's disk gets each chunk at its offset) or fail and put it back
(:meth:`Pending.restore`). No files and no loop: :class:`Pending` is bookkeeping only.

After every step the invariants of :class:`Pending`'s docstring hold, and per journal the
bytes on the oracle's disk, then the pending chunks, then (for the active journal) the
pending buffer are exactly the bytes added to it, in order, without gap or overlap.
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from spool.server.txlog.append.groupcommit import Pending
from spool.server.txlog.index.builder import IndexBuilder
from spool.server.txlog.storage.journal import Journal, JournalList

BLOCK_BYTES = 64  # small, so that runs close index blocks often
KEY = 7


class PendingMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.journals = JournalList()
        builder = IndexBuilder(1, BLOCK_BYTES)
        self.journals.reset([Journal(1, Path("j1"), builder, created=False)])
        self.pending = Pending(self.journals, {}, BLOCK_BYTES)
        self.pending.start(self.journals.active, builder)
        # the oracle: per journal base, every byte added, what the disk holds, and how
        # many index entries were written
        self.added: dict[int, bytearray] = {1: bytearray()}
        self.disk: dict[int, bytearray] = {1: bytearray()}
        self.entries_written: dict[int, int] = {1: 0}
        self.last_seq = 0
        self.durable_seq = 0
        self.pub_seq = 0
        self.fill = 0

    def _record(self, size: int) -> bytes:
        self.fill = (self.fill + 1) % 251
        return bytes([self.fill]) * size

    @rule(sizes=st.lists(st.integers(min_value=1, max_value=40), min_size=1, max_size=8))
    def add(self, sizes: list[int]) -> None:
        pending = self.pending
        datas = [self._record(size) for size in sizes]
        offsets = [pending.length]
        for size in sizes:
            offsets.append(offsets[-1] + size)
        pub_seqs = list(range(self.pub_seq + 1, self.pub_seq + 1 + len(sizes)))
        self.pub_seq = pub_seqs[-1]
        pending.add(offsets, datas, sizes, 1_000, KEY, pub_seqs)
        self.added[self.journals.active.base] += b"".join(datas)
        self.last_seq += len(sizes)

    @rule()
    def close_block(self) -> None:
        self.pending.close_block()

    @rule()
    def roll(self) -> None:
        base = self.last_seq + 1
        if base == self.journals.active.base:
            return  # an empty journal is not rolled
        builder = IndexBuilder(base, BLOCK_BYTES)
        self.pending.roll(Journal(base, Path(f"j{base}"), builder, created=False), builder)
        self.added[base] = bytearray()
        self.disk[base] = bytearray()
        self.entries_written[base] = 0

    @rule(ok=st.booleans())
    def commit(self, ok: bool) -> None:
        batch = self.pending.take()
        assert batch.last_seq == self.last_seq
        assert batch.records == self.last_seq - self.durable_seq
        if not ok:
            self.pending.restore(batch)
            return
        for journal, offset, data in batch.chunks:
            disk = self.disk[journal.base]
            assert offset == len(disk), "a chunk starts where the journal's bytes end"
            disk += data
        for journal, _ in batch.index_entries:
            self.entries_written[journal.base] += 1
        for journal in batch.finished:
            journal.rolling = False
        self.durable_seq = batch.last_seq

    # -- invariants ---------------------------------------------------------------------

    @invariant()
    def active_buffer_ends_at_length(self) -> None:
        pending = self.pending
        assert pending.length == pending.offset + len(pending.buf)
        assert pending.builder is self.journals.active.index

    @invariant()
    def seqs_are_ordered(self) -> None:
        pending = self.pending
        assert pending.last_seq == self.last_seq
        # a commit takes and writes (or puts back) at once here, so nothing is in flight
        assert self.durable_seq == pending.taken_seq <= pending.last_seq

    @invariant()
    def every_byte_added_is_on_disk_or_pending_once(self) -> None:
        pending = self.pending
        held = {base: bytearray(disk) for base, disk in self.disk.items()}
        for journal, offset, data in pending.chunks:
            assert offset == len(held[journal.base])
            held[journal.base] += data
        active = self.journals.active
        assert pending.offset == len(held[active.base])
        held[active.base] += pending.buf
        assert held == self.added

    @invariant()
    def chunks_and_entries_are_in_journal_order(self) -> None:
        pending = self.pending
        bases = [journal.base for journal, _, _ in pending.chunks]
        assert bases == sorted(bases)
        bases = [journal.base for journal, _ in pending.index]
        assert bases == sorted(bases)

    @invariant()
    def every_closed_block_has_one_entry(self) -> None:
        pending = self.pending
        for journal in self.journals:
            waiting = sum(1 for j, _ in pending.index if j is journal)
            assert isinstance(journal.index, IndexBuilder)
            blocks = len(journal.index.b_first)
            assert self.entries_written[journal.base] + waiting == blocks

    @invariant()
    def finished_journals_roll_until_written(self) -> None:
        active = self.journals.active
        for journal in self.pending.finished:
            assert journal.finished and journal.rolling and journal.base < active.base
        assert not active.finished


PendingMachine.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestPendingMachine = PendingMachine.TestCase
