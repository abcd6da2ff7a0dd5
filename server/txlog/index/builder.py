"""The index of the active journal, kept in memory and built as records are appended.

:class:`IndexBuilder` is on the append hot path (:meth:`IndexBuilder.add` runs once per
record on the event loop), so its per-record work is a tuple append and a CRC update;
everything else happens once per block (about every :data:`~spool.server.txlog.index.answers.BLOCK_BYTES`
of records). It answers the same lookups as a
:class:`~spool.server.txlog.index.sealed.SealedIndex` and produces both file forms
(:mod:`.fileformat`): an open-form entry per closed block, for the cache writer to append,
and the sealed form when the journal is finished. Recovery also fills one in bulk from a
scan (:meth:`IndexBuilder.add_scanned`) or from a verified open index
(:meth:`IndexBuilder.restore`).
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Iterator
from itertools import repeat

import google_crc32c

from spool.server.txlog.format.codec import ScanResult
from spool.server.txlog.index.answers import BLOCK_BYTES, BlockSpan, PublisherSummary
from spool.server.txlog.index.fileformat import (
    RANGE,
    BlockRow,
    JournalFacts,
    OpenIndexEntry,
    RangeRow,
    encode_block_entry,
    encode_open_header,
    encode_sealed,
)

__all__ = ["IndexBuilder"]

_extend = google_crc32c.extend


class IndexBuilder:
    """The index of the active journal, built record by record on the event loop.

    In-memory layout: closed blocks are kept column-wise in ``array`` s (``b_first``,
    ``b_off``, ``b_len``, ``b_cnt``, ``b_ts``, ``b_crc``, ``b_last_rel``: block ``i`` is
    index ``i`` of each, the fields of a :mod:`.fileformat` block entry), and per publisher
    its ranges ``[first_ps, last_ps, last_seq, block, count]`` in log order (``ranges``)
    and its summary over the closed blocks ``[min_ps, max_ps, last_seq, count]``
    (``summary``). The block being filled is a short list of per-record rows
    ``(offset, length, ts, pub_hash, pub_seq)`` and a running CRC, summarized when it
    closes, so :meth:`add` stays a tuple append and a CRC update. :meth:`add` returns the
    encoded open-form entry when it closes a block, for the caller to persist after the
    journal bytes are durable.

    Thread contract: owned by the event loop while its journal is active (appends, block
    closes, lookups). :meth:`block_crcs` may be called from a reader thread meanwhile (it
    reads only blocks below the shortest column). Once its journal is finished the builder
    is read-only and the cache thread may call :meth:`seal`; during recovery it belongs to
    the recovery thread.
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
        # the block being filled: (offset, length, ts, pub_hash, pub_seq) per record, and
        # its summary kept as records come (a run at a time): per publisher
        # [min_ps, max_ps, count, last_seq], and the highest timestamp
        self._rows: list[tuple[int, int, int, int, int]] = []
        self._open: dict[int, list[int]] = {}
        self._cur_ts_max = -(1 << 63)
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
        return max(self._closed_ts_max, self._cur_ts_max)

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

    def publisher_blocks(self, pub_hash: int) -> list[int]:
        """Numbers of the closed blocks holding records of ``pub_hash`` (ascending).

        Readers that want one publisher's records (the Spark pipeline's pushed-down
        ``publisher_id`` filter) read only these blocks.
        """
        return [row[3] for row in self.ranges.get(pub_hash, ())]

    def _note(self, pub_hash: int, low: int, high: int, count: int, last_seq: int) -> None:
        """Account ``count`` records of ``pub_hash`` (pub_seqs ``low..high``, the last at
        ``last_seq``) in the open block's publisher summary ``[min_ps, max_ps, count,
        last_seq]``.

        A publisher's sequences increase along the log under its own key, so min and max
        are its first and last there; under a late key (server/txlog/format/record.py) they need
        not. Kept as records come (once per run) so closing a block, which happens every
        few dozen records, does not walk its rows again.
        """
        if not pub_hash:
            return
        p = self._open.get(pub_hash)
        if p is None:
            self._open[pub_hash] = [low, high, count, last_seq]
            return
        if low < p[0]:
            p[0] = low
        if high > p[1]:
            p[1] = high
        p[2] += count
        p[3] = last_seq

    def late_spans(self, key: int, pub_seq: int) -> list[BlockSpan]:
        """Every block whose range of ``key`` covers ``pub_seq``: a late key's ranges need
        not increase along the log, so no binary search (they are few)."""
        spans = [self._block(r[3]) for r in self.ranges.get(key, ()) if r[0] <= pub_seq <= r[1]]
        if any(r[3] == key and r[4] == pub_seq for r in self._rows):
            current = self._current()
            if current is not None:
                spans.append(current)
        return spans

    def spans_from(self, key: int, pub_seq: int, limit: int) -> list[BlockSpan]:
        """The first ``limit`` blocks holding records of ``key`` at or above ``pub_seq``,
        in log order, the block being filled included: for a key whose sequences increase
        along the log (a publisher's own key, ``DUE_KEY``), a binary search."""
        rl = self.ranges.get(key, [])
        i = bisect.bisect_left(rl, pub_seq, key=_last_ps)
        spans = [self._block(r[3]) for r in rl[i : i + limit]]
        if len(spans) < limit and any(r[3] == key and r[4] >= pub_seq for r in self._rows):
            current = self._current()
            if current is not None:
                spans.append(current)
        return spans

    def key_ranges(self) -> Iterator[tuple[int, int, int, int, BlockSpan | None]]:
        """Every ``(index key, first, last, count, block)`` range of the journal.

        Closed blocks give their publisher ranges; the records of the block being filled
        come one by one, exact, with no block (server/txlog/publishers/holdings.py reads these to
        rebuild the gap table).
        """
        for h, rows in self.ranges.items():
            for first, last, _last_seq, block, count in rows:
                yield h, first, last, count, self._block(block)
        for _off, _len, _ts, ph, ps in self._rows:
            if ph:
                yield ph, ps, ps, 1, None

    def publisher(self, pub_hash: int) -> PublisherSummary | None:
        return self._merged(pub_hash, self._open.get(pub_hash))

    def _merged(self, pub_hash: int, cur: list[int] | None) -> PublisherSummary | None:
        s = self.summary.get(pub_hash)
        if cur is None:
            return None if s is None else PublisherSummary(pub_hash, s[0], s[1], s[2], s[3])
        if s is None:
            return PublisherSummary(pub_hash, cur[0], cur[1], cur[3], cur[2])
        return PublisherSummary(
            pub_hash, min(s[0], cur[0]), max(s[1], cur[1]), cur[3], s[3] + cur[2]
        )

    def publishers(self) -> Iterator[PublisherSummary]:
        open_pubs = self._open
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
        self._note(pub_hash, pub_seq, pub_seq, 1, self._cur_first + len(rows) - 1)
        if ts > self._cur_ts_max:
            self._cur_ts_max = ts
        self._cur_crc = _extend(self._cur_crc, data)
        if offset + length - self._cur_off >= self.block_bytes:
            return self.close_block()
        return None

    def add_run(
        self,
        seq: int,
        offsets: list[int],
        datas: list[bytes],
        sizes: list[int],
        ts: int,
        pub_hash: int,
        pub_seqs: list[int],
    ) -> list[bytes]:
        """Account consecutive appended records of one time and index key: what
        :meth:`add` does for each, a block at a time.

        ``offsets`` has one more item than ``datas``: each record's journal offset, then
        where the last one ends. A block closes after the record that reaches
        ``block_bytes`` past the block's start, exactly as record by record; its rows are
        built by one ``zip`` and its CRC over the block's bytes joined (the append path
        of a run of publishes does no Python-level work per record here).

        Returns:
            The open-form entries of the blocks the run closed, in order.
        """
        n = len(datas)
        entries: list[bytes] = []
        block_bytes = self.block_bytes
        i = 0
        while i < n:
            rows = self._rows
            if not rows:
                self._cur_first = seq + i
                self._cur_off = offsets[i]
                if self._first is None:
                    self._first = (ts, pub_hash, pub_seqs[i])
            limit = self._cur_off + block_bytes
            # the first record whose end reaches the limit closes the block
            stop = bisect.bisect_left(offsets, limit, i + 1, n + 1)
            closes = stop <= n
            if not closes:
                stop = n
            ps = pub_seqs[i:stop]
            rows.extend(
                zip(offsets[i:stop], sizes[i:stop], repeat(ts, stop - i),
                    repeat(pub_hash, stop - i), ps, strict=True)
            )  # fmt: skip
            if pub_hash:
                self._note(pub_hash, min(ps), max(ps), stop - i, seq + stop - 1)
            if ts > self._cur_ts_max:
                self._cur_ts_max = ts
            self._cur_crc = _extend(self._cur_crc, b"".join(datas[i:stop]))
            if closes:
                entries.append(self.close_block())
            i = stop
        return entries

    def add_scanned(self, buf: bytes, buf_offset: int, res: ScanResult) -> None:
        """Account every record of a :func:`~spool.server.txlog.format.codec.scan` of ``buf``.

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
            seq_i = seq + i
            for _off, _len, r_ts, ph, ps in scanned[i:stop]:
                self._note(ph, ps, ps, 1, seq_i)
                if r_ts > self._cur_ts_max:
                    self._cur_ts_max = r_ts
                seq_i += 1
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
        pubs = self._open
        ts_max = max(self._closed_ts_max, self._cur_ts_max)
        last = rows[-1]
        length = last[0] + last[1] - self._cur_off
        last_rel = last[0] - self._cur_off
        self.b_first.append(first)
        self.b_off.append(self._cur_off)
        self.b_len.append(length)
        self.b_cnt.append(len(rows))
        self.b_ts.append(ts_max)
        self.b_crc.append(self._cur_crc)
        self.b_last_rel.append(last_rel)
        ranges_out = []
        add_range = self._add_range
        for h, (f, lst, cnt, last_seq) in sorted(pubs.items()):
            add_range(h, f, lst, last_seq, block_no, cnt)
            if encode:
                ranges_out.append(RANGE.pack(h, f, lst, last_seq, block_no, cnt))
        entry = (
            encode_block_entry(
                first, self._cur_off, length, len(rows), ts_max, self._cur_crc, last_rel,
                ranges_out,
            )
            if encode
            else b""
        )  # fmt: skip
        self._closed_count += len(rows)
        self._closed_end = last[0] + last[1]
        self._closed_ts_max = ts_max
        self._closed_last = (last[2], last[3], last[4])
        self._cur_first = first + len(rows)
        self._cur_off = self._closed_end
        self._cur_crc = 0
        self._rows = []
        self._open = {}
        self._cur_ts_max = -(1 << 63)
        return entry

    def _add_range(
        self, h: int, first_ps: int, last_ps: int, last_seq: int, block_no: int, count: int
    ) -> None:
        """Account a closed block's range of publisher key ``h``: a row of ``ranges`` and
        the key's ``summary`` (min and max pub_seq, last seq, count)."""
        row = [first_ps, last_ps, last_seq, block_no, count]
        rl = self.ranges.get(h)
        if rl is None:
            self.ranges[h] = [row]
            self.summary[h] = [first_ps, last_ps, last_seq, count]
            return
        rl.append(row)
        s = self.summary[h]
        if first_ps < s[0]:
            s[0] = first_ps
        if last_ps > s[1]:
            s[1] = last_ps
        s[2] = last_seq
        s[3] += count

    def restore(self, entries: list[OpenIndexEntry]) -> None:
        """Re-add closed blocks read from an open-form index (already verified)."""
        add_range = self._add_range
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
                add_range(h, f, lst, last_seq, block_no, rcnt)
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

    # -- the file forms -----------------------------------------------------------------

    def _block_rows(self) -> list[BlockRow]:
        """Every closed block as a file row, in order."""
        return list(
            zip(
                self.b_first, self.b_off, self.b_len, self.b_cnt, self.b_ts, self.b_crc,
                self.b_last_rel, strict=True,
            )
        )  # fmt: skip

    def _range_rows(self) -> list[RangeRow]:
        """Every publisher range as a file row, sorted by ``(pub_hash, first_pub_seq)``."""
        return sorted(
            (h, first, last, last_seq, blk, cnt)
            for h, rl in self.ranges.items()
            for first, last, last_seq, blk, cnt in rl
        )

    def open_form(self) -> bytes:
        """The whole open-form index of the closed blocks (to rewrite it at recovery)."""
        parts = [encode_open_header(self.base, self.block_bytes)]
        by_block: dict[int, list[bytes]] = {}
        for row in self._range_rows():  # each block's ranges sorted by pub_hash
            by_block.setdefault(row[4], []).append(RANGE.pack(*row))
        for i, (first, off, length, cnt, ts, crc, rel) in enumerate(self._block_rows()):
            ranges = by_block.get(i, [])
            parts.append(encode_block_entry(first, off, length, cnt, ts, crc, rel, ranges))
        return b"".join(parts)

    def seal(self) -> bytes:
        """Close the last block and return the sealed-form index bytes."""
        self.close_block()
        pubs = [(h, s[0], s[1], s[2], s[3]) for h, s in sorted(self.summary.items())]
        fh, fp = self.first_bookmark
        lh, lp = self.last_bookmark
        facts = JournalFacts(
            self.count, self.data_len, self.base, self.last_seq, self.first_ts, self.last_ts,
            self.ts_max, fh, fp, lh, lp,
        )  # fmt: skip
        ranges = self._range_rows()
        return encode_sealed(self.base, self.block_bytes, self._block_rows(), ranges, pubs, facts)


def _first_ps(row: list[int]) -> int:
    return row[0]


def _last_ps(row: list[int]) -> int:
    return row[1]
