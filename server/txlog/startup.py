"""Opening a log's files: recovery, the active journal, preallocation.

:func:`open_files` is the file work of :meth:`TransactionLog.open`, run whole in one worker
thread before the log takes any append: it recovers the directory (truncating damage,
rebuilding missing indexes), opens the active journal - or creates one after the last
finished journal, from a preallocated file when there is one - with its open index, and
brings the preallocated files to ``PreallocatedJournalFiles``. Allocations that fail (a
disk short of room) are reported as a preallocation shortfall, not as a failed open: the
instance recovers, serves reads and takes writes until one really fails. The parts it fills in
(:class:`~spool.server.txlog.append.groupcommit.GroupCommit`'s first handle,
:class:`~spool.server.txlog.append.cachewriter.CacheWriter`'s index descriptor,
:class:`~spool.server.txlog.append.space.DiskSpace`'s accounting) are not used by the loop until
``open()`` has them back.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from spool.server.config import TransactionLogConfig
from spool.server.txlog.append.cachewriter import CacheWriter
from spool.server.txlog.append.groupcommit import GroupCommit
from spool.server.txlog.append.space import DiskSpace
from spool.server.txlog.damage.fences import Fence
from spool.server.txlog.index.builder import IndexBuilder
from spool.server.txlog.publishers.incarnation import own_incarnation
from spool.server.txlog.publishers.ownfloor import UNREADABLE, read_floor, write_floor
from spool.server.txlog.recovery.recover import recover
from spool.server.txlog.recovery.report import RecoveryReport
from spool.server.txlog.storage.files import FileSeam, JournalHandle, fsync_dir, journal_name
from spool.server.txlog.storage.journal import Journal
from spool.server.txlog.storage.source import PlainSource

__all__ = ["Opened", "open_files"]


@dataclass(slots=True)
class Opened:
    """What :func:`open_files` found and opened.

    Attributes:
        report: what recovery found and did.
        journals: every journal, oldest first; the last one is active.
        publishers: the publisher table ``pub_hash -> (last pub_seq, its seq)``.
        handle: the active journal's file, open for writing.
        fences: every fence of the log (server/txlog/damage/fences.py).
        incarnation: the log's incarnation token (server/txlog/publishers/incarnation.py).
        own_floor: the floor of its own identity (server/txlog/publishers/ownfloor.py).
        in_fences: publishers whose last record is fenced: their highest sequence
            (server/txlog/recovery/recover.py ``Recovery.in_fences``).
    """

    report: RecoveryReport
    journals: list[Journal]
    publishers: dict[int, tuple[int, int]]
    handle: JournalHandle
    fences: list[Fence]
    incarnation: str
    own_floor: int
    in_fences: dict[int, int]


def open_files(
    config: TransactionLogConfig,
    instance: str,
    *,
    seam: FileSeam,
    block_bytes: int,
    commit: GroupCommit,
    caches: CacheWriter,
    space: DiskSpace,
    known_durable: int = 0,
) -> Opened:
    """Recover the journals and open the active one (worker thread; see the module).

    Args:
        known_durable: a seq known durable from outside the log (a replication peer
            acknowledged it): a torn tail up to it is fenced, not forgotten.

    Raises:
        JournalSequenceGap: two journals overlap.
        OSError: the directories or files cannot be used.
    """
    directory = Path(config.journal_directory)
    directory.mkdir(parents=True, exist_ok=True)
    Path(config.archive_directory).mkdir(parents=True, exist_ok=True)
    rec = recover(
        directory, Path(config.archive_directory), instance, apply=True,
        journal_size=config.journal_size, seam=seam, block_bytes=block_bytes,
        known_durable=known_durable,
    )  # fmt: skip
    # before any journal is created: a crash after it leaves a token no record has
    incarnation = own_incarnation(directory, instance, seam, fresh=not rec.journals)
    own_floor = read_floor(directory, instance, incarnation)
    if own_floor == UNREADABLE:
        # it could have said any floor: only a new identity is sure not to reuse a bookmark
        incarnation = own_incarnation(directory, instance, seam, fresh=True)
        own_floor = 0
        write_floor(seam, directory, instance, incarnation, own_floor)
    journals = [
        Journal(
            r.base,
            r.path,
            r.index,
            compression=r.compression,
            archived=r.archived,
            source=r.source,
            disk_size=r.size,
            finished=not r.active,
        )
        for r in rec.journals
    ]
    preallocated = list(rec.preallocated)
    try:
        if journals and not journals[-1].finished:
            active = journals[-1]
            handle = seam.open(active.path, create=False)
            try:
                handle.allocate(config.journal_size)
            except OSError as exc:
                space.active_unallocated(active.path, exc)
            active.disk_size = max(config.journal_size, active.index.data_len)
            caches.open_active(active.base, create=False)
        else:  # a journal to append to after the last finished one
            base = journals[-1].last_seq + 1 if journals else 1
            active = Journal(
                base, directory / journal_name(instance, base), IndexBuilder(base, block_bytes),
                prealloc=preallocated.pop(0) if preallocated else None, created=False,
            )  # fmt: skip
            handle, problem = commit.create_journal(active)
            if problem is not None:
                space.active_unallocated(active.path, problem)
            active.source = PlainSource(active.path)
            active.created = True
            active.disk_size = config.journal_size
            journals.append(active)
            caches.open_active(base, create=True)
            fsync_dir(directory)
        space.prepare(preallocated, rec.next_prealloc_number, sum(j.disk_size for j in journals))
    except BaseException:
        for j in journals:  # nothing is left open behind a failed open()
            j.close()
        raise
    return Opened(
        rec.report, journals, rec.publishers, handle, rec.fences, incarnation, own_floor,
        rec.in_fences,
    )  # fmt: skip
