"""Retention: who still needs which journals, and archiving, compressing, removing them.

Holders (a replay, a queue, a replication destination) take a
:class:`~spool.server.txlog.retention.pins.Pin` at the oldest seq they still need. ``archive``,
``compress`` and ``remove`` act on a journal *and every older one* (docs/admin-api.md), never on
the active journal, and refuse - doing nothing - when a pin still needs any of them. A
journal that was just rolled is acted on only once the commit that finishes it (truncate,
fsync) is done and its index sealed; the checks are made again after waiting, as a pin may
be taken meanwhile.

Operations run one at a time (a lock); file work runs in worker threads, and the journals'
new paths, readers and sizes are applied on the loop. Event loop only.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from spool.server.txlog.append.space import DiskSpace
from spool.server.txlog.errors import (
    JournalActive,
    JournalNotFound,
    JournalPinned,
    JournalUnfinished,
    PublishersUnsaved,
)
from spool.server.txlog.events import EventCallback
from spool.server.txlog.publishers.clientsack import PublisherIndex
from spool.server.txlog.retention.pins import Pin, PinInfo, PinRegistry
from spool.server.txlog.storage.compression import compress_journal
from spool.server.txlog.storage.files import (
    Compression,
    FileSeam,
    fsync_dir,
    index_name,
    journal_name,
    move_journal,
)
from spool.server.txlog.storage.journal import Journal, JournalInfo, JournalList, JournalState
from spool.server.txlog.storage.source import JournalSource, open_source

__all__ = ["Retention"]


class Retention:
    """Pins and journal maintenance of one log (see the module docstring).

    Args:
        journals: the log's journals.
        space: the log's disk accounting (sizes change on compress and remove).
        directory: the journal directory.
        archive_directory: where archived journals go.
        instance: the instance name (prefixes the file names).
        emit: the log's event callback (``journal_archived``, ``journal_compressed``,
            ``journal_removed``).
        check_open: raises :class:`~spool.server.txlog.errors.TxlogClosed` unless the log is open.
        settle: returns once every record appended so far is durable and the caches of
            its commits are written (so a just-rolled journal is finished and sealed);
            during a write outage, once the caches of the commits made are written.
        cover_publishers: makes ``clients.ack`` cover journals about to be removed (worker
            thread; raises OSError when it cannot), so their publishers outlive them.
        seam: the file seam journals are written through (an archive to another file
            system copies through it).
    """

    def __init__(
        self,
        journals: JournalList,
        space: DiskSpace,
        *,
        directory: Path,
        archive_directory: Path,
        instance: str,
        emit: EventCallback,
        check_open: Callable[[], None],
        settle: Callable[[], Awaitable[None]],
        cover_publishers: Callable[[Sequence[PublisherIndex]], bool],
        seam: FileSeam,
    ) -> None:
        self._seam = seam
        self._journals = journals
        self._space = space
        self._dir = directory
        self._archive_dir = archive_directory
        self._instance = instance
        self._emit = emit
        self._check_open = check_open
        self._settle = settle
        self._cover_publishers = cover_publishers
        self._pins = PinRegistry()
        self._lock = asyncio.Lock()

    @property
    def lock(self) -> asyncio.Lock:
        """Held while journals change on disk (maintenance here, or a journal written anew
        around its damage): one change at a time."""
        return self._lock

    # -- pins ---------------------------------------------------------------------------

    def pin(self, owner: str, seq: int) -> Pin:
        """Hold every record from ``seq`` on, on behalf of ``owner``."""
        return self._pins.pin(owner, seq)

    def pins(self) -> list[PinInfo]:
        """The live pins, oldest first."""
        return self._pins.list()

    # -- listing ------------------------------------------------------------------------

    def journals(self) -> list[JournalInfo]:
        """Every journal, oldest first, then the preallocated files."""
        low = self._pins.lowest()
        active = self._journals.active
        out: list[JournalInfo] = []
        for j in self._journals:
            state: JournalState
            if j is active:
                state = "active"
            elif j.archived:
                state = "archived"
            elif j.compression:
                state = "compressed"
            else:
                state = "closed"
            pinned = low.owner if low is not None and low.seq <= j.last_seq and j.count else None
            out.append(j.info(state, pinned))
        for path in self._space.files:
            out.append(
                JournalInfo(0, str(path), "preallocated", self._space.journal_size, 0, None, 0, 0, -1,
                            None, None, None, None)
            )  # fmt: skip
        return out

    # -- maintenance --------------------------------------------------------------------

    async def archive(self, journal_id: int) -> list[JournalInfo]:
        """Move that journal and all older ones to the archive directory (still readable).

        Raises:
            TxlogClosed, JournalNotFound, JournalActive, JournalPinned, JournalUnfinished.
        """
        async with self._lock:
            targets = [j for j in await self._settled_targets(journal_id) if not j.archived]
            for j in targets:
                moved = await asyncio.to_thread(self._move_to_archive, j)
                old = j.source
                j.path, j.source, j.archived = moved
                if old is not None:
                    old.retire()
                self._emit("journal_archived", {"journal": j.base, "path": str(j.path)})
            return [j.info("archived", None) for j in targets]

    async def compress(self, journal_id: int, method: Compression = "zstd") -> list[JournalInfo]:
        """Compress that journal and all older ones; they stay readable.

        Raises:
            TxlogClosed, JournalNotFound, JournalActive, JournalPinned, JournalUnfinished.
        """
        async with self._lock:
            targets = [j for j in await self._settled_targets(journal_id) if j.compression is None]
            done: list[JournalInfo] = []
            for j in targets:
                old_path = j.path
                dest = old_path.with_name(journal_name(self._instance, j.base, method))
                size = await asyncio.to_thread(
                    compress_journal, old_path, dest, method, data_len=j.index.data_len
                )
                old = j.source
                j.path, j.compression, j.source = dest, method, open_source(dest, method)
                self._space.resize(j.disk_size, size)
                j.disk_size = size
                if old is not None:
                    old.retire()
                await asyncio.to_thread(_unlink_and_sync, [old_path])
                self._emit(
                    "journal_compressed", {"journal": j.base, "path": str(dest), "bytes": size}
                )
                done.append(j.info("archived" if j.archived else "compressed", None))
            return done

    async def remove(self, journal_id: int) -> list[JournalInfo]:
        """Delete that journal and all older ones.

        Their publishers' last sequences are saved in ``clients.ack`` first (when it does
        not cover them yet): de-duplication must outlive the journals.

        Raises:
            TxlogClosed, JournalNotFound, JournalActive, JournalPinned, JournalUnfinished,
                PublishersUnsaved: nothing is removed.
        """
        async with self._lock:
            targets = await self._settled_targets(journal_id)
            try:
                await asyncio.to_thread(self._cover_publishers, [j.index for j in targets])
            except OSError as exc:
                raise PublishersUnsaved(journal_id, exc) from exc
            targets = self._targets(journal_id)  # a pin may have been taken meanwhile
            infos = [j.info("closed", None) for j in targets]
            self._journals.drop_oldest(len(targets))
            paths: list[Path] = []
            for j in targets:
                self._space.release(j.disk_size)
                j.close()
                paths.append(j.path)
                paths.append(j.path.parent / index_name(self._instance, j.base))
                self._emit("journal_removed", {"journal": j.base, "path": str(j.path)})
            await asyncio.to_thread(_unlink_and_sync, paths)
            return infos

    def _targets(self, journal_id: int) -> list[Journal]:
        """That journal and every older one, checked for the active journal and pins."""
        self._check_open()
        if journal_id not in self._journals:
            raise JournalNotFound(journal_id)
        targets = [j for j in self._journals if j.base <= journal_id]
        active = self._journals.active
        if any(j is active for j in targets):
            raise JournalActive(journal_id)
        newest = max(j.last_seq for j in targets)
        holder = self._pins.holder_at_or_below(newest)
        if holder is not None:
            raise JournalPinned(journal_id, holder.owner, holder.seq)
        return targets

    async def _settled_targets(self, journal_id: int) -> list[Journal]:
        """:meth:`_targets`, once every one of them is finished on disk and sealed.

        A just-rolled journal is finished by a later commit, then sealed by the caches
        after it; acting on it before the seal left the cache thread to write a sealed
        index for a journal already removed or archived (an orphan ``.index`` file in the
        journal directory). One wait suffices: the targets are the journals up to
        ``journal_id``, all of which existed at the first check. A journal whose seal
        failed stays unsealed; it is acted on after that one wait. During a write outage
        the wait does not include durability: sealed or not, finished journals can go (the
        usual way to make room on a full disk), but one whose finishing commit is held
        back by the outage cannot.

        Raises:
            JournalUnfinished: a target's finishing commit waits for a write outage.
        """
        targets = self._targets(journal_id)
        if any(j.rolling or not j.sealed for j in targets):
            await self._settle()
            targets = self._targets(journal_id)
            if any(j.rolling for j in targets):  # a write outage holds its commit back
                raise JournalUnfinished(journal_id)
        return targets

    def _move_to_archive(self, j: Journal) -> tuple[Path, JournalSource, bool]:
        dest = self._archive_dir / j.path.name
        move_journal(self._seam, j.path, dest)
        index = j.path.parent / index_name(self._instance, j.base)
        if index.exists():
            shutil.move(index, self._archive_dir / index.name)
        fsync_dir(self._archive_dir)
        fsync_dir(self._dir)
        return dest, open_source(dest, j.compression), True


def _unlink_and_sync(paths: list[Path]) -> None:
    """Delete ``paths`` (gone already is fine) and fsync their directories."""
    dirs = set()
    for p in paths:
        with contextlib.suppress(FileNotFoundError):
            p.unlink()
            dirs.add(p.parent)
    for d in dirs:
        fsync_dir(d)
