"""The scrub: every byte of every journal read back and checked, at a paced rate.

Records are checked when they are read, and recovery checks the journal that was being
written, but a finished journal is trusted at open after a few cheap checks (its index
file's CRC, its size, its first and last blocks): reading a whole log at every start would
take minutes on a large one. Bit rot in the middle of an old journal would then wait for
a reader to meet it. The scrub closes that gap: it reads every journal back, oldest
first, and checks its bytes against the CRC-32C its index keeps for each block (about
16 KB) and its index file against the file's own CRC.

- **Paced**: reads of :data:`CHUNK` bytes in a worker thread, then a pause so that no
  more than ``rate`` bytes per second are read on average (``Tuning/JournalScrubRate``):
  the disk keeps serving appends and replays, the event loop only schedules.
- **When**: a pass starts when the instance is ready, then ``interval`` after the previous
  pass ended (``Tuning/JournalScrubInterval``; 0: only on demand), and on demand (the
  admin API's ``POST /api/transaction_log/scrub``). A read that met a bad record asks for
  its journal to be checked at once (:meth:`Scrubber.check_soon`).
- **What it reports**: for a block whose bytes do not match, the journal is read record
  by record past the damage (server/txlog/damage/salvage.py) and each lost span reported as a
  :class:`~spool.server.txlog.damage.ranges.DamagedRange`; an index file that fails its CRC is
  reported too. What the log does with them is the log's business (``found``).

Event loop only; the reads run in worker threads.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import Final

import google_crc32c

from spool.server.clock import Clock, sleep_or_wake, time_us
from spool.server.txlog.damage.ranges import DamagedRange, FoundBy
from spool.server.txlog.damage.salvage import BlockHint, ranges_of, salvage
from spool.server.txlog.errors import CorruptRecord
from spool.server.txlog.index.builder import IndexBuilder
from spool.server.txlog.index.fileformat import parse_sealed
from spool.server.txlog.index.sealed import SealedIndex
from spool.server.txlog.storage.journal import Journal, JournalList
from spool.server.txlog.storage.source import JournalSource

__all__ = ["CHUNK", "ScrubStatus", "Scrubber", "block_hints", "damaged_ranges"]

#: bytes read per step (then the pause that keeps the rate)
CHUNK: Final = 1 << 20

#: what the log does with what a check found: the journal, its damaged ranges, and
#: whether its index file failed its own CRC
Found = Callable[[Journal, list[DamagedRange], bool], Awaitable[None]]


@dataclass(slots=True)
class ScrubStatus:
    """Where the scrub is (the admin API's ``scrub``).

    Attributes:
        rate: bytes per second it reads at most.
        interval: seconds between passes (0: only on demand).
        running: a pass is under way.
        passes: passes completed since the instance started.
        pass_started_us: when the current (or last) pass started.
        last_pass_ended_us: when the last complete pass ended.
        journals_checked / journals_total: of the current (or last) pass.
        bytes_checked / bytes_total: of the current (or last) pass.
        next_pass_us: when the next scheduled pass starts (None: none is scheduled).
        damage_found: damaged ranges and index files it found since the instance started.
    """

    rate: int
    interval: float
    running: bool = False
    passes: int = 0
    pass_started_us: int | None = None
    last_pass_ended_us: int | None = None
    journals_checked: int = 0
    journals_total: int = 0
    bytes_checked: int = 0
    bytes_total: int = 0
    next_pass_us: int | None = None
    damage_found: int = 0

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready dict: every field, in the order declared."""
        return asdict(self)


def block_hints(index: IndexBuilder | SealedIndex, upto: int) -> list[BlockHint]:
    """``(offset, length, first_seq, crc)`` of an index's blocks ending by ``upto``."""
    if isinstance(index, SealedIndex):
        rows = [(b[1], b[2], b[0], b[5]) for b in index.blocks()]
    else:
        rows = list(zip(index.b_off, index.b_len, index.b_first, index.b_crc, strict=False))
    return [r for r in rows if r[0] + r[1] <= upto]


def damaged_ranges(
    journal: Journal, hints: list[BlockHint], found_by: FoundBy, now_us: int
) -> list[DamagedRange]:
    """Every lost span of a journal whose bytes failed a check (worker thread).

    A span that runs to the end of a finished journal's data ends at its last seq (the
    index says how many records it held)."""
    source = journal.source
    assert source is not None
    sv = salvage(source, journal.base, size=journal.durable_len, hints=hints)
    last = journal.last_seq if journal.finished else None
    return ranges_of(sv.spans, journal.base, str(journal.path), last, found_by, now_us)


class Scrubber:
    """The paced check of every journal of one log (see the module docstring).

    Args:
        journals: the log's journals.
        clock: time for pacing and the schedule.
        rate: bytes per second read at most.
        interval: seconds between the end of a pass and the start of the next (0: only
            on demand).
        found: what to do with damage (called on the loop).
    """

    def __init__(
        self, journals: JournalList, *, clock: Clock, rate: int, interval: float, found: Found
    ) -> None:
        self._journals = journals
        self._clock = clock
        self._found = found
        self.status = ScrubStatus(rate, interval)
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._wanted = False  # a pass is due (scheduled or asked for)
        self._soon: list[int] = []  # journals a reader found damaged, checked first
        #: bytes read and checked since the instance started, every pass together
        self.bytes_read = 0

    def start(self, *, now: bool) -> None:
        """Start the schedule: a first pass ``now`` (else after ``interval``, or when
        asked), then one every ``interval``. Starting it again changes nothing."""
        if self._task is None:
            self._wanted = now
            self._task = asyncio.get_running_loop().create_task(self._run(), name="spool-scrub")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def request(self) -> bool:
        """Start a pass now; False when one is running already (it goes on)."""
        if self.status.running:
            return False
        self._wanted = True
        self._wake.set()
        return True

    def check_soon(self, base: int) -> None:
        """A reader met a bad record in journal ``base``: check it before anything else."""
        if base not in self._soon:
            self._soon.append(base)
            self._wake.set()

    async def _run(self) -> None:
        status = self.status
        while True:
            if not self._wanted and not self._soon:
                if status.interval:
                    status.next_pass_us = time_us(self._clock) + int(status.interval * 1e6)
                slept = await sleep_or_wake(self._clock, status.interval or 86400.0, self._wake)
                if slept and status.interval:
                    self._wanted = True
            self._wake.clear()
            status.next_pass_us = None
            while self._soon:
                journal = self._journal(self._soon.pop(0))
                if journal is not None:
                    await self.check(journal, "read")
            if self._wanted:
                self._wanted = False
                await self._pass()

    def _journal(self, base: int) -> Journal | None:
        for j in self._journals.items:
            if j.base == base:
                return j
        return None

    async def _pass(self) -> None:
        status = self.status
        journals = [j for j in self._journals.items if j.created and j.source is not None]
        status.running = True
        status.pass_started_us = time_us(self._clock)
        status.journals_total = len(journals)
        status.journals_checked = 0
        status.bytes_total = sum(j.durable_len for j in journals)
        status.bytes_checked = 0
        try:
            for journal in journals:
                if self._journal(journal.base) is journal:  # still in the log
                    await self.check(journal, "scrub")
                status.journals_checked += 1
        finally:
            status.running = False
        status.passes += 1
        status.last_pass_ended_us = time_us(self._clock)

    async def check(self, journal: Journal, found_by: FoundBy) -> None:
        """Check one journal's index file and bytes; report what is wrong."""
        index_bad = False
        index = journal.index
        if isinstance(index, SealedIndex) and index.path is not None:
            index_bad = not await asyncio.to_thread(_index_intact, index, journal.base)
            if self._journal(journal.base) is not journal:
                return  # removed, archived or compressed meanwhile: its index is closed
        hints = block_hints(index, journal.durable_len)
        bad = await self._verify(journal, hints)
        ranges: list[DamagedRange] = []
        if bad and self._journal(journal.base) is journal:
            source = journal.source
            assert source is not None
            source.acquire()
            try:
                ranges = await asyncio.to_thread(
                    damaged_ranges, journal, hints, found_by, time_us(self._clock)
                )
            except OSError:
                return  # moved or removed meanwhile
            finally:
                source.release()
        if ranges or index_bad:
            self.status.damage_found += len(ranges) + int(index_bad)
            await self._found(journal, ranges, index_bad)

    async def _verify(self, journal: Journal, hints: list[BlockHint]) -> bool:
        """Whether a block's bytes fail their CRC (paced reads in a thread)."""
        source = journal.source
        if source is None:
            return False
        clock = self._clock
        rate = max(self.status.rate, 1)
        i = 0
        while i < len(hints):
            j = i
            start = hints[i][0]
            stop = start
            while j < len(hints) and (stop - start < CHUNK or j == i):
                stop = hints[j][0] + hints[j][1]
                j += 1
            began = clock.monotonic()
            source.acquire()
            try:
                bad = await asyncio.to_thread(_blocks_bad, source, hints[i:j], start, stop)
            except OSError:
                return False  # archived, compressed or removed meanwhile
            finally:
                source.release()
            self.status.bytes_checked += stop - start
            self.bytes_read += stop - start
            if bad:
                return True
            pause = (stop - start) / rate - (clock.monotonic() - began)
            if pause > 0:
                await clock.sleep(pause)
            i = j
        return False


def _index_intact(index: SealedIndex, base: int) -> bool:
    """Whether a sealed index file still passes its own checks (worker thread)."""
    assert index.path is not None
    try:
        data = index.path.read_bytes()
    except FileNotFoundError:
        return True  # the journal moved meanwhile (archive, compress): checked next pass
    except OSError:
        return False
    return parse_sealed(data, base) is not None


def _blocks_bad(source: JournalSource, hints: list[BlockHint], start: int, stop: int) -> bool:
    """Read ``[start, stop)`` and check each block's CRC (worker thread)."""
    try:
        buf = source.read(start, stop - start)
    except CorruptRecord:
        return True  # a compressed chunk that does not decompress
    crc = google_crc32c.value
    for off, length, _first, want in hints:
        a = off - start
        if a + length > len(buf) or crc(buf[a : a + length]) != want:
            return True
    return False
