"""A hypothesis state machine over a log on real files, checked against an in-memory oracle.

Rules: single appends (the clock moving forward, or a record stamped back in time), runs
through ``append_many``, flushes, crashes (abort, of the process or of the machine: the
file seam holds what is not fsynced, and a power cut loses it, as lazyfs does; optionally
a torn write) and clean reopens, compressing and removing the oldest journals (refused while a pin needs them),
taking, moving and releasing pins, reads, and lookups by bookmark and time; and a disk that
breaks (a write, fsync, truncate, file creation or allocation failing, with or without the
page cache losing what a failed fsync covered) and heals: appends are refused during the
write outage that follows, what was accepted becomes durable once the disk heals, and a
crash or a close during the outage keeps a prefix that includes everything durable.

How much a crash keeps depends on whether the flusher had taken the last appends, which is
thread timing. So that hypothesis draws the same data whatever was kept, no rule has a
precondition on the log's contents and positions are drawn as numbers mapped onto what is
there (``pick``); a rule with nothing to act on does nothing.
"""

from __future__ import annotations

import asyncio
import errno
import shutil
import tempfile
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from spool.server.clock import VirtualClock, time_us
from spool.server.txlog import (
    JournalInfo,
    JournalPinned,
    JournalUnfinished,
    Pin,
    TransactionLog,
    TxlogWriteFailed,
)
from spool.server.txlog.append.outage import MAX_BACKOFF_FACTOR
from spool.server.txlog.format.codec import encode, scan
from spool.server.txlog.format.record import RecordKind
from tests.unit.txlog.helpers import INSTANCE, FaultySeam, config

RETRY = 0.01  # WriteRetryInterval of the machine's log (virtual seconds)

T = TypeVar("T")
PUBLISHERS = (11, 22, 33, 0)  # 0: records without publisher identity
PICKS = st.integers(min_value=0, max_value=1 << 30)


def pick(choices: range | list[T], n: int) -> T:
    """The ``n``-th of ``choices``, wrapping around (a draw that does not depend on state)."""
    return choices[n % len(choices)]


class Oracle:
    """What the log must hold: one tuple per record, index = seq - 1, and where it starts."""

    def __init__(self) -> None:
        self.records: list[tuple[int, int, int, str, bytes]] = []  # ts, pub, pub_seq, topic, body
        self.first = 1  # records before this seq were removed with their journals

    def last_pub_seq(self, pub_hash: int) -> int:
        """A publisher's last sequence: removal forgets records, not publishers."""
        return max((r[2] for r in self.records if r[1] == pub_hash), default=0)

    def first_at_or_after(self, ts: int) -> int:
        held = range(self.first - 1, len(self.records))
        return next((i + 1 for i in held if self.records[i][0] >= ts), len(self.records) + 1)


class LogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="txlog-sm-"))
        self.loop = asyncio.new_event_loop()
        self.clock = VirtualClock()
        self.oracle = Oracle()
        self.durable = 0  # every record up to here was acknowledged durable
        self.pins: list[Pin] = []
        self.pin_names = 0
        # what is not fsynced lives in the seam until its file's fsync: a crash of the
        # machine loses it (``crash(power=True)``), a crash of the process does not
        self.seam = FaultySeam(volatile=True)
        self.broken = False  # the seam is failing an operation
        self.log = self._open()

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coro)

    def _open(self) -> TransactionLog:
        log = TransactionLog(
            config(
                self.tmp, journal_size=4 * 1024, preallocated=1, flush_interval=0,
                write_retry_interval=RETRY,
            ),
            INSTANCE,
            clock=self.clock,
            files=self.seam,
            block_bytes=256,
            tail_cache_bytes=2048,
        )  # fmt: skip
        report = self._run(log.open())
        assert report.last_seq == log.last_seq
        self.pins = []  # pins live in memory: a new log object starts without any
        return log

    def _finished(self) -> list[JournalInfo]:
        return [j for j in self.log.journals() if j.state in ("closed", "compressed")]

    def _lowest_pin(self) -> int | None:
        return min((p.seq for p in self.pins), default=None)

    # -- appends --------------------------------------------------------------------------

    @rule(
        n=st.integers(min_value=1, max_value=40),
        pub=st.sampled_from(PUBLISHERS),
        step=st.sampled_from([0, 1, 40, -25]),
        size=st.integers(min_value=0, max_value=400),
    )
    def append(self, n: int, pub: int, step: int, size: int) -> None:
        """One record at a time; a negative step stamps the record back in time."""
        for i in range(n):
            stamp = None
            if step > 0:
                self._run(self.clock.advance(step / 1e6))
            elif step < 0:
                last = self.oracle.records[-1][0] if self.oracle.records else time_us(self.clock)
                stamp = last + step  # recorded times may go back
            ps = self.oracle.last_pub_seq(pub) + 1 if pub else 0
            body = bytes([i % 251]) * size
            topic = f"t{(size + i) % 3}"
            try:
                rec = self.log.append(
                    topic=topic, message_type="json", pub_hash=pub, pub_seq=ps, body=body,
                    timestamp_us=stamp,
                )  # fmt: skip
            except TxlogWriteFailed:
                assert self.broken  # refused only during a write outage
                event("append refused: write outage")
                return
            self.oracle.records.append((rec.timestamp_us, pub, ps, topic, body))
            assert rec.seq == len(self.oracle.records)

    @rule(
        sizes=st.lists(st.integers(min_value=0, max_value=600), min_size=1, max_size=60),
        pub=st.sampled_from(PUBLISHERS),
        step=st.sampled_from([0, 3, 1000]),
    )
    def append_many(self, sizes: list[int], pub: int, step: int) -> None:
        """A run of one publisher to one topic, one timestamp, across rolls if need be."""
        if step:
            self._run(self.clock.advance(step / 1e6))
        first = self.oracle.last_pub_seq(pub) + 1 if pub else 0
        seqs = [first + i if pub else 0 for i in range(len(sizes))]
        bodies = [bytes([65 + i % 26]) * size for i, size in enumerate(sizes)]
        n = self.log.append_many(
            topic="run", message_type="json", pub_hash=pub, pub_seqs=seqs, bodies=bodies
        )
        if n == 0 and self.broken and self.log.write_error is not None:
            event("append_many refused: write outage")
            return
        assert n == len(sizes)
        ts = self.log.last_timestamp_us
        for ps, body in zip(seqs, bodies, strict=True):
            self.oracle.records.append((ts, pub, ps, "run", body))
        assert self.log.last_seq == len(self.oracle.records)

    @rule()
    def flush(self) -> None:
        if self.broken:
            self.heal_disk()
        self._run(self.log.wait_durable(self.log.last_seq))
        assert self.log.durable_seq == self.log.last_seq == len(self.oracle.records)
        self.durable = self.log.durable_seq

    # -- a disk that breaks and heals -----------------------------------------------------

    @precondition(lambda self: not self.broken)
    @rule(
        operation=st.sampled_from(["write", "fsync", "truncate", "open", "allocate"]),
        err=st.sampled_from([errno.ENOSPC, errno.EIO]),
        lossy=st.booleans(),
    )
    def break_disk(self, operation: str, err: int, lossy: bool) -> None:
        """From now on ``operation`` fails (a failed fsync may also drop what it covered)."""
        self.seam.lossy = lossy
        self.seam.fail(operation, err)
        self.broken = True

    @precondition(lambda self: self.broken)
    @rule()
    def heal_disk(self) -> None:
        """The disk takes writes again: whatever was accepted becomes durable at the next
        retry (at most 16 retry intervals away), and appends are taken again."""
        self._run(self._until_committed_or_outage())  # let the broken disk be tried
        event("healed during an outage" if self.log.write_outage else "healed, no outage")
        self.seam.heal()
        self.broken = False
        self._run(self._until_durable())
        assert self.log.write_outage is None
        assert self.log.durable_seq == self.log.last_seq == len(self.oracle.records)
        self.durable = self.log.durable_seq

    async def _until_committed_or_outage(self) -> None:
        for _ in range(5000):
            if self.log.write_outage is not None or self.log.durable_seq == self.log.last_seq:
                return
            await asyncio.sleep(0.001)
        raise AssertionError("the flusher neither committed nor failed")

    async def _until_durable(self) -> None:
        # the retry sleeps on the virtual clock; the write itself runs in a thread
        for _ in range(2000):
            if self.log.durable_seq == self.log.last_seq and self.log.write_outage is None:
                return
            await self.clock.advance(RETRY * MAX_BACKOFF_FACTOR)
            await asyncio.sleep(0.001)
        raise AssertionError("the log did not resume after the disk healed")

    def _survivors(self) -> None:
        """After a crash (or a close during an outage): the reopened log holds a prefix
        of what was appended that includes everything acknowledged durable."""
        last = self.log.last_seq
        assert self.durable <= last <= len(self.oracle.records)
        del self.oracle.records[last:]
        self.durable = last

    # -- crashes and reopens --------------------------------------------------------------

    @rule(tear=st.integers(min_value=0, max_value=120), power=st.booleans())
    def crash(self, tear: int, power: bool) -> None:
        """Stop as a crash at a group-commit boundary would, of the process (what was
        written reaches the files) or of the machine (``power``: what was not fsynced is
        lost); optionally leave a torn write."""
        self._run(self.log.abort())
        if power:
            lost = self.seam.lost_bytes
            self.seam.crash()
            event("power cut" + (" lost unsynced bytes" if self.seam.lost_bytes > lost else ""))
        else:
            self.seam.settle()
        if tear:
            self._tear(tear)
        self.seam.heal()  # the instance restarts on a healthy disk
        self.broken = False
        self.log = self._open()
        # everything acknowledged survived; what survived beyond is a prefix of the appends
        self._survivors()

    def _tear(self, length: int) -> None:
        """Write the first bytes of the next record after the active journal's data."""
        journals = sorted(
            p for p in (self.tmp / "journal").iterdir() if p.name.endswith(".journal")
        )
        active = journals[-1]
        data = active.read_bytes()
        base = int(active.name.split(".")[1])
        scanned = scan(data, 0, len(data), base, final=True)
        nxt = base + len(scanned.offsets)
        partial = encode(nxt, 0, 1, 1, "torn", "json", RecordKind.PUBLISH, (), 0, b"z" * 200)
        with open(active, "r+b") as fh:
            fh.seek(scanned.end)
            fh.write(partial[:length])

    @rule()
    def close_and_reopen(self) -> None:
        self._run(self.log.close())  # during an outage: one last attempt, then give up
        self.seam.settle()  # no crash: what was written reaches the files
        broken, self.broken = self.broken, False
        self.seam.heal()
        self.log = self._open()
        if broken:
            self._survivors()
            return
        assert self.log.last_seq == len(self.oracle.records)
        self.durable = self.log.last_seq

    # -- retention ------------------------------------------------------------------------

    def _positions(self) -> range:
        """Where a pin may go: near the start of the log, where journals get removed."""
        first = self.oracle.first
        return range(first, min(first + 64, len(self.oracle.records) + 2))

    @rule(at=PICKS)
    def pin(self, at: int) -> None:
        self.pin_names += 1
        self.pins.append(self.log.pin(f"holder-{self.pin_names}", pick(self._positions(), at)))

    @precondition(lambda self: self.pins)  # pins are rule-made: the same on every run
    @rule(which=PICKS, at=PICKS, release=st.booleans())
    def move_or_release_pin(self, which: int, at: int, release: bool) -> None:
        pin = pick(self.pins, which)
        if release:
            pin.release()
            self.pins.remove(pin)
        else:
            pin.move(pick(self._positions(), at))

    @rule()
    def remove_oldest(self) -> None:
        """Removal goes oldest first and is refused, doing nothing, while a pin needs it."""
        if not self._finished():
            return
        oldest = self.log.journals()[0]
        assert oldest.state in ("closed", "compressed")
        low = self._lowest_pin()
        if low is not None and low <= oldest.last_seq:
            with pytest.raises(JournalPinned):
                self._run(self.log.remove(oldest.id))
            assert self.log.first_seq == self.oracle.first
            event("remove refused: pinned")
            return
        try:
            removed = self._run(self.log.remove(oldest.id))
        except JournalUnfinished:
            assert self.broken  # its finishing commit waits for the outage to end
            event("remove refused: unfinished")
            return
        assert [j.id for j in removed] == [oldest.id]
        self.oracle.first = oldest.last_seq + 1
        assert self.log.first_seq == self.oracle.first
        event("remove done")

    @rule()
    def compress_oldest(self) -> None:
        """Compressing acts on a journal and every older one: refused while pinned."""
        target = next((j for j in self._finished() if j.state == "closed"), None)
        if target is None:
            return
        low = self._lowest_pin()
        if low is not None and low <= target.last_seq:
            with pytest.raises(JournalPinned):
                self._run(self.log.compress(target.id))
            event("compress refused: pinned")
            return
        try:
            done = self._run(self.log.compress(target.id))
        except JournalUnfinished:
            assert self.broken
            event("compress refused: unfinished")
            return
        assert [j.id for j in done] == [target.id]
        event("compress done")

    # -- reads and lookups ----------------------------------------------------------------

    @rule(at=PICKS)
    def lookup_bookmark(self, at: int) -> None:
        with_identity = [i + 1 for i, r in enumerate(self.oracle.records) if r[1]]
        if not with_identity:
            return
        seq = pick(with_identity, at)
        _, pub, ps, _, _ = self.oracle.records[seq - 1]
        want = seq if seq >= self.oracle.first else None  # removed with its journal
        assert self.log.seq_for_bookmark(pub, ps) == want
        assert self._run(self.log.locate_bookmark(pub, ps)) == want
        assert self.log.seq_for_bookmark(pub, self.oracle.last_pub_seq(pub) + 1) is None

    @rule(at=PICKS, delta=st.sampled_from([-1, 0, 1]))
    def lookup_time(self, at: int, delta: int) -> None:
        held = self.oracle.records[self.oracle.first - 1 :]
        if not held:
            return
        ts = pick(held, at)[0] + delta
        want = self.oracle.first_at_or_after(ts)
        assert self.log.seq_for_time(ts) == want
        assert self._run(self.log.locate_time(ts)) == want

    @rule(
        start=st.integers(min_value=0, max_value=400), count=st.integers(min_value=1, max_value=200)
    )
    def read(self, start: int, count: int) -> None:
        durable_before = self.log.durable_seq  # a group commit may land while reading
        got = self._run(self.log.read_batch(start, max_count=count))
        durable_after = self.log.durable_seq
        first = max(start, self.oracle.first)
        assert all(r.seq <= durable_after for r in got)
        for r in got:
            assert (r.timestamp_us, r.pub_hash, r.pub_seq, r.topic, r.body) == (
                self.oracle.records[r.seq - 1]
            )
        assert [r.seq for r in got] == list(range(first, first + len(got)))
        if first <= durable_before:
            assert got  # something durable is there to read

    # -- invariants -----------------------------------------------------------------------

    @invariant()
    def publishers_match(self) -> None:
        for pub in PUBLISHERS[:-1]:
            assert self.log.publisher_last(pub) == self.oracle.last_pub_seq(pub)

    @invariant()
    def pins_and_start_match(self) -> None:
        assert sorted(p.seq for p in self.log.pins()) == sorted(p.seq for p in self.pins)
        assert self.log.first_seq == self.oracle.first
        low = min(self.pins, key=lambda p: p.seq, default=None)
        for j in self.log.journals():
            if j.state == "preallocated":
                continue
            needed = low is not None and low.seq <= j.last_seq and j.records > 0
            assert j.pinned_by == (low.owner if needed and low is not None else None)

    def teardown(self) -> None:
        try:
            self.seam.heal()
            self._run(self.log.close())
        finally:
            self.loop.close()
            shutil.rmtree(self.tmp, ignore_errors=True)


LogMachine.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestLogMachine = LogMachine.TestCase
