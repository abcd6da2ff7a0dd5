"""Reading journal bytes and records from files (blocking: call from a worker thread).

A :class:`JournalSource` gives random access to a journal's raw bytes whatever its form:
:class:`PlainSource` preads a plain file, :class:`~spool.server.txlog.storage.compression.CompressedReader`
decompresses the chunks of a ``.zst``/``.gz`` one. The log keeps one source per journal;
:func:`read_span` turns a byte position into decoded records. :class:`RecordWindows` reads
a journal front to back in bounded windows of whole records: every reader that walks a
journal to the end of its data (``spool journal dump`` and ``verify``, recovery, SOW
rebuild, the pipeline's unindexed bytes) goes through it, so where a window ends never
decides where the data ends.

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

from spool.server.txlog.errors import CorruptRecord
from spool.server.txlog.format.batch import RecordBatch, decode_batch
from spool.server.txlog.format.codec import (
    FORMAT,
    HEADER_SIZE,
    MIN_RECORD,
    decode_records,
    record_size,
    skip_to,
)
from spool.server.txlog.format.record import Record
from spool.server.txlog.storage.compression import CompressedReader
from spool.server.txlog.storage.files import Compression

__all__ = ["WINDOW", "JournalSource", "PlainSource", "RecordWindows", "open_source", "read_span"]

#: slack read beyond ``max_bytes`` so a batch rarely needs a second read
READ_SLACK: Final = 64 * 1024
#: bytes a :class:`RecordWindows` reads at a time unless told otherwise
WINDOW: Final = 1 << 20


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


class RecordWindows:
    """A journal read from a record boundary to the end of its data, a window at a time.

    The caller decodes each window (:meth:`read`) with any of the codec's decoders
    (``decode_records``, ``scan``, ``decode_batch``...) and says where the decoder stopped
    (:meth:`advance`). Those decoders all stop the same way: at a zero length (the end of
    data), before a record the window does not hold whole, or when fewer bytes than a
    record header are left; they raise (or report) damage inside whole records
    themselves. What the bytes at the stop mean is decided here, once, by the rules
    ``spool journal verify`` applies to the whole file:

    - a zero length field ends the data, and so do 1 to 3 zero bytes at the end of the
      file (too few for a length field: a record filled the journal to within them);
    - a header whose format byte is wrong is damage (``bad format``), whatever length it
      claims;
    - the window ended before the file did: the next window starts at the stop, and is
      widened to hold a record (or a header) larger than the window;
    - otherwise the file ends inside a record (or a header): a torn record.

    After the last window (:attr:`ended`), :attr:`offset` is where the valid data ends and
    :attr:`reason` why: None when the records run to the end of the file, ``"end of
    data"`` at a zero length, ``"torn record"``, ``"bad format"``, or the damage of a
    compressed journal whose data stops at an undecodable chunk.

    Args:
        source: the journal.
        offset: a record boundary to start at.
        window: bytes read at a time (any size: a window too small for a record grows).
        size: the journal's size (the source's by default).
    """

    def __init__(
        self,
        source: JournalSource,
        offset: int = 0,
        *,
        window: int = WINDOW,
        size: int | None = None,
    ) -> None:
        if window < 1:
            raise ValueError(f"window must be at least 1 byte, not {window}")
        self.source = source
        self.offset = offset
        self.reason: str | None = None
        self._want = window
        self._size = source.size() if size is None else size
        self._buf = b""
        self._final = False
        self._done = False

    @property
    def ended(self) -> bool:
        """The data ended (:attr:`offset` and :attr:`reason` are final)."""
        return self._done

    def read(self) -> bytes | None:
        """The next window (its first byte is the record at :attr:`offset`), or None once
        the data ended.

        Raises:
            CorruptRecord: a compressed chunk does not decompress (at its offset).
            OSError: the file cannot be read.
        """
        if self._done:
            return None
        if self.offset >= self._size:
            self._finish(None)
            return None
        asked = min(self._want, self._size - self.offset)
        buf = self.source.read(self.offset, asked)
        self._final = len(buf) < asked or self.offset + len(buf) >= self._size
        self._buf = buf
        return buf

    def advance(self, stop: int) -> None:
        """The decoder took the whole records of the last window up to ``stop``."""
        buf = self._buf
        rest = len(buf) - stop
        if stop < 0 or rest < 0:
            raise ValueError(f"stop {stop} is outside the window of {len(buf)} bytes")
        self.offset += stop
        if rest == 0:
            if self._final:  # a read shorter than the size said: the file ended early
                self._finish(None if self.offset >= self._size else "torn record")
            return
        length = record_size(buf, stop) if rest >= 4 else -1
        if length == 0 or (self._final and rest < 4 and not any(buf[stop:])):
            self._finish("end of data")
            return
        if rest >= HEADER_SIZE:
            # a decoder leaves a whole header only before a record the window cuts
            if length < MIN_RECORD or length <= rest:
                raise ValueError(f"the decoder stopped before a whole record at {self.offset}")
            if buf[stop + 4] != FORMAT:  # not a record: do not read on for its length
                self._finish("bad format")
                return
        if self._final:
            self._finish("torn record")
        elif stop == 0:  # the window is too small for the record (or its header)
            self._want = max(self._want, length, HEADER_SIZE)

    def _finish(self, reason: str | None) -> None:
        self._done = True
        self._buf = b""
        damage = getattr(self.source, "damage", None) if reason is None else None
        self.reason = damage if isinstance(damage, str) else reason


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
