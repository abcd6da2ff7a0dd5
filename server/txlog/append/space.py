"""Disk space of the log: preallocated journal files and the ``MaxSize`` accounting.

:class:`DiskSpace` counts the bytes of journals kept locally (and preallocated files,
including one still being made) against ``TransactionLog/MaxSize``; a roll past it raises
:class:`~spool.server.txlog.errors.TxlogFull`. Preallocation keeps
``PreallocatedJournalFiles`` files ready so a roll renames a file instead of allocating
on the commit path; the ``busy`` / ``void`` counters let a roll take the room of a file
still being made. Preallocation is an optimisation: a failed allocation is not a write
failure (:attr:`DiskSpace.shortfall`, retried at a roll or after journals go). Thread
contract: :meth:`DiskSpace.prepare` runs in a worker thread during open,
:meth:`DiskSpace.allocate_file` in worker threads touching no state, everything else on
the event loop. See docs/transaction-log.md "A full disk".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TypedDict

from spool.server.clock import Clock
from spool.server.txlog.errors import TxlogFull
from spool.server.txlog.events import EventCallback
from spool.server.txlog.storage.files import FileSeam, fsync_dir, prealloc_name

__all__ = ["DiskSpace", "PreallocationShortfall", "ShortfallDict"]

log = logging.getLogger("spool.txlog")


class ShortfallDict(TypedDict):
    """A :class:`PreallocationShortfall` as JSON (the admin API and the dashboard)."""

    wanted: int
    ready: int
    error: str
    since: str


@dataclass(frozen=True, slots=True)
class PreallocationShortfall:
    """Fewer preallocated journal files than ``PreallocatedJournalFiles`` (or a journal
    created unallocated), because an allocation failed.

    Attributes:
        wanted: ``PreallocatedJournalFiles``.
        ready: preallocated files ready when last counted.
        error: the latest allocation failure (file and cause).
        since: wall-clock time of the first failure (epoch seconds).
    """

    wanted: int
    ready: int
    error: str
    since: float

    def describe(self) -> str:
        """One line for the event log and the dashboard warning."""
        return (
            f"{self.ready} of {self.wanted} preallocated journal files ready since "
            f"{_iso(self.since)}: {self.error}; the log writes without them"
        )

    def to_dict(self) -> ShortfallDict:
        return {
            "wanted": self.wanted,
            "ready": self.ready,
            "error": self.error,
            "since": _iso(self.since),
        }


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


class DiskSpace:
    """Preallocated files and disk accounting of one log (see the module docstring).

    Args:
        directory: the journal directory (preallocated files live there).
        instance: the instance name (prefixes the file names).
        journal_size: ``JournalSize``: bytes of a journal and of a preallocated file.
        max_size: ``MaxSize`` in bytes; 0 is unlimited.
        want: ``PreallocatedJournalFiles``: how many files to keep ready.
        seam: the file seam (tests inject allocation failures through it).
        emit: the log's event callback (``preallocation_failed``,
            ``preallocation_restored``).
        clock: when a shortfall began.
    """

    def __init__(
        self,
        directory: Path,
        instance: str,
        *,
        journal_size: int,
        max_size: int,
        want: int,
        seam: FileSeam,
        emit: EventCallback,
        clock: Clock,
    ) -> None:
        self._dir = directory
        self._instance = instance
        self._journal_size = journal_size
        self._max_size = max_size
        self._want = want
        self._seam = seam
        self._emit = emit
        self._clock = clock
        self._files: list[Path] = []  # preallocated files ready, oldest first
        self._next = 1  # number of the next preallocated file name
        self._used = 0
        self._busy = 0  # preallocations under way (counted in _used)
        self._void = 0  # of those, how many a roll took the room of
        #: why fewer files than wanted are ready (None while they all are)
        self.shortfall: PreallocationShortfall | None = None
        self._blocked = False  # an allocation failed: wait for retry() before the next
        self._reported = False  # shortfall emitted as an event

    @property
    def used(self) -> int:
        """Bytes counted against ``MaxSize``."""
        return self._used

    @property
    def journal_size(self) -> int:
        """``JournalSize``: bytes of an active journal and of a preallocated file."""
        return self._journal_size

    @property
    def files(self) -> tuple[Path, ...]:
        """The preallocated files ready for rolls, oldest first."""
        return tuple(self._files)

    @property
    def busy(self) -> int:
        """Preallocations under way."""
        return self._busy

    @property
    def void(self) -> int:
        """Preallocations under way whose room a roll already took."""
        return self._void

    def stats(self) -> dict[str, float]:
        """The disk entries of the log's ``stats()``: files ready, bytes counted."""
        return {
            "preallocated": float(len(self._files)),
            "disk_bytes": float(self._used),
            "preallocation_shortfall": 1.0 if self.shortfall is not None else 0.0,
        }

    def fits(self, total: int) -> bool:
        """Whether ``total`` bytes are within ``MaxSize``."""
        return not self._max_size or total <= self._max_size

    # -- open (worker thread) -----------------------------------------------------------

    def prepare(self, existing: list[Path], number: int, journal_bytes: int) -> None:
        """Keep ``PreallocatedJournalFiles`` files of ``JournalSize`` ready (at open).

        Runs in the worker thread of :meth:`TransactionLog.open`, before the loop uses this
        object: surplus or oversized files are deleted, the rest reallocated to full size,
        missing ones made while they fit. A failed allocation is a shortfall, not an
        error (see the module docstring): the instance starts without the file.

        Args:
            existing: the preallocated files recovery found (and the log did not take).
            number: the number for the next file name.
            journal_bytes: bytes the journals occupy on disk.
        """
        keep: list[Path] = []
        for path in existing:
            if len(keep) >= self._want or path.stat().st_size > self._journal_size:
                path.unlink()
                continue
            keep.append(path)
        for path in keep:
            handle = self._seam.open(path, create=False)
            try:
                handle.allocate(self._journal_size)
            except OSError as exc:  # still usable: its writes will extend it
                self._short(path, exc)
            finally:
                handle.close()
        used = journal_bytes + len(keep) * self._journal_size
        while len(keep) < self._want and self.fits(used + self._journal_size) and not self._blocked:
            path = self._dir / prealloc_name(self._instance, number)
            number += 1
            try:
                self.allocate_file(path)
            except OSError as exc:
                self._discard(path)
                self._short(path, exc)
                break
            keep.append(path)
            used += self._journal_size
        fsync_dir(self._dir)
        self._files, self._next, self._used = keep, number, used
        if self.shortfall is not None:
            self.shortfall = PreallocationShortfall(
                self._want, len(keep), self.shortfall.error, self.shortfall.since
            )

    def active_unallocated(self, path: Path, exc: OSError) -> None:
        """The active journal could not be allocated at open (worker thread of open)."""
        self._short(path, exc)

    def allocate_file(self, path: Path) -> None:
        """Create ``path`` at ``JournalSize``, allocated and fsynced (worker thread)."""
        handle = self._seam.open(path, create=True)
        try:
            handle.allocate(self._journal_size)
            handle.fsync()
        finally:
            handle.close()

    def _discard(self, path: Path) -> None:
        """Delete a file whose allocation failed (what it did allocate goes back)."""
        with contextlib.suppress(OSError):
            path.unlink()

    def _short(self, path: Path, exc: OSError) -> None:
        """An allocation failed: note the shortfall and stop trying until :meth:`retry`."""
        self._blocked = True
        since = self.shortfall.since if self.shortfall is not None else self._clock.time()
        self.shortfall = PreallocationShortfall(
            self._want, len(self._files), f"{path.name}: {exc.strerror or exc}", since
        )
        log.warning("could not preallocate %s: %s", path, exc)

    # -- event loop ---------------------------------------------------------------------

    def room_for_roll(self) -> Path | None:
        """Account a new journal; the preallocated file it takes, or None to create one.

        Raises:
            TxlogFull: no preallocated file, no room under ``MaxSize``, and no room
                reserved by a preallocation under way to take.
        """
        self._blocked = False  # a roll: worth another try at the next replenish
        if self._files:
            return self._files.pop(0)  # its room is counted already
        size = self._journal_size
        if self.fits(self._used + size):
            self._used += size
        elif self._busy > self._void:
            # a preallocation under way has its room counted: this journal takes it, and
            # the file is deleted when it is done (see replenish)
            self._void += 1
        else:
            raise TxlogFull(
                f"a new {size}-byte journal would exceed MaxSize "
                f"({self._max_size} bytes, {self._used} in use)"
            )
        return None

    def report(self) -> None:
        """Emit ``preallocation_failed`` for a shortfall not reported yet (on the loop)."""
        shortfall = self.shortfall
        if shortfall is not None and not self._reported:
            self._reported = True
            self._emit(
                "preallocation_failed",
                {"wanted": shortfall.wanted, "ready": shortfall.ready, "error": shortfall.error},
            )

    def allocation_failed(self, path: Path, exc: OSError) -> None:
        """A journal was created unallocated (a roll found no preallocated file and no
        room for one); on the loop, from the flusher's report."""
        self._short(path, exc)
        self.report()

    def retry(self) -> None:
        """Try to make preallocated files again after the next commit (a roll, or
        journals were removed or moved away)."""
        self._blocked = False

    def resize(self, old_bytes: int, new_bytes: int) -> None:
        """A journal's size on disk changed (finished and trimmed, or compressed)."""
        self._used += new_bytes - old_bytes

    def release(self, nbytes: int) -> None:
        """A journal of ``nbytes`` on disk was removed."""
        self._used -= nbytes

    async def replenish(self) -> None:
        """Make preallocated files until ``PreallocatedJournalFiles`` are ready or the next
        would not fit; one at a time, each in a worker thread. After a failed allocation,
        nothing until :meth:`retry` (a roll, room made)."""
        size = self._journal_size
        while len(self._files) < self._want and self.fits(self._used + size) and not self._blocked:
            path = self._dir / prealloc_name(self._instance, self._next)
            self._next += 1
            self._used += size
            self._busy += 1
            try:
                await asyncio.to_thread(self.allocate_file, path)
            except OSError as exc:
                if self._void:
                    self._void -= 1  # its room already went to a journal
                else:
                    self._used -= size
                await asyncio.to_thread(self._discard, path)
                self._short(path, exc)
                self.report()
                return
            finally:
                self._busy -= 1
            if self._void:
                # a roll took this file's room while it was being made (see room_for_roll)
                self._void -= 1
                with contextlib.suppress(OSError):
                    await asyncio.to_thread(path.unlink)
                continue
            self._files.append(path)
        if self.shortfall is not None and len(self._files) >= self._want:
            log.info("preallocated journal files ready again (%d)", len(self._files))
            self._emit("preallocation_restored", {"ready": len(self._files)})
            self.shortfall = None
            self._reported = False
