"""Reading journal bytes and records from files (blocking: call from a worker thread).

A :class:`JournalSource` gives random access to a journal's raw bytes whatever its form:
:class:`PlainSource` preads a plain file, :class:`~server.txlog.compression.CompressedReader`
decompresses the chunks of a ``.zst``/``.gz`` one. The log keeps one source per journal;
:func:`read_span` turns a byte position into decoded records.

Thread-safety: sources may be read from several threads at once (``pread`` has no shared
file position). :class:`PlainSource` counts readers in flight so that a journal renamed
or removed under them is closed only once the last read finished.
"""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path
from typing import Final, Protocol

import google_crc32c

from server.txlog.batch import RecordBatch, decode_batch
from server.txlog.codec import HEADER_SIZE, MIN_RECORD, decode_records, record_size, skip_to
from server.txlog.compression import CompressedReader
from server.txlog.errors import CorruptRecord
from server.txlog.files import Compression
from server.txlog.record import Record

__all__ = ["JournalSource", "PlainSource", "open_source", "read_span"]

#: slack read beyond ``max_bytes`` so a batch rarely needs a second read
READ_SLACK: Final = 64 * 1024


class JournalSource(Protocol):
    """Random access to the raw bytes of one journal."""

    path: Path

    def read(self, offset: int, length: int) -> bytes:
        """Bytes ``[offset, offset + length)``, shorter at the end of the file."""
        ...

    def size(self) -> int:
        """Size of the raw data (a plain file's size; a compressed file's raw size)."""
        ...

    def acquire(self) -> None:
        """Note a read in flight (before handing the source to a thread)."""
        ...

    def release(self) -> None:
        """The read finished."""
        ...

    def retire(self) -> None:
        """No new reads will come: close once the reads in flight are done."""
        ...


class PlainSource:
    """A plain journal file read with ``pread``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        self._lock = threading.Lock()
        self._users = 0
        self._retired = False

    def read(self, offset: int, length: int) -> bytes:
        return os.pread(self._fd, length, offset)

    def size(self) -> int:
        return os.fstat(self._fd).st_size

    def next_data(self, offset: int) -> int | None:
        """The first offset at or after ``offset`` that may hold data (``SEEK_DATA``).

        Preallocated, never-written space reads as zeros and is skipped; None when
        nothing after ``offset`` holds data. File systems without ``SEEK_DATA`` answer
        ``offset`` itself (the caller then reads).
        """
        try:
            return os.lseek(self._fd, offset, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno == errno.ENXIO:
                return None
            return offset

    def acquire(self) -> None:
        with self._lock:
            self._users += 1

    def release(self) -> None:
        with self._lock:
            self._users -= 1
            close = self._retired and self._users == 0
        if close:
            self._close()

    def retire(self) -> None:
        with self._lock:
            self._retired = True
            close = self._users == 0
        if close:
            self._close()

    def _close(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)


class _CompressedSource(CompressedReader):
    """A compressed journal; nothing to close (each chunk read opens the file)."""

    def acquire(self) -> None:
        return None

    def release(self) -> None:
        return None

    def retire(self) -> None:
        return None


def open_source(path: Path, compression: Compression | None) -> JournalSource:
    """A source for a journal file of the given form."""
    if compression is None:
        return PlainSource(path)
    return _CompressedSource(path, compression)


class BlockCrcs(Protocol):
    """What a reader needs of a journal's index to verify whole blocks at once."""

    def block_crcs(self, start: int, end: int) -> list[tuple[int, int, int]]: ...


def verified_range(buf: bytes, base: int, blocks: list[tuple[int, int, int]]) -> tuple[int, int]:
    """The part of ``buf`` (journal bytes from offset ``base``) whose index blocks check.

    One CRC per index block (about 4 KB) replaces one per record. The range is the run of
    consecutive blocks from the first one inside ``buf`` up to the first that does not
    check; records outside it are checked one by one as before, so damage is still found
    and reported at the exact record.

    Returns:
        ``(start, stop)`` positions in ``buf``; ``(0, 0)`` when nothing was verified.
    """
    value = google_crc32c.value
    start = stop = -1
    for off, length, crc in blocks:
        pos = off - base
        if pos < 0 or (stop >= 0 and pos != stop):
            break
        if value(buf[pos : pos + length]) != crc:
            break
        if start < 0:
            start = pos
        stop = pos + length
    return (start, stop) if start >= 0 else (0, 0)


def read_span(
    source: JournalSource,
    offset: int,
    seq: int,
    end: int,
    from_seq: int,
    *,
    max_count: int,
    max_bytes: int,
    upto_seq: int,
    as_batch: bool,
    index: BlockCrcs | None = None,
) -> tuple[list[Record] | RecordBatch, int, int]:
    """Decode records ``from_seq..upto_seq`` of a journal, starting the walk at ``offset``.

    Args:
        source: the journal.
        offset: a record boundary at or before ``from_seq`` (a block start), holding
            record ``seq``.
        end: where durable data ends in this journal.
        from_seq: first record wanted.
        max_count: most records returned.
        max_bytes: stop once this many record bytes were taken (at least one record).
        upto_seq: last seq wanted.
        as_batch: return a :class:`RecordBatch` instead of a list of records.
        index: the journal's index; batch reads then verify whole index blocks with one
            CRC each (:func:`verified_range`) and check only the records outside them.

    Returns:
        ``(records, offset after them, seq after them)``.

    Raises:
        CorruptRecord: with the journal path, if the bytes are not intact records.
    """
    want = max_bytes + READ_SLACK
    path = str(source.path)
    while True:
        length = min(end - offset, want)
        if length <= 0:
            empty: list[Record] | RecordBatch = RecordBatch.empty() if as_batch else []
            return empty, offset, seq
        buf = source.read(offset, length)
        if len(buf) < length:
            raise CorruptRecord(offset + len(buf), "torn record", path)
        pos, at = skip_to(buf, 0, len(buf), seq, from_seq)
        if at < from_seq:
            if pos == 0:  # a record larger than the read: read all of it next time
                size = record_size(buf)
                if size < MIN_RECORD or offset + size > end:
                    raise CorruptRecord(offset, "bad length", path)
                want = max(want, size)
            offset += pos
            seq = at
            continue
        try:
            if as_batch:
                trusted = (
                    verified_range(buf, offset, index.block_crcs(offset, offset + len(buf)))
                    if index is not None
                    else (0, 0)
                )
                batch, stop = decode_batch(
                    buf, pos, len(buf), at, max_count=max_count, max_bytes=max_bytes,
                    upto_seq=upto_seq, trusted=trusted,
                )  # fmt: skip
                got = len(batch)
                result: list[Record] | RecordBatch = batch
            else:
                records, stop = decode_records(
                    buf, pos, len(buf), at, max_count=max_count, max_bytes=max_bytes,
                    upto_seq=upto_seq,
                )  # fmt: skip
                got = len(records)
                result = records
        except CorruptRecord as exc:
            raise CorruptRecord(offset + exc.offset, exc.reason, path) from None
        if got == 0 and at <= upto_seq and offset + pos < end:
            # the next record does not fit in what was read: read from it, all of it (the
            # read may end before its length field does)
            if len(buf) - pos >= HEADER_SIZE:
                size = record_size(buf, pos)
                if size < MIN_RECORD or offset + pos + size > end:
                    raise CorruptRecord(offset + pos, "bad length", path)
                want = max(want, size)
            elif pos == 0:
                raise CorruptRecord(offset, "torn record", path)
            offset += pos
            seq = at
            continue
        return result, offset + stop, at + got
