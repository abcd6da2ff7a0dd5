"""A finished journal's index, answered from its sealed file through ``mmap``.

Lookups on the replay path bisect the sealed tables in place (:mod:`.fileformat` gives
the layout): no table is read into Python objects, the OS caches the pages, and a lookup
unpacks only the rows its binary search touches.
"""

from __future__ import annotations

import bisect
import mmap
import struct
from collections.abc import Iterable, Iterator
from pathlib import Path

from spool.server.txlog.index.answers import BlockSpan, PublisherSummary
from spool.server.txlog.index.fileformat import (
    BLOCK,
    FOOTER_SIZE,
    HEADER,
    PUB,
    RANGE,
    BlockRow,
    Footer,
    parse_sealed,
)

__all__ = ["SealedIndex"]


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

    Layout: the sealed form of :mod:`.fileformat` - header, block table (48-byte rows in
    seq order, bisected on ``first_seq`` and on the running ``ts_max``), publisher ranges
    (40-byte rows sorted by ``(pub_hash, first_pub_seq)``, bisected for bookmarks),
    publisher summaries (40-byte rows sorted by ``pub_hash``), footer. The footer's facts
    are read once into attributes; table rows are unpacked on demand.

    Use :meth:`load` to open and validate one; it returns None for anything that is not
    a complete, intact sealed index of the expected journal.

    Thread contract: immutable once built, so any thread may look up; :meth:`close`
    releases the mapping and is for whoever owns the journal (the event loop, or
    recovery's thread before it hands the journal over), once no reader uses it.
    """

    def __init__(self, buf: mmap.mmap | bytes, path: Path | None, footer: Footer) -> None:
        self._buf = buf
        self.path = path
        self._count = footer.records
        self._data_len = footer.data_len
        self._first_seq = footer.first_seq
        self._last_seq = footer.last_seq
        self._first_ts = footer.first_ts
        self._last_ts = footer.last_ts
        self._ts_max = footer.ts_max
        self._first_bm = (footer.first_pub_hash, footer.first_pub_seq)
        self._last_bm = (footer.last_pub_hash, footer.last_pub_seq)
        nb = self._nb = footer.nblocks
        self._blocks_off = footer.blocks_offset
        self._ranges_off = footer.ranges_offset
        self._pubs_off = footer.pubs_offset
        self._npub = footer.npubs
        self._nr = footer.nranges
        # first_seq (Q at 0), offset (Q at 8) and ts_max (q at 24) of the block table
        self._seq_col = _Column(buf, self._blocks_off, nb, BLOCK.size, "<Q")
        self._off_col = _Column(buf, self._blocks_off + 8, nb, BLOCK.size, "<Q")
        self._ts_col = _Column(buf, self._blocks_off + 24, nb, BLOCK.size, "<q")
        self._range_key = _Column(buf, self._ranges_off, footer.nranges, RANGE.size, "<QQ")
        self._pub_col = _Column(buf, self._pubs_off, footer.npubs, PUB.size, "<Q")

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
        footer = parse_sealed(buf, base_seq)
        return None if footer is None else cls(buf, path, footer)

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

    def block(self, i: int) -> BlockRow:
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

    def spans_from(self, key: int, pub_seq: int, limit: int) -> list[BlockSpan]:
        """The first ``limit`` blocks holding records of ``key`` at or above ``pub_seq``
        (see IndexBuilder's): the range that may hold ``pub_seq`` by a binary search, then
        the next ones."""
        i = max(0, bisect.bisect_right(self._range_key, (key, pub_seq)) - 1)
        spans: list[BlockSpan] = []
        while i < self._nr and len(spans) < limit:
            h, _first, last, _ls, blk, _cnt = RANGE.unpack_from(
                self._buf, self._ranges_off + i * RANGE.size
            )
            if h > key:
                break
            if h == key and last >= pub_seq:
                spans.append(self._span(blk))
            i += 1
        return spans

    def key_ranges(self) -> Iterator[tuple[int, int, int, int, BlockSpan | None]]:
        """Every ``(index key, first, last, count, block)`` range (as IndexBuilder's)."""
        end = self._ranges_off + self._nr * RANGE.size
        for h, first, last, _ls, blk, cnt in RANGE.iter_unpack(self._buf[self._ranges_off : end]):
            yield h, first, last, cnt, self._span(blk)

    def publisher_blocks(self, pub_hash: int) -> list[int]:
        """Numbers of the blocks holding records of ``pub_hash`` (ascending: ranges are
        sorted by publisher, then first sequence, which grows along the log)."""
        i = bisect.bisect_left(self._range_key, (pub_hash, 0))
        out: list[int] = []
        while i < len(self._range_key):
            h, _first, _last, _ls, blk, _cnt = RANGE.unpack_from(
                self._buf, self._ranges_off + i * RANGE.size
            )
            if h != pub_hash:
                break
            out.append(blk)
            i += 1
        return out

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

    def blocks(self) -> Iterable[BlockRow]:
        """Every block row, in order (recovery's bulk CRC check)."""
        for i in range(self._nb):
            yield self.block(i)
