"""Damage to a stopped instance's journal and index files: what a torn write, a lost
tail or a bad sector leaves.

Each function changes one file and returns what it did, in words and numbers, for the
history: the file, the offset, the bytes, and the record (local seq, publisher hash and
sequence) the damage falls in. They are pure file operations on an instance that is not
running.
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path
from typing import Any

from spool.server.txlog.cli import iter_file_records
from spool.server.txlog.errors import CorruptRecord
from spool.server.txlog.format.codec import HEADER_SIZE, record_size
from spool.server.txlog.storage.files import fsync_dir, parse_name

__all__ = ["bit_flip", "journals", "missing_journal", "torn_tail", "truncate_tail"]


def journals(journal_dir: Path, instance: str) -> list[Path]:
    """The instance's uncompressed journals, oldest first."""
    found = []
    for p in journal_dir.iterdir():
        parsed = parse_name(p.name, instance)
        if parsed is not None and parsed.kind == "journal" and not parsed.compression:
            found.append((parsed.base, p))
    return [p for _, p in sorted(found)]


def _records(path: Path) -> list[tuple[int, int, Any]]:
    """``(offset, size, record)`` of each intact record of the file."""
    out = []
    data = path.read_bytes()
    try:
        for offset, rec in iter_file_records(path):
            out.append((offset, record_size(data, offset), rec))
    except CorruptRecord:
        pass
    return out


def _last_record(journal_dir: Path, instance: str) -> tuple[Path, int, int, Any] | None:
    for path in reversed(journals(journal_dir, instance)):
        recs = _records(path)
        if recs:
            offset, size, rec = recs[-1]
            return path, offset, size, rec
    return None


def _describe(path: Path, offset: int, rec: Any) -> dict[str, Any]:
    return {
        "file": path.name,
        "offset": offset,
        "seq": rec.seq,
        "pub_hash": rec.pub_hash,
        "pub_seq": rec.pub_seq,
        "topic": rec.topic,
        "kind": int(rec.kind),
    }


def torn_tail(journal_dir: Path, instance: str, count: int) -> dict[str, Any] | None:
    """Zero the last ``count`` bytes of the last record (a torn write of an fsynced
    record), its header left whole: the start of the write reached the disk. Zeroing a
    whole record (one no longer than ``count``) would make it indistinguishable from
    space never written, which is storage dropping an fsynced write (``lost-writes``),
    not a torn one (docs/transaction-log.md "Recovery", step 5)."""
    last = _last_record(journal_dir, instance)
    if last is None:
        return None
    path, offset, size, rec = last
    n = max(1, min(count, size - HEADER_SIZE))
    with open(path, "r+b") as f:
        f.seek(offset + size - n)
        f.write(b"\0" * n)
        f.flush()
        os.fsync(f.fileno())
    return {**_describe(path, offset, rec), "zeroed": n}


def truncate_tail(journal_dir: Path, instance: str, count: int) -> dict[str, Any] | None:
    """Cut the journal file inside its last record (a file system that lost its tail):
    at least one byte of it stays, so recovery sees the cut. Whole records lost at a
    clean end are storage dropping fsynced writes, which the journal alone cannot
    tell (docs/transaction-log.md "Recovery", step 5)."""
    last = _last_record(journal_dir, instance)
    if last is None:
        return None
    path, offset, size, rec = last
    n = max(1, min(count, size - 1))
    os.truncate(path, offset + size - n)
    return {**_describe(path, offset, rec), "cut_at": offset + size - n}


def bit_flip(
    journal_dir: Path, instance: str, which: str, rng: random.Random
) -> dict[str, Any] | None:
    """Flip one bit of a record in a closed journal (or the active one when there is no
    other), or of a closed journal's index file (``which``: ``journal`` or ``index``)."""
    files = journals(journal_dir, instance)
    if not files:
        return None
    closed = files[:-1] or files
    path = rng.choice(closed)
    if which == "index":
        index = path.with_suffix(".index")
        if index.exists() and index.stat().st_size > 0:
            at = rng.randrange(index.stat().st_size)
            _flip(index, at, rng)
            return {"file": index.name, "offset": at}
    recs = _records(path)
    if not recs:
        return None
    offset, size, rec = rng.choice(recs)
    at = offset + rng.randrange(size)
    _flip(path, at, rng)
    return {**_describe(path, offset, rec), "flipped_at": at}


def _flip(path: Path, at: int, rng: random.Random) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        byte = f.read(1)[0]
        f.seek(at)
        f.write(bytes([byte ^ (1 << rng.randrange(8))]))
        f.flush()
        os.fsync(f.fileno())


def missing_journal(
    journal_dir: Path, instance: str, rng: random.Random, keep: Path | None = None
) -> dict[str, Any] | None:
    """Delete a closed journal between two others, and its index (a file lost from the
    middle of the log); None when there are fewer than three journals. ``keep``: a
    directory the journal is copied to first, with the one before it (the repair writes
    its records back in a peer's order; the copy keeps the order they had here)."""
    files = journals(journal_dir, instance)
    middle = files[1:-1]
    if not middle:
        return None
    path = rng.choice(middle)
    recs = _records(path)
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        for f in files[files.index(path) - 1 : files.index(path) + 1]:
            shutil.copy2(f, keep / f.name)
    index = path.with_suffix(".index")
    path.unlink()
    index.unlink(missing_ok=True)
    fsync_dir(journal_dir)
    out: dict[str, Any] = {"file": path.name, "records": len(recs)}
    if recs:
        out["first_seq"], out["last_seq"] = recs[0][2].seq, recs[-1][2].seq
    return out
