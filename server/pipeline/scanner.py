"""Reading a slice: journal bytes -> columns of kept records, and damage reports.

The executor side of the source. A :class:`SliceScanner` reads its slice's bytes through
:mod:`spool.server.txlog.storage.source` (plain files by ``pread``, compressed ones chunk by chunk),
checks them, and decodes the records with the record codec's header
(:data:`spool.server.txlog.format.codec.HEADER`; :func:`~spool.server.txlog.format.codec.check_at` names the damage,
:func:`~spool.server.txlog.format.codec.build_record` decodes the rare records with a replication path,
correlation id or SOW key) into plain Python lists, one per column, that
:mod:`spool.server.pipeline.arrow` turns into Arrow record batches.

Checks, as the log's own readers do them: each index block is checked with one CRC-32C
over its bytes (the index keeps it); the records of a block that checks skip their own
CRC, the records of one that does not are checked one by one so damage is reported at the
exact record. Every record's format byte, lengths and sequence are checked in any case.

**Damage is never fatal** (unless the caller asks): at a bad record the scanner reports a
:class:`Damage` (journal, offset, reason, seqs and bytes lost) and goes on at the next
index block, whose start the index gives; in unindexed bytes, where no record boundary is
known after the damage, it goes on with the next slice. Unindexed bytes are read in
windows of whole records (:class:`~spool.server.txlog.storage.source.RecordWindows`), which decides
where their data ends exactly as ``spool journal verify`` does. A slice's records are
decoded with the predicate applied on the header, so filtered-out records cost no body
copy.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import google_crc32c

from spool.server.pipeline.catalog import Block
from spool.server.pipeline.errors import UnreadableJournal
from spool.server.pipeline.planner import Slice
from spool.server.pipeline.predicate import KIND_NAMES, ScanPredicate
from spool.server.txlog.errors import CorruptRecord
from spool.server.txlog.format.codec import (
    CRC_RESIDUE,
    FORMAT,
    HEADER,
    HEADER_SIZE,
    MIN_RECORD,
    build_record,
    check_at,
    decode_text,
)
from spool.server.txlog.format.record import FLAG_RELEASED, RecordKind
from spool.server.txlog.storage.files import Compression, journal_name
from spool.server.txlog.storage.source import JournalSource, RecordWindows, open_source

__all__ = ["Columns", "Damage", "ScanStats", "SliceScanner", "open_journal"]

#: bytes read per ``pread`` (whole blocks); bounds a task's memory with the batch size
READ_BYTES: Final = 4 << 20


@dataclass(frozen=True, slots=True)
class Damage:
    """Bytes of a journal that are not intact records (reported, then skipped).

    Attributes:
        journal: the journal id (base seq).
        path: the file.
        offset: where the damage starts.
        reason: the codec's reason (``crc mismatch``, ``torn record``...).
        first_seq: the seq the first lost record had.
        records: records lost, when the index says (None in unindexed bytes).
        nbytes: bytes skipped.
    """

    journal: int
    path: str
    offset: int
    reason: str
    first_seq: int
    records: int | None
    nbytes: int


@dataclass(slots=True)
class Columns:
    """Kept records as one list per field (what the Arrow conversion consumes)."""

    seqs: list[int] = field(default_factory=list)
    times: list[int] = field(default_factory=list)
    hashes: list[int] = field(default_factory=list)
    pseqs: list[int] = field(default_factory=list)
    topics: list[str] = field(default_factory=list)
    mtypes: list[str] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)
    paths: list[list[str]] = field(default_factory=list)
    flags: list[int] = field(default_factory=list)
    corr_ids: list[str | None] = field(default_factory=list)
    sow_keys: list[str | None] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    journal: int = 0

    def __len__(self) -> int:
        return len(self.seqs)


@dataclass(slots=True)
class ScanStats:
    """What one slice scan did (the tests and the progress line read it)."""

    blocks_read: int = 0
    blocks_verified: int = 0
    bytes_read: int = 0
    records_seen: int = 0
    records_kept: int = 0
    damage: int = 0


_FORMS: Final[tuple[Compression | None, ...]] = ("zstd", "gzip", None)


def _compression(s: Slice) -> Compression | None:
    for form in _FORMS:
        if form == s.compression:
            return form
    raise ValueError(f"unknown compression {s.compression!r}")


def open_journal(s: Slice) -> JournalSource:
    """The slice's journal, wherever it is now.

    An archive or compress action may have moved the journal since planning (raw offsets
    are the same in every form), so the other names of the same journal are tried.

    Raises:
        UnreadableJournal: no form of the journal can be opened.
    """
    candidates: list[tuple[Path, Compression | None]] = [(Path(s.path), _compression(s))]
    dirs = [Path(s.journal_dir)] + ([Path(s.archive_dir)] if s.archive_dir else [])
    for d in reversed(dirs):
        for comp in _FORMS:
            path = d / journal_name(s.instance, s.base, comp)
            if path != Path(s.path):
                candidates.append((path, comp))
    first_error: OSError | None = None
    for path, comp in candidates:
        try:
            return open_source(path, comp)
        except FileNotFoundError as exc:
            first_error = first_error or exc
        except OSError as exc:
            raise UnreadableJournal(str(path), exc) from exc
    assert first_error is not None
    raise UnreadableJournal(s.path, first_error)


class SliceScanner:
    """Decodes one slice; iterate :meth:`scan` for columns and damage, in log order.

    Args:
        s: the slice.
        predicate: records kept.
        batch_rows: most records per yielded :class:`Columns`.
        read_bytes: bytes read at a time (whole index blocks; a window of unindexed bytes).
    """

    def __init__(
        self,
        s: Slice,
        predicate: ScanPredicate,
        batch_rows: int = 8192,
        *,
        read_bytes: int = READ_BYTES,
    ) -> None:
        self.slice = s
        self.predicate = predicate
        self.batch_rows = batch_rows
        self.read_bytes = read_bytes
        self.stats = ScanStats()
        self._cols = Columns(journal=s.base)

    def scan(self) -> Iterator[Columns | Damage]:
        """Kept records (in batches) and damage, in log order.

        Raises:
            UnreadableJournal: the journal cannot be opened or read (an I/O error is not
                damage: nothing says the bytes are bad).
        """
        s = self.slice
        source = open_journal(s)
        try:
            if s.blocks:
                yield from self._indexed(source)
            else:
                yield from self._unindexed(source)
        except OSError as exc:
            raise UnreadableJournal(str(source.path), exc) from exc
        finally:
            source.retire()
        if self._cols.seqs:
            yield self._take()

    # -- indexed slices -------------------------------------------------------------------

    def _indexed(self, source: JournalSource) -> Iterator[Columns | Damage]:
        blocks = self.slice.blocks
        p = self.predicate
        stats = self.stats
        i = 0
        while i < len(blocks):
            if blocks[i].first_seq > p.seq_hi:
                return
            j = i
            total = 0
            while j < len(blocks) and (j == i or total + blocks[j].length <= self.read_bytes):
                total += blocks[j].length
                j += 1
            start = blocks[i].offset
            buf = source.read(start, total)
            stats.bytes_read += len(buf)
            for b in blocks[i:j]:
                rel = b.offset - start
                if rel + b.length > len(buf):
                    have = max(0, len(buf) - rel)
                    yield from self._report(b.offset + have, "missing bytes", b.first_seq,
                                       None, b.end - (b.offset + have))  # fmt: skip
                    return
                stats.blocks_read += 1
                trusted = google_crc32c.value(buf[rel : rel + b.length]) == b.crc
                stats.blocks_verified += trusted
                yield from self._block(buf, start, rel, b, trusted)
            i = j

    def _block(
        self, buf: bytes, start: int, rel: int, b: Block, trusted: bool
    ) -> Iterator[Columns | Damage]:
        end = rel + b.length
        stop: _Stop | None = None
        try:
            pos, seq = self._decode(buf, start, rel, end, b.first_seq, trusted)
        except _Stop as exc:
            stop = exc
        if len(self._cols.seqs) >= self.batch_rows:
            yield self._take()
        if stop is not None:
            off = start + stop.pos
            yield from self._report(
                off, stop.reason, stop.seq, b.last_seq - stop.seq + 1, b.end - off
            )
            return
        if seq != b.last_seq + 1 and seq <= self.predicate.seq_hi:
            off = start + pos
            why = "end of data" if pos < end else "index mismatch"
            yield from self._report(off, f"block ends early ({why})", seq, b.last_seq - seq + 1,
                               b.end - off)  # fmt: skip

    # -- unindexed slices -----------------------------------------------------------------

    def _unindexed(self, source: JournalSource) -> Iterator[Columns | Damage]:
        s = self.slice
        stats = self.stats
        size = source.size()
        seq = s.first_seq
        windows = RecordWindows(source, s.offset, window=self.read_bytes, size=size)
        while seq <= self.predicate.seq_hi:
            try:
                buf = windows.read()
            except CorruptRecord as exc:  # a compressed chunk that does not decompress
                yield from self._report(exc.offset, exc.reason, seq, None, size - exc.offset)
                return
            if buf is None:
                break
            pos = windows.offset
            stats.bytes_read += len(buf)
            bad: _Stop | None = None
            try:
                stop, seq = self._decode(buf, pos, 0, len(buf), seq, False)
            except _Stop as exc:
                bad = exc
            if len(self._cols.seqs) >= self.batch_rows:
                yield self._take()
            if bad is not None:
                off = pos + bad.pos
                yield from self._report(
                    off, bad.reason, bad.seq, None, _data_end(source, size) - off
                )
                return
            windows.advance(stop)
        if windows.reason not in (None, "end of data"):
            off = windows.offset
            reason = str(windows.reason)
            yield from self._report(off, reason, seq, None, _data_end(source, size) - off)

    # -- the record loop ------------------------------------------------------------------

    def _decode(
        self, buf: bytes, buf_base: int, pos: int, end: int, seq: int, trusted: bool
    ) -> tuple[int, int]:
        """Decode records from ``pos`` until ``end``, a zero length or an incomplete record.

        ``buf_base`` is the journal offset of ``buf[0]`` (records get journal offsets).

        Returns:
            ``(position after the last whole record, next seq)``.

        Raises:
            _Stop: a record fails its checks.
        """
        p = self.predicate
        cols = self._cols
        stats = self.stats
        lo, hi, tlo, thi = p.seq_lo, p.seq_hi, p.ts_lo, p.ts_hi
        pubs, kinds, topics, prefix = p.publishers, p.kinds, p.topics, p.topic_prefix
        unpack = HEADER.unpack_from
        crc = google_crc32c.value
        text = decode_text
        names = KIND_NAMES
        a_seq, a_ts, a_h, a_ps = (
            cols.seqs.append,
            cols.times.append,
            cols.hashes.append,
            cols.pseqs.append,
        )
        a_top, a_mt, a_kind = cols.topics.append, cols.mtypes.append, cols.kinds.append
        a_path, a_flags = cols.paths.append, cols.flags.append
        a_corr, a_sow, a_body, a_off = (
            cols.corr_ids.append, cols.sow_keys.append, cols.bodies.append, cols.offsets.append
        )  # fmt: skip
        seen = kept = 0
        try:
            while end - pos >= HEADER_SIZE:
                h = unpack(buf, pos)
                length = h[0]
                if length == 0:
                    break
                if length >= MIN_RECORD and pos + length > end:
                    break  # incomplete: the caller reads more or reports it
                if (
                    length < MIN_RECORD
                    or h[1] != FORMAT
                    or (not trusted and crc(buf[pos : pos + length]) != CRC_RESIDUE)
                ):
                    check_at(buf, pos, end)
                if h[4] != seq:
                    raise CorruptRecord(pos, "sequence gap")
                kind = h[2]
                if kind not in names:
                    raise CorruptRecord(pos, "unknown kind")
                if kind == _LOST:
                    if not h[3] & FLAG_RELEASED:
                        # a fenced seq: its record is damaged or missing, waiting for a
                        # repair (server/txlog/damage/fences.py); reported as damage
                        raise CorruptRecord(pos, "fenced")
                    pos += length  # released: nothing stands here any more
                    seq += 1
                    continue
                seen += 1
                ts = h[5]
                ph = h[6]
                if (
                    seq < lo
                    or seq > hi
                    or ts < tlo
                    or ts > thi
                    or (pubs is not None and ph not in pubs)
                    or (kinds is not None and kind not in kinds)
                ):
                    pos += length
                    seq += 1
                    continue
                tl = h[8]
                if h[10] or h[11] or h[12]:
                    rec = build_record(buf, pos, h)
                    topic = rec.topic
                    if (topics is not None and topic not in topics) or not topic.startswith(prefix):
                        pos += length
                        seq += 1
                        continue
                    a_mt(rec.message_type)
                    a_path(list(rec.path))
                    a_corr(rec.corr_id or None)
                    a_sow(rec.sow_key or None)
                    a_body(rec.body)
                else:
                    ml = h[9]
                    if MIN_RECORD + tl + ml + h[13] != length:
                        raise CorruptRecord(pos, "length mismatch")
                    q = pos + HEADER_SIZE
                    try:
                        topic = text(buf[q : q + tl])
                    except UnicodeDecodeError:
                        raise CorruptRecord(pos, "bad utf-8") from None
                    if (topics is not None and topic not in topics) or not topic.startswith(prefix):
                        pos += length
                        seq += 1
                        continue
                    q += tl
                    try:
                        a_mt(text(buf[q : q + ml]))
                    except UnicodeDecodeError:
                        raise CorruptRecord(pos, "bad utf-8") from None
                    q += ml
                    a_path([])
                    a_corr(None)
                    a_sow(None)
                    a_body(buf[q : q + h[13]])
                a_seq(seq)
                a_ts(ts)
                a_h(ph)
                a_ps(h[7])
                a_top(topic)
                a_kind(names[kind])
                a_flags(h[3])
                a_off(buf_base + pos)
                kept += 1
                pos += length
                seq += 1
        except CorruptRecord as exc:
            stats.records_seen += seen
            stats.records_kept += kept
            raise _Stop(exc.offset, seq, exc.reason) from None
        stats.records_seen += seen
        stats.records_kept += kept
        return pos, seq

    def _take(self) -> Columns:
        cols = self._cols
        self._cols = Columns(journal=self.slice.base)
        return cols

    def _report(
        self, offset: int, reason: str, first_seq: int, records: int | None, nbytes: int
    ) -> Iterator[Columns | Damage]:
        """The records decoded before the damage, then the damage (log order)."""
        if self._cols.seqs:
            yield self._take()
        self.stats.damage += 1
        s = self.slice
        yield Damage(s.base, s.path, offset, reason, first_seq, records, max(0, nbytes))


#: a placeholder of a fenced seq (server/txlog/damage/fences.py)
_LOST: Final = int(RecordKind.LOST)


class _Stop(Exception):
    """A record failed its checks at ``pos`` (buffer position), expected seq ``seq``."""

    def __init__(self, pos: int, seq: int, reason: str) -> None:
        super().__init__(reason)
        self.pos = pos
        self.seq = seq
        self.reason = reason


def _data_end(source: JournalSource, size: int) -> int:
    """Where a journal's written bytes end: after its last non-zero byte (the rest is
    preallocated space). Reads backwards in 64 KB steps, only after damage."""
    step = 64 * 1024
    pos = size
    while pos > 0:
        start = max(0, pos - step)
        stripped = source.read(start, pos - start).rstrip(b"\0")
        if stripped:
            return start + len(stripped)
        pos = start
    return 0
