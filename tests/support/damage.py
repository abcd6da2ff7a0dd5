"""Damage to a stopped instance's journal files, as storage does it.

Each function edits the files of a transaction log that no process has open: a torn write
(the end of the last record zeroed), a truncation in the middle of a record, a flipped
bit in a finished journal, a damaged index file, a journal deleted from the middle of the
log. They find records with the log's own codec (server/txlog/format/codec.py), so a test names
*which* record to damage, not a byte offset it would have to compute.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from spool.server.txlog.format.codec import HEADER, scan
from spool.server.txlog.storage.files import index_name, parse_name

__all__ = [
    "RecordAt",
    "cut_last_records",
    "flip_byte",
    "flip_index_byte",
    "journals",
    "records_of",
    "remove_journal",
    "truncate_inside_last_record",
    "zero_end_of_last_record",
]


@dataclass(frozen=True, slots=True)
class RecordAt:
    """One record of a journal file: where it is and who published it."""

    offset: int
    length: int
    seq: int
    pub_hash: int
    pub_seq: int


def journals(journal_dir: Path, instance: str) -> list[Path]:
    """The plain journal files of ``instance``, in log order."""
    found = []
    for path in journal_dir.iterdir():
        parsed = parse_name(path.name, instance)
        if parsed is not None and parsed.kind == "journal" and parsed.compression is None:
            found.append((parsed.base, path))
    return [p for _, p in sorted(found)]


def records_of(path: Path) -> list[RecordAt]:
    """Every valid record of a journal file, up to the end of its data."""
    data = path.read_bytes()
    if len(data) < HEADER.size:
        return []
    first_seq = HEADER.unpack_from(data, 0)[4]
    res = scan(data, 0, len(data), first_seq, final=True)
    out = []
    seq = first_seq
    for off, length, _ts, _key, _ps in res.rows:
        fields = HEADER.unpack_from(data, off)
        out.append(RecordAt(off, length, seq, fields[6], fields[7]))
        seq += 1
    return out


def zero_end_of_last_record(path: Path, nbytes: int = 40) -> RecordAt:
    """A torn write: the last ``nbytes`` of the journal's last record become zeros."""
    last = records_of(path)[-1]
    with open(path, "r+b") as fh:
        fh.seek(last.offset + last.length - nbytes)
        fh.write(bytes(nbytes))
        fh.flush()
        os.fsync(fh.fileno())
    return last


def truncate_inside_last_record(path: Path, keep: int = 48) -> RecordAt:
    """A truncation: the file ends ``keep`` bytes into its last record (its header
    partly there), everything after is gone."""
    last = records_of(path)[-1]
    os.truncate(path, last.offset + keep)
    return last


def cut_last_records(path: Path, count: int = 1) -> list[RecordAt]:
    """Storage that lost whole records: the file ends where its last ``count`` records
    began, at a record boundary, so recovery sees a clean end. Returns them."""
    lost = records_of(path)[-count:]
    os.truncate(path, lost[0].offset)
    return lost


def flip_byte(path: Path, offset: int) -> RecordAt:
    """A bit flip: byte ``offset`` of the journal inverted. Returns the record it hit."""
    hit = next(r for r in records_of(path) if r.offset <= offset < r.offset + r.length)
    with open(path, "r+b") as fh:
        fh.seek(offset)
        byte = fh.read(1)
        fh.seek(offset)
        fh.write(bytes([byte[0] ^ 0xFF]))
        fh.flush()
        os.fsync(fh.fileno())
    return hit


def flip_index_byte(journal: Path, instance: str, offset: int) -> Path:
    """Damage the index file of ``journal``: byte ``offset`` of it inverted."""
    parsed = parse_name(journal.name, instance)
    assert parsed is not None
    index = journal.parent / index_name(instance, parsed.base)
    data = bytearray(index.read_bytes())
    data[offset % len(data)] ^= 0xFF
    index.write_bytes(bytes(data))
    return index


def remove_journal(journal: Path, instance: str) -> list[RecordAt]:
    """Delete a journal (and its index) from the middle of the log; returns its records."""
    lost = records_of(journal)
    parsed = parse_name(journal.name, instance)
    assert parsed is not None
    journal.unlink()
    index = journal.parent / index_name(instance, parsed.base)
    if index.exists():
        index.unlink()
    return lost
