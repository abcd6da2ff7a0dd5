"""A journal written anew: its damage fenced, or its fenced records written back.

Fencing damage and repairing it both change records in the middle of the log, which the
log otherwise never does. Both write a **new journal file with the same base** - the
intact bytes of the old one copied, the placeholders or the repaired records encoded in
between (server/txlog/damage/fences.py) - and its sealed index, then swap them in for the old
ones. Every step is safe to interrupt (SIGKILL, a power cut):

1. the old journal is kept first: a hard link (a copy across file systems) in
   ``JournalDirectory/damaged/``, when it holds damaged bytes;
2. ``NAME.<base>.journal.new`` and ``NAME.<base>.index.new`` are written and fsynced. A
   complete pair (the index valid and the journal exactly as long as the data it
   indexes) is the **commit point**: from then on the rewrite is finished forward;
3. an old file of another name (a compressed journal being rewritten plain) is removed,
   ``.journal.new`` renamed over the journal, ``.index.new`` over its index (both renames
   through the file seam, as every journal write), and the directory fsynced.

:func:`adopt_pending` finishes step 3 at the next open for a pair that reached step 2, and
deletes an incomplete one (the old journal is still whole then). A journal and an index
that do not match each other after a crash between the two renames cannot happen: the
index is renamed only after the journal, and an ``.index.new`` left alone is renamed at the
next open.

Blocking I/O: call from a worker thread (recovery's, or one the log hands the rewrite to).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from spool.server.txlog.damage.fences import Part
from spool.server.txlog.index.builder import IndexBuilder
from spool.server.txlog.index.fileformat import parse_sealed
from spool.server.txlog.recovery.checking import scan_into
from spool.server.txlog.storage.files import (
    EXT,
    FileSeam,
    OsFileSeam,
    fsync_dir,
    index_name,
    journal_name,
    write_atomic,
)
from spool.server.txlog.storage.source import JournalSource, open_source

__all__ = ["NEW_SUFFIX", "adopt_pending", "keep_damaged", "rewrite_journal"]

#: the suffix of a rewrite's files until they are swapped in
NEW_SUFFIX: Final = ".new"
#: bytes copied at a time
COPY_CHUNK: Final = 8 << 20


def keep_damaged(path: Path, damaged_dir: Path, name: str) -> str:
    """Keep a journal's bytes in ``damaged/`` under ``name`` (a hard link, or a copy
    across file systems), fsynced; returns where."""
    damaged_dir.mkdir(exist_ok=True)
    dest = damaged_dir / name
    with contextlib.suppress(FileNotFoundError):
        dest.unlink()
    try:
        os.link(path, dest)
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP):
            raise
        shutil.copyfile(path, dest)
        with open(dest, "rb") as fh:
            os.fsync(fh.fileno())
    fsync_dir(damaged_dir)
    return str(dest)


def rewrite_journal(
    *,
    directory: Path,
    instance: str,
    base: int,
    parts: Sequence[Part],
    source: JournalSource | None,
    replaces: Path | None,
    seam: FileSeam,
    block_bytes: int,
) -> Path:
    """Write a journal of base ``base`` in ``directory`` from ``parts`` and swap it in.

    Args:
        directory: where the journal lives (the journal or the archive directory).
        instance: the instance name.
        base: its base seq.
        parts: its contents in order: encoded records, or ranges of ``source``.
        source: the old journal's bytes (for the ranges).
        replaces: the old journal file, removed when its name differs from the new one's
            (a compressed journal written plain); None for a journal that did not exist.
        seam: the file seam journal writes go through.
        block_bytes: the index's block size.

    Returns:
        The journal's path (plain).
    """
    final = directory / journal_name(instance, base)
    new = final.with_name(final.name + NEW_SUFFIX)
    handle = seam.open(new, create=not new.exists())
    try:
        handle.truncate(0)
        pos = 0
        for part in parts:
            if isinstance(part, bytes):
                handle.write(pos, part)
                pos += len(part)
                continue
            assert source is not None
            start, end = part
            while start < end:
                buf = source.read(start, min(COPY_CHUNK, end - start))
                if not buf:
                    raise OSError(errno.EIO, f"{source.path}: short read at {start}")
                handle.write(pos, buf)
                pos += len(buf)
                start += len(buf)
        handle.fsync()
    finally:
        handle.close()
    built = open_source(new, None)
    try:
        builder = IndexBuilder(base, block_bytes)
        end, reason, _ = scan_into(builder, built, 0, pos)
    finally:
        built.retire()
    if end != pos or reason not in (None, "end of data"):
        raise OSError(errno.EIO, f"{new}: the rewritten journal does not check ({reason})")
    index_new = directory / (index_name(instance, base) + NEW_SUFFIX)
    write_atomic(index_new, builder.seal())
    fsync_dir(directory)
    _swap(directory, instance, base, replaces, seam)
    return final


def _swap(directory: Path, instance: str, base: int, replaces: Path | None, seam: FileSeam) -> None:
    """Step 3 of the module docstring."""
    final = directory / journal_name(instance, base)
    new = final.with_name(final.name + NEW_SUFFIX)
    if new.exists():
        if replaces is not None and replaces != final:
            with contextlib.suppress(FileNotFoundError):
                replaces.unlink()
        for ext in EXT.values():  # a compressed copy would outrank the plain one at open
            with contextlib.suppress(FileNotFoundError):
                (directory / (final.name + ext)).unlink()
        seam.rename(new, final)
    index = directory / index_name(instance, base)
    seam.rename(index.with_name(index.name + NEW_SUFFIX), index)
    fsync_dir(directory)


def adopt_pending(directory: Path, instance: str, seam: FileSeam | None = None) -> list[int]:
    """Finish the rewrites a crash interrupted after their commit point (renaming through
    ``seam``, the real one by default); delete the files of those it interrupted before
    it. Returns the bases of the journals finished."""
    files = seam if seam is not None else OsFileSeam()
    prefix = instance + "."
    finished = []
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    for name in sorted(names):
        if name.startswith(prefix) and name.endswith(NEW_SUFFIX + ".tmp"):
            with contextlib.suppress(FileNotFoundError):  # an index.new half written
                (directory / name).unlink()
            continue
        if not name.startswith(prefix) or not name.endswith(NEW_SUFFIX):
            continue
        stem = name[len(prefix) : -len(NEW_SUFFIX)]
        digits, _, kind = stem.partition(".")
        if not digits.isdigit() or kind not in ("journal", "index"):
            continue
        base = int(digits)
        if kind == "journal" and (directory / (index_name(instance, base) + NEW_SUFFIX)).exists():
            continue  # handled with its index below
        index_new = directory / (index_name(instance, base) + NEW_SUFFIX)
        journal_new = directory / (journal_name(instance, base) + NEW_SUFFIX)
        if kind == "index" and _complete(index_new, journal_new, base):
            _swap(directory, instance, base, None, files)
            finished.append(base)
            continue
        for path in (index_new, journal_new):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
    return finished


def _complete(index_new: Path, journal_new: Path, base: int) -> bool:
    """Whether a rewrite reached its commit point (a valid index; its journal exactly the
    length of the data it indexes, or already swapped in)."""
    try:
        footer = parse_sealed(index_new.read_bytes(), base)
    except OSError:
        return False
    if footer is None:
        return False
    if not journal_new.exists():
        final = journal_new.with_name(journal_new.name[: -len(NEW_SUFFIX)])
        try:
            return final.stat().st_size == footer.data_len
        except FileNotFoundError:
            return False
    return journal_new.stat().st_size == footer.data_len
