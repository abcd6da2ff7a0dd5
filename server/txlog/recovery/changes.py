"""What recovery changes on disk: cut damage, trim journals, rewrite index files.

Everything here runs only when recovery may change the disk (``open()``, never ``spool
journal verify`` / ``find``), in recovery's worker thread, before the log exists: no
other thread touches these files meanwhile. Journal writes go through the
:class:`~spool.server.txlog.storage.files.FileSeam`, so the same fault injection that tests the append
path tests recovery's writes.

**A disk short of room does not stop recovery** where only an optimisation needs room:
re-allocating a cut journal to ``JournalSize`` and writing index files (caches, rebuilt
at the next open) are skipped with a warning (``finish_journal`` reports the index it
could not write). Saving the bytes it cuts is not skipped: see below.

**Nothing is destroyed.** A cut journal's tail is copied to
``JournalDirectory/damaged/<journal>.<offset20>.cut`` (fsynced) before the journal is
truncated; journals after the damage are moved whole to ``damaged/``; a damaged
compressed or archived journal, which cannot be shortened in place, has its good prefix
rewritten as a plain journal in the journal directory and the original moved to
``damaged/``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from pathlib import Path
from typing import Final

from spool.server.txlog.index.builder import IndexBuilder
from spool.server.txlog.index.sealed import SealedIndex
from spool.server.txlog.recovery.checking import Examined
from spool.server.txlog.recovery.discovery import Candidate
from spool.server.txlog.storage.files import (
    DAMAGED_DIR,
    FileSeam,
    JournalHandle,
    fsync_dir,
    index_name,
    journal_name,
    write_atomic,
)
from spool.server.txlog.storage.source import JournalSource, open_source

__all__ = [
    "cut_journal",
    "finish_journal",
    "move_aside",
    "remove_files",
    "sync_directories",
]

#: bytes copied at a time
COPY_CHUNK: Final = 8 << 20

log = logging.getLogger("spool.txlog")


def remove_files(paths: list[Path]) -> None:
    """Delete files recovery found redundant (duplicates, leftovers); gone ones are fine."""
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def cut_journal(
    ex: Examined, journal_dir: Path, instance: str, seam: FileSeam, journal_size: int
) -> str:
    """Cut the damaged tail of ``ex``: keep the bytes in ``damaged/``, shorten the journal.

    A compressed or archived journal cannot be shortened in place: its valid prefix is
    written as a plain journal in the journal directory, the original moved aside, and
    ``ex`` then describes the plain journal (its ``cand`` and ``source`` are replaced).

    Args:
        ex: the damaged journal.
        journal_dir: the journal directory (``damaged/`` is made inside it).
        instance: the instance name (a rewritten journal's file name).
        seam: the file seam journal writes go through.
        journal_size: re-allocate the journal to this size (0: do not).

    Returns:
        Where the cut bytes were kept.
    """
    damaged_dir = journal_dir / DAMAGED_DIR
    damaged_dir.mkdir(exist_ok=True)
    cand = ex.cand
    saved: Path
    if cand.compression is None and not cand.archived:
        saved = damaged_dir / f"{cand.path.name}.{ex.end:020d}.cut"
        _copy_range(ex.source, ex.end, ex.garbage_end, saved)
        handle = seam.open(cand.path, create=False)
        try:
            handle.truncate(ex.end)
            _allocate(handle, journal_size)
            handle.fsync()
        finally:
            handle.close()
        fsync_dir(damaged_dir)
        return str(saved)
    plain = journal_dir / journal_name(instance, cand.base)
    handle = seam.open(plain, create=True)
    try:
        pos = 0
        while pos < ex.end:
            buf = ex.source.read(pos, min(COPY_CHUNK, ex.end - pos))
            handle.write(pos, buf)
            pos += len(buf)
        _allocate(handle, journal_size)
        handle.fsync()
    finally:
        handle.close()
    saved = damaged_dir / cand.path.name
    ex.source.retire()
    shutil.move(cand.path, saved)
    _unlink(cand.index_path)
    ex.source = open_source(plain, None)
    ex.cand = Candidate(cand.base, plain, None, False, None)
    fsync_dir(journal_dir)
    return str(saved)


def move_aside(cand: Candidate, journal_dir: Path) -> str:
    """Move a journal that follows the damage to ``damaged/``, and drop its index.

    Returns:
        Where the journal now is.
    """
    damaged_dir = journal_dir / DAMAGED_DIR
    damaged_dir.mkdir(exist_ok=True)
    dest = damaged_dir / cand.path.name
    shutil.move(cand.path, dest)
    _unlink(cand.index_path)
    return str(dest)


def finish_journal(
    ex: Examined, *, active: bool, instance: str, seam: FileSeam, problems: list[str]
) -> IndexBuilder | SealedIndex:
    """Leave a kept journal's files as the log expects them.

    A finished plain journal is trimmed to its data (a crash between the steps of a roll
    can leave it longer) and gets a sealed index if it had none; the active journal gets
    its open index rewritten unless the one on disk is right as it is. An index file that
    cannot be written (a full disk) is added to ``problems`` and the log goes on with the
    index in memory (the next open rebuilds the file).

    Returns:
        The index the log should use: the sealed index just written and mapped, or
        ``ex.index``.
    """
    cand = ex.cand
    index = ex.index
    ipath = cand.path.parent / index_name(instance, cand.base)
    if not active and cand.compression is None and ex.size > ex.end:
        _truncate(cand.path, ex.end, seam)
    try:
        if active:
            assert isinstance(index, IndexBuilder)
            if not ex.index_intact or ex.damaged:
                write_atomic(ipath, index.open_form(), durable=False)
        elif isinstance(index, IndexBuilder):
            write_atomic(ipath, index.seal())
            sealed = SealedIndex.load(ipath, cand.base)
            if sealed is not None:
                return sealed
    except OSError as exc:
        log.warning("index %s not written: %s", ipath, exc)
        problems.append(f"{ipath}: not written: {exc}")
    return index


def sync_directories(journal_dir: Path, archive_dir: Path | None) -> None:
    """Make renames, moves and deletions in both directories durable."""
    for d in {journal_dir, archive_dir or journal_dir}:
        if d.is_dir():
            fsync_dir(d)


def _allocate(handle: JournalHandle, journal_size: int) -> None:
    """Allocate a journal to ``JournalSize`` when there is room; without it the writes
    extend the file (preallocation is an optimisation, see append/space.py)."""
    if journal_size:
        try:
            handle.allocate(journal_size)
        except OSError as exc:
            log.warning("journal not preallocated (%s); writes will extend it", exc)


def _copy_range(source: JournalSource, start: int, stop: int, dest: Path) -> None:
    with open(dest, "wb") as out:
        pos = start
        while pos < stop:
            buf = source.read(pos, min(COPY_CHUNK, stop - pos))
            if not buf:
                break
            out.write(buf)
            pos += len(buf)
        out.flush()
        os.fdatasync(out.fileno())


def _truncate(path: Path, size: int, seam: FileSeam) -> None:
    """Trim a finished journal left longer than its data (a crash between roll steps)."""
    handle = seam.open(path, create=False)
    try:
        handle.truncate(size)
        handle.fsync()
    finally:
        handle.close()


def _unlink(path: Path | None) -> None:
    if path is not None:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
