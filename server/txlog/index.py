"""Sparse per-journal indexes: seq -> offset, time -> seq, publisher -> sequences.

An index cuts its journal into *blocks* of about :data:`BLOCK_BYTES` (records are never
split) and keeps, per block, where it starts, which seqs it holds, the running maximum
timestamp at its end and the CRC-32C of its bytes; and, per publisher present in a block,
the range of that publisher's sequences in it. A lookup (by seq, time or bookmark) is a
binary search to one block and then a read of that block (at most a few KB): never a
scan of the log. The block CRCs let recovery check a whole journal at disk speed.

Indexes are caches: recovery rebuilds a missing or invalid one from the journal, so
deleting ``*.index`` files loses nothing.

The index file ``NAME.<base20>.index`` has two forms. Both start with the 32-byte header::

    0   8  magic        b"SPOOLIDX"
    8   1  version      1
    9   1  form         1 = open (appended while the journal is active), 2 = sealed
    10  2  reserved
    12  4  block_bytes  the target block size used
    16  8  base_seq     the journal's base sequence
    24  4  header_crc   CRC-32C of bytes [0, 24)
    28  4  reserved

Block entry (48 bytes; little-endian)::

    0   8  first_seq    seq of the block's first record
    8   8  offset       journal offset of the block
    16  4  length       bytes of journal covered
    20  4  count        records in the block
    24  8  ts_max       i64 running maximum timestamp_us (this journal) at the block's end
    32  4  data_crc     CRC-32C of the block's journal bytes
    36  4  last_rel     offset of the block's last record, relative to ``offset``
    40  2  npub         open form: publisher-range entries following (by pub_hash)
    42  2  reserved
    44  4  entry_crc    open form: CRC-32C of this entry (this field as 0) + its ranges

Publisher-range entry (40 bytes; a publisher's lowest and highest sequence in the block,
its first and last there except under a late key, server/txlog/record.py)::

    0   8  pub_hash     8  8  first_pub_seq    16 8  last_pub_seq
    24  8  last_seq     seq of the last_pub_seq record
    32  4  block        block number      36 4  count   records of that publisher in it

**Open form** (the active journal): header, then block entries each followed by its
``npub`` range entries, appended by the flusher after the journal bytes they describe were
fsynced (the index itself is not fsynced: a torn or stale entry fails its ``entry_crc`` or
its ``data_crc`` against the journal and recovery scans from there).

**Sealed form** (written once when a journal is finished; read through ``mmap``)::

    header | block entries (48 x nblocks) | range entries sorted by (pub_hash, first)
           | publisher summaries sorted by pub_hash (40 x npubs) | footer (112 bytes)

Publisher summary: ``pub_hash, min_pub_seq, max_pub_seq, last_seq, count`` (5 x u64).
Footer: ``count, data_len, first_seq, last_seq, first_ts, last_ts, ts_max, first_pub_hash,
first_pub_seq, last_pub_hash, last_pub_seq`` (u64/i64), ``nblocks, nranges, npubs``
(u32), magic ``0x58495053`` (u32), reserved (u32), ``file_crc`` (u32, CRC-32C of every
byte before it).

Both :class:`IndexBuilder` and :class:`SealedIndex` answer the same questions
(``span_for_seq``, ``span_for_time``, ``span_for_bookmark``, ``publisher``,
``publishers`` and the journal's first/last facts), so lookups do not care which one a
journal has.

Thread-safety: an :class:`IndexBuilder` belongs to the event loop while its journal is
active and is read-only once handed to the flusher for sealing; a :class:`SealedIndex` is
immutable.
"""

from __future__ import annotations

import bisect
import mmap
import struct
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final, NamedTuple

import google_crc32c

from server.txlog.codec import ScanResult

__all__ = [
    "BLOCK_BYTES",
    "BlockSpan",
    "IndexBuilder",
    "OpenIndexEntry",
    "PublisherSummary",
    "SealedIndex",
    "encode_open_header",
    "parse_open_index",
]

BLOCK_BYTES: Final = 4096
MAGIC: Final = b"SPOOLIDX"
VERSION: Final = 1
FORM_OPEN: Final = 1
FORM_SEALED: Final = 2
FOOTER_MAGIC: Final = 0x58495053

HEADER: Final = struct.Struct("<8sBBHIQI4x")  # 32
BLOCK: Final = struct.Struct("<QQIIqIIHHI")  # 48
RANGE: Final = struct.Struct("<QQQQII")  # 40
PUB: Final = struct.Struct("<QQQQQ")  # 40
FOOTER: Final = struct.Struct("<QQQQqqqQQQQIIIII")  # 108
FOOTER_SIZE: Final = 112

_extend = google_crc32c.extend
_value = google_crc32c.value


@dataclass(frozen=True, slots=True)
class BlockSpan:
    """A byte range of a journal to read for a lookup.

    Attributes:
        offset: journal offset of the first record of the span.
        seq: seq of that record.
        length: bytes in the span (whole records).
        count: records in the span.
    """

    offset: int
    seq: int
    length: int
    count: int


@dataclass(frozen=True, slots=True)
class PublisherSummary:
    """One publisher's presence in one journal."""

    pub_hash: int
    min_pub_seq: int
    max_pub_seq: int
    last_seq: int
    count: int


def encode_open_header(base_seq: int, block_bytes: int = BLOCK_BYTES) -> bytes:
    """The 32-byte header of an open-form index."""
    return _header(FORM_OPEN, base_seq, block_bytes)


def _header(form: int, base_seq: int, block_bytes: int) -> bytes:
    raw = HEADER.pack(MAGIC, VERSION, form, 0, block_bytes, base_seq, 0)
    crc = _value(raw[:24])
    return HEADER.pack(MAGIC, VERSION, form, 0, block_bytes, base_seq, crc)


def _parse_header(data: bytes | mmap.mmap) -> tuple[int, int, int] | None:
    """``(form, block_bytes, base_seq)`` of a valid header, else None."""
    if len(data) < HEADER.size:
        return None
    magic, version, form, _, block_bytes, base, crc = HEADER.unpack_from(data, 0)
    if magic != MAGIC or version != VERSION or _value(bytes(data[:24])) != crc:
        return None
    return form, block_bytes, base


class IndexBuilder:
    """The index of the active journal, built record by record on the event loop.

    Closed blocks are kept in compact arrays and per-publisher range lists; the block
    being filled is a short list of per-record rows, summarized when it closes, so
    :meth:`add` stays a tuple append and a CRC update. :meth:`add` returns the encoded
    open-form entry when it closes a block, for the caller to persist after the journal
    bytes are durable.
    """

    def __init__(self, base_seq: int, block_bytes: int = BLOCK_BYTES) -> None:
        self.base = base_seq
        self.block_bytes = block_bytes
        self.b_first = array("Q")
        self.b_off = array("Q")
        self.b_len = array("Q")
        self.b_cnt = array("Q")
        self.b_ts = array("q")
        self.b_crc = array("Q")
        self.b_last_rel = array("Q")
        # pub_hash -> [[first_ps, last_ps, last_seq, block, count], ...] in log order
        self.ranges: dict[int, list[list[int]]] = {}
        # pub_hash -> [min_ps, max_ps, last_seq, count] over the closed blocks
        self.summary: dict[int, list[int]] = {}
        # the block being filled: (offset, length, ts, pub_hash, pub_seq) per record
        self._rows: list[tuple[int, int, int, int, int]] = []
        self._cur_first = base_seq
        self._cur_off = 0
        self._cur_crc = 0
        self._closed_count = 0
        self._closed_end = 0
        self._closed_ts_max = -(1 << 63)
        self._first: tuple[int, int, int] | None = None  # ts, pub_hash, pub_seq
        self._closed_last = (0, 0, 0)

    # -- the journal's facts and lookups ------------------------------------------------

    @property
    def count(self) -> int:
        return self._closed_count + len(self._rows)

    @property
    def data_len(self) -> int:
        rows = self._rows
        return rows[-1][0] + rows[-1][1] if rows else self._closed_end

    @property
    def first_seq(self) -> int:
        return self.base

    @property
    def last_seq(self) -> int:
        return self.base + self._closed_count + len(self._rows) - 1

    @property
    def first_ts(self) -> int:
        return self._first[0] if self._first else 0

    @property
    def last_ts(self) -> int:
        return self._rows[-1][2] if self._rows else self._closed_last[0]

    @property
    def ts_max(self) -> int:
        rows = self._rows
        return max(self._closed_ts_max, max(r[2] for r in rows)) if rows else self._closed_ts_max

    @property
    def first_bookmark(self) -> tuple[int, int]:
        return (self._first[1], self._first[2]) if self._first else (0, 0)

    @property
    def last_bookmark(self) -> tuple[int, int]:
        if self._rows:
            return self._rows[-1][3], self._rows[-1][4]
        return self._closed_last[1], self._closed_last[2]

    @property
    def block_count(self) -> int:
        """Complete (closed) blocks."""
        return len(self.b_first)

    def _block(self, i: int) -> BlockSpan:
        return BlockSpan(self.b_off[i], self.b_first[i], self.b_len[i], self.b_cnt[i])

    def _current(self) -> BlockSpan | None:
        rows = self._rows
        if not rows:
            return None
        return BlockSpan(self._cur_off, self._cur_first, self.data_len - self._cur_off, len(rows))

    def span_for_seq(self, seq: int) -> BlockSpan | None:
        if not self.base <= seq <= self.last_seq:
            return None
        if self._rows and seq >= self._cur_first:
            return self._current()
        return self._block(bisect.bisect_right(self.b_first, seq) - 1)

    def block_crcs(self, start: int, end: int) -> list[tuple[int, int, int]]:
        """``(offset, length, crc)`` of the closed blocks lying inside ``[start, end)``.

        Readers verify whole blocks with one CRC each instead of one per record. Safe to
        call from a reader thread while the loop closes blocks (only indexes below the
        shortest column are read).
        """
        offs, lens, crcs = self.b_off, self.b_len, self.b_crc
        n = min(len(offs), len(lens), len(crcs))
        i = bisect.bisect_left(offs, start, 0, n)
        out: list[tuple[int, int, int]] = []
        while i < n and offs[i] + lens[i] <= end:
            out.append((offs[i], lens[i], crcs[i]))
            i += 1
        return out

    def span_for_time(self, ts: int) -> BlockSpan | None:
        i = bisect.bisect_left(self.b_ts, ts)
        if i < len(self.b_ts):
            return self._block(i)
        if any(r[2] >= ts for r in self._rows):
            return self._current()
        return None

    def span_for_bookmark(self, pub_hash: int, pub_seq: int) -> BlockSpan | None:
        if any(r[3] == pub_hash and r[4] == pub_seq for r in self._rows):
            return self._current()
        rl = self.ranges.get(pub_hash)
        if not rl:
            return None
        i = bisect.bisect_right(rl, pub_seq, key=_first_ps) - 1
        if i < 0 or pub_seq > rl[i][1]:
            return None
        return self._block(rl[i][3])

    def _open_pubs(self) -> dict[int, list[int]]:
        """Per publisher in the block being filled: ``[min_ps, max_ps, count, last_seq]``.

        A publisher's sequences increase along the log under its own key, so these are its
        first and last there; under a late key (server/txlog/record.py) they need not.
        """
        pubs: dict[int, list[int]] = {}
        seq = self._cur_first
        for _off, _len, _ts, ph, ps in self._rows:
            if ph:
                p = pubs.get(ph)
                if p is None:
                    pubs[ph] = [ps, ps, 1, seq]
                else:
                    if ps > p[1]:
                        p[1] = ps
                    elif ps < p[0]:
                        p[0] = ps
                    p[2] += 1
                    p[3] = seq
            seq += 1
        return pubs

    def late_spans(self, key: int, pub_seq: int) -> list[BlockSpan]:
        """Every block whose range of ``key`` covers ``pub_seq``: a late key's ranges need
        not increase along the log, so no binary search (they are few)."""
        spans = [self._block(r[3]) for r in self.ranges.get(key, ()) if r[0] <= pub_seq <= r[1]]
        if any(r[3] == key and r[4] == pub_seq for r in self._rows):
            current = self._current()
            if current is not None:
                spans.append(current)
        return spans

    def publisher(self, pub_hash: int) -> PublisherSummary | None:
        cur = self._open_pubs().get(pub_hash) if self._rows else None
        return self._merged(pub_hash, cur)

    def _merged(self, pub_hash: int, cur: list[int] | None) -> PublisherSummary | None:
        s = self.summary.get(pub_hash)
        if cur is None:
            return None if s is None else PublisherSummary(pub_hash, s[0], s[1], s[2], s[3])
        if s is None:
            return PublisherSummary(pub_hash, cur[0], cur[1], cur[3], cur[2])
        return PublisherSummary(
            pub_hash, min(s[0], cur[0]), max(s[1], cur[1]), cur[3], s[3] + cur[2]
        )

    def key_ranges(self) -> Iterator[tuple[int, int, int, int, BlockSpan | None]]:
        """Every ``(index key, first, last, count, block)`` range of the journal.

        Closed blocks give their publisher ranges; the records of the block being filled
        come one by one, exact, with no block (server/txlog/holdings.py reads these to
        rebuild the gap table).
        """
        for h, rows in self.ranges.items():
            for first, last, _last_seq, block, count in rows:
                yield h, first, last, count, self._block(block)
        for _off, _len, _ts, ph, ps in self._rows:
            if ph:
                yield ph, ps, ps, 1, None

    def publishers(self) -> Iterator[PublisherSummary]:
        open_pubs = self._open_pubs()
        for h in self.summary.keys() | open_pubs.keys():
            p = self._merged(h, open_pubs.get(h))
            assert p is not None
            yield p

    # -- building ----------------------------------------------------------------------

    def add(
        self, seq: int, offset: int, length: int, ts: int, pub_hash: int, pub_seq: int, data: bytes
    ) -> bytes | None:
        """Account one appended record (``data`` is its encoded bytes).

        Returns:
            The open-form entry of the block this record closed, else None.
        """
        rows = self._rows
        if not rows:
            self._cur_first = seq
            self._cur_off = offset
            if self._first is None:
                self._first = (ts, pub_hash, pub_seq)
        rows.append((offset, length, ts, pub_hash, pub_seq))
        self._cur_crc = _extend(self._cur_crc, data)
        if offset + length - self._cur_off >= self.block_bytes:
            return self.close_block()
        return None

    def add_scanned(self, buf: bytes, buf_offset: int, res: ScanResult) -> None:
        """Account every record of a :func:`~server.txlog.codec.scan` of ``buf``.

        ``buf_offset`` is the journal offset of ``buf[0]`` (the scan's ``base``). Block
        CRCs are computed over whole runs of ``buf`` rather than record by record, and
        no open-form entries are encoded (recovery writes the index whole).
        """
        scanned = res.rows
        n = len(scanned)
        if not n:
            return
        if self._first is None:
            r = scanned[0]
            self._first = (r[2], r[3], r[4])
        seq = res.next_seq - n
        block_bytes = self.block_bytes
        i = 0
        while i < n:
            if not self._rows:
                self._cur_first = seq + i
                self._cur_off = scanned[i][0]
            limit = self._cur_off + block_bytes
            j = i
            while j < n and scanned[j][0] + scanned[j][1] < limit:
                j += 1
            stop = j + 1 if j < n else n
            self._rows.extend(scanned[i:stop])
            first_off = scanned[i][0] - buf_offset
            last = scanned[stop - 1]
            self._cur_crc = _extend(self._cur_crc, buf[first_off : last[0] + last[1] - buf_offset])
            if j < n:
                self.close_block(encode=False)
            i = stop

    def close_block(self, *, encode: bool = True) -> bytes:
        """Close the block being filled (if any) and return its open-form entry.

        Args:
            encode: build the entry (False when nobody will write it, saving the work).
        """
        rows = self._rows
        if not rows:
            return b""
        block_no = len(self.b_first)
        first = self._cur_first
        pubs = self._open_pubs()
        ts_max = max(self._closed_ts_max, max(r[2] for r in rows))
        last = rows[-1]
        self.b_first.append(first)
        self.b_off.append(self._cur_off)
        self.b_len.append(last[0] + last[1] - self._cur_off)
        self.b_cnt.append(len(rows))
        self.b_ts.append(ts_max)
        self.b_crc.append(self._cur_crc)
        self.b_last_rel.append(last[0] - self._cur_off)
        ranges_out = []
        all_ranges = self.ranges
        summary = self.summary
        for h, (f, lst, cnt, last_seq) in sorted(pubs.items()):
            row = [f, lst, last_seq, block_no, cnt]
            rl = all_ranges.get(h)
            if rl is None:
                all_ranges[h] = [row]
                summary[h] = [f, lst, last_seq, cnt]
            else:
                rl.append(row)
                s = summary[h]
                if f < s[0]:
                    s[0] = f
                if lst > s[1]:
                    s[1] = lst
                s[2] = last_seq
                s[3] += cnt
            if encode:
                ranges_out.append(RANGE.pack(h, f, lst, last_seq, block_no, cnt))
        self._closed_count += len(rows)
        self._closed_end = last[0] + last[1]
        self._closed_ts_max = ts_max
        self._closed_last = (last[2], last[3], last[4])
        self._cur_first = first + len(rows)
        self._cur_off = self._closed_end
        self._cur_crc = 0
        self._rows = []
        return self._entry(block_no, ranges_out) if encode else b""

    def _entry(self, i: int, ranges: list[bytes]) -> bytes:
        fields = (
            self.b_first[i], self.b_off[i], self.b_len[i], self.b_cnt[i], self.b_ts[i],
            self.b_crc[i], self.b_last_rel[i], len(ranges), 0,
        )  # fmt: skip
        tail = b"".join(ranges)
        crc = _extend(_value(BLOCK.pack(*fields, 0)), tail)
        return BLOCK.pack(*fields, crc) + tail

    def restore(self, entries: list[OpenIndexEntry]) -> None:
        """Re-add closed blocks read from an open-form index (already verified)."""
        all_ranges = self.ranges
        summary = self.summary
        b_first, b_off, b_len, b_cnt = self.b_first, self.b_off, self.b_len, self.b_cnt
        b_ts, b_crc, b_rel = self.b_ts, self.b_crc, self.b_last_rel
        block_no = len(b_first)
        for first, off, length, cnt, ts_max, dcrc, last_rel, ranges in entries:
            b_first.append(first)
            b_off.append(off)
            b_len.append(length)
            b_cnt.append(cnt)
            b_ts.append(ts_max)
            b_crc.append(dcrc)
            b_rel.append(last_rel)
            for h, f, lst, last_seq, _blk, rcnt in ranges:
                row = [f, lst, last_seq, block_no, rcnt]
                rl = all_ranges.get(h)
                if rl is None:
                    all_ranges[h] = [row]
                    summary[h] = [f, lst, last_seq, rcnt]
                else:
                    rl.append(row)
                    s = summary[h]
                    if f < s[0]:
                        s[0] = f
                    if lst > s[1]:
                        s[1] = lst
                    s[2] = last_seq
                    s[3] += rcnt
            block_no += 1
            self._closed_count += cnt
            self._closed_end = off + length
            if ts_max > self._closed_ts_max:
                self._closed_ts_max = ts_max
        self._cur_off = self._closed_end
        self._cur_first = self.base + self._closed_count

    def set_edges(self, first: tuple[int, int, int], last: tuple[int, int, int]) -> None:
        """Set first/last record facts ``(timestamp_us, pub_hash, pub_seq)`` after a restore."""
        self._first = first
        self._closed_last = last

    def open_form(self) -> bytes:
        """The whole open-form index of the closed blocks (to rewrite it at recovery)."""
        parts = [encode_open_header(self.base, self.block_bytes)]
        by_block: dict[int, list[tuple[int, int, int, int, int, int]]] = {}
        for h, rl in self.ranges.items():
            for first, last, last_seq, blk, cnt in rl:
                by_block.setdefault(blk, []).append((h, first, last, last_seq, blk, cnt))
        for i in range(len(self.b_first)):
            rows = sorted(by_block.get(i, []))
            parts.append(self._entry(i, [RANGE.pack(*row) for row in rows]))
        return b"".join(parts)

    def seal(self) -> bytes:
        """Close the last block and return the sealed-form index bytes."""
        self.close_block()
        parts = [_header(FORM_SEALED, self.base, self.block_bytes)]
        for i in range(len(self.b_first)):
            parts.append(
                BLOCK.pack(
                    self.b_first[i],
                    self.b_off[i],
                    self.b_len[i],
                    self.b_cnt[i],
                    self.b_ts[i],
                    self.b_crc[i],
                    self.b_last_rel[i],
                    0,
                    0,
                    0,
                )
            )
        rows = sorted(
            (h, first, last, last_seq, blk, cnt)
            for h, rl in self.ranges.items()
            for first, last, last_seq, blk, cnt in rl
        )
        parts.extend(RANGE.pack(*row) for row in rows)
        pubs = sorted(self.summary.items())
        parts.extend(PUB.pack(h, s[0], s[1], s[2], s[3]) for h, s in pubs)
        fh, fp = self.first_bookmark
        lh, lp = self.last_bookmark
        footer = FOOTER.pack(
            self.count, self.data_len, self.base, self.last_seq, self.first_ts,
            self.last_ts, self.ts_max, fh, fp, lh, lp, len(self.b_first), len(rows),
            len(pubs), FOOTER_MAGIC, 0,
        )[:-4]  # fmt: skip
        body = b"".join(parts) + footer
        body += b"\0" * (FOOTER_SIZE - len(footer) - 4)
        # the CRC is the last 4 bytes; FOOTER's own trailing u32 slot is replaced by padding
        return body + struct.pack("<I", _value(body))


def _first_ps(row: list[int]) -> int:
    return row[0]


class OpenIndexEntry(NamedTuple):
    """One verified block entry of an open-form index."""

    first_seq: int
    offset: int
    length: int
    records: int
    ts_max: int
    data_crc: int
    last_rel: int
    ranges: list[tuple[int, ...]]


def parse_open_index(data: bytes, base_seq: int) -> tuple[list[OpenIndexEntry], str | None]:
    """The consistent prefix of an open-form index.

    Entries must pass their CRC and follow each other (seq and offset contiguous from the
    journal's start); parsing stops at the first that does not.

    Returns:
        ``(entries, problem)``: ``problem`` is None when every byte parsed, else why the
        rest was ignored.
    """
    head = _parse_header(data)
    if head is None:
        return [], "bad header"
    form, _, base = head
    if form != FORM_OPEN:
        return [], "not an open index"
    if base != base_seq:
        return [], "base mismatch"
    pos = HEADER.size
    out: list[OpenIndexEntry] = []
    seq = base_seq
    offset = 0
    size = len(data)
    unpack = BLOCK.unpack_from
    zero = b"\0\0\0\0"
    entry_size = BLOCK.size
    while pos < size:
        if size - pos < entry_size:
            return out, "torn entry"
        first, off, length, cnt, ts_max, dcrc, last_rel, npub, _r, crc = unpack(data, pos)
        end = pos + entry_size + npub * RANGE.size
        if end > size:
            return out, "torn entry"
        tail = data[pos + entry_size : end]
        if _extend(_value(data[pos : pos + entry_size - 4] + zero), tail) != crc:
            return out, "entry crc mismatch"
        if first != seq or off != offset or cnt == 0 or last_rel >= length:
            return out, "entry out of sequence"
        ranges = list(RANGE.iter_unpack(tail)) if npub else []
        out.append(OpenIndexEntry(first, off, length, cnt, ts_max, dcrc, last_rel, ranges))
        seq += cnt
        offset += length
        pos = end
    return out, None


def _first_of(row: tuple[int, ...]) -> int:
    return row[0]


class _Column:
    """A read-only sequence over fixed-width rows of a buffer, for :mod:`bisect`."""

    __slots__ = ("_buf", "_fmt", "_n", "_off", "_stride")

    def __init__(self, buf: mmap.mmap | bytes, off: int, n: int, stride: int, fmt: str) -> None:
        self._buf = buf
        self._off = off
        self._n = n
        self._stride = stride
        self._fmt = struct.Struct(fmt)

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: int) -> tuple[int, ...]:
        if not 0 <= i < self._n:
            raise IndexError(i)
        return self._fmt.unpack_from(self._buf, self._off + i * self._stride)


class SealedIndex:
    """A finished journal's index, read through ``mmap`` (the OS caches the pages).

    Use :meth:`load` to open and validate one; it returns None for anything that is not
    a complete, intact sealed index of the expected journal.
    """

    def __init__(self, buf: mmap.mmap | bytes, path: Path | None, footer: tuple[int, ...]) -> None:
        self._buf = buf
        self.path = path
        (
            self._count, self._data_len, self._first_seq, self._last_seq, self._first_ts,
            self._last_ts, self._ts_max, fh, fp, lh, lp, nb, nr, npub, _magic,
        ) = footer  # fmt: skip
        self._first_bm = (fh, fp)
        self._last_bm = (lh, lp)
        self._nb = nb
        self._blocks_off = HEADER.size
        self._ranges_off = self._blocks_off + nb * BLOCK.size
        self._pubs_off = self._ranges_off + nr * RANGE.size
        # first_seq (Q at 0) and ts_max (q at 24) columns of the block table
        self._seq_col = _Column(buf, self._blocks_off, nb, BLOCK.size, "<Q")
        self._off_col = _Column(buf, self._blocks_off + 8, nb, BLOCK.size, "<Q")
        self._ts_col = _Column(buf, self._blocks_off + 24, nb, BLOCK.size, "<q")
        self._range_key = _Column(buf, self._ranges_off, nr, RANGE.size, "<QQ")
        self._pub_col = _Column(buf, self._pubs_off, npub, PUB.size, "<Q")
        self._npub = npub
        self._nr = nr

    @classmethod
    def load(cls, path: Path, base_seq: int) -> SealedIndex | None:
        """Map and validate ``path`` (header, footer, whole-file CRC, table sizes)."""
        try:
            with open(path, "rb") as fh:
                size = fh.seek(0, 2)
                if size < HEADER.size + FOOTER_SIZE:
                    return None
                buf = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError):
            return None
        index = cls.from_buffer(buf, base_seq, path)
        if index is None:
            buf.close()
        return index

    @classmethod
    def from_buffer(
        cls, buf: mmap.mmap | bytes, base_seq: int, path: Path | None = None
    ) -> SealedIndex | None:
        """Validate sealed-index bytes already in memory or mapped."""
        size = len(buf)
        head = _parse_header(buf)
        if head is None or head[0] != FORM_SEALED or head[2] != base_seq:
            return None
        if size < HEADER.size + FOOTER_SIZE:
            return None
        stored = struct.unpack_from("<I", buf, size - 4)[0]
        if _value(bytes(buf[: size - 4])) != stored:
            return None
        footer = FOOTER.unpack_from(buf, size - FOOTER_SIZE)[:-1]
        nb, nr, npub, magic = footer[11], footer[12], footer[13], footer[14]
        expect = HEADER.size + nb * BLOCK.size + nr * RANGE.size + npub * PUB.size + FOOTER_SIZE
        if magic != FOOTER_MAGIC or expect != size or footer[2] != base_seq:
            return None
        return cls(buf, path, footer)

    def close(self) -> None:
        """Release the mapping."""
        if isinstance(self._buf, mmap.mmap):
            self._buf.close()

    @property
    def count(self) -> int:
        return self._count

    @property
    def data_len(self) -> int:
        return self._data_len

    @property
    def first_seq(self) -> int:
        return self._first_seq

    @property
    def last_seq(self) -> int:
        return self._last_seq

    @property
    def first_ts(self) -> int:
        return self._first_ts

    @property
    def last_ts(self) -> int:
        return self._last_ts

    @property
    def ts_max(self) -> int:
        return self._ts_max

    @property
    def first_bookmark(self) -> tuple[int, int]:
        return self._first_bm

    @property
    def last_bookmark(self) -> tuple[int, int]:
        return self._last_bm

    @property
    def block_count(self) -> int:
        return self._nb

    def block(self, i: int) -> tuple[int, int, int, int, int, int, int]:
        """``(first_seq, offset, length, count, ts_max, data_crc, last_rel)`` of block i."""
        row = BLOCK.unpack_from(self._buf, self._blocks_off + i * BLOCK.size)
        return row[0], row[1], row[2], row[3], row[4], row[5], row[6]

    def block_crcs(self, start: int, end: int) -> list[tuple[int, int, int]]:
        """``(offset, length, crc)`` of the blocks lying inside ``[start, end)``."""
        i = bisect.bisect_left(self._off_col, start, key=_first_of)
        out: list[tuple[int, int, int]] = []
        while i < self._nb:
            _first, off, length, _cnt, _ts, crc, _rel = self.block(i)
            if off + length > end:
                break
            out.append((off, length, crc))
            i += 1
        return out

    def _span(self, i: int) -> BlockSpan:
        first, off, length, cnt, _ts, _crc, _rel = self.block(i)
        return BlockSpan(off, first, length, cnt)

    def span_for_seq(self, seq: int) -> BlockSpan | None:
        if not self._first_seq <= seq <= self._last_seq or not self._nb:
            return None
        return self._span(bisect.bisect_right(self._seq_col, (seq,)) - 1)

    def span_for_time(self, ts: int) -> BlockSpan | None:
        i = bisect.bisect_left(self._ts_col, (ts,))
        return self._span(i) if i < self._nb else None

    def span_for_bookmark(self, pub_hash: int, pub_seq: int) -> BlockSpan | None:
        i = bisect.bisect_right(self._range_key, (pub_hash, pub_seq)) - 1
        if i < 0:
            return None
        h, first, last, _ls, blk, _cnt = RANGE.unpack_from(
            self._buf, self._ranges_off + i * RANGE.size
        )
        if h != pub_hash or not first <= pub_seq <= last:
            return None
        return self._span(blk)

    def late_spans(self, key: int, pub_seq: int) -> list[BlockSpan]:
        """Every block whose range of ``key`` covers ``pub_seq`` (see IndexBuilder's)."""
        i = bisect.bisect_left(self._range_key, (key,))
        spans: list[BlockSpan] = []
        while i < self._nr:
            h, first, last, _ls, blk, _cnt = RANGE.unpack_from(
                self._buf, self._ranges_off + i * RANGE.size
            )
            if h != key or first > pub_seq:
                break
            if pub_seq <= last:
                spans.append(self._span(blk))
            i += 1
        return spans

    def key_ranges(self) -> Iterator[tuple[int, int, int, int, BlockSpan | None]]:
        """Every ``(index key, first, last, count, block)`` range (as IndexBuilder's)."""
        end = self._ranges_off + self._nr * RANGE.size
        for h, first, last, _ls, blk, cnt in RANGE.iter_unpack(self._buf[self._ranges_off : end]):
            yield h, first, last, cnt, self._span(blk)

    def publisher(self, pub_hash: int) -> PublisherSummary | None:
        i = bisect.bisect_left(self._pub_col, (pub_hash,))
        if i >= self._npub:
            return None
        row = PUB.unpack_from(self._buf, self._pubs_off + i * PUB.size)
        return PublisherSummary(*row) if row[0] == pub_hash else None

    def publishers(self) -> Iterator[PublisherSummary]:
        for row in PUB.iter_unpack(
            self._buf[self._pubs_off : self._pubs_off + self._npub * PUB.size]
        ):
            yield PublisherSummary(*row)

    def blocks(self) -> Iterable[tuple[int, int, int, int, int, int, int]]:
        """Every block row, in order (recovery's bulk CRC check)."""
        for i in range(self._nb):
            yield self.block(i)
