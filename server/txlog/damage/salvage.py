"""Reading a journal past its damage: where its intact records are, and which are lost.

A bad record (a flipped bit, a torn write, zeroed or missing bytes) does not make the
records after it unreadable: each record carries its own length, sequence and CRC, so a
reader that loses its way can find the next record that checks and go on from there.
:func:`salvage` walks a journal this way and returns its intact *pieces* (runs of
consecutive records) and the *lost spans* between them: which bytes are damaged and which
local sequences they held. Recovery, the scrub and ``spool journal verify`` all read
damage through it, so they agree on what is lost.

How the next intact record is found after damage at offset ``p`` expecting seq ``s``:

1. **index blocks**: when the journal's index gave its blocks, the first block after
   ``p`` whose bytes match its CRC and whose first record checks is a resume point (its
   first seq is known);
2. **a search**: before that block (or without an index), every offset after ``p`` whose
   byte 4 is the format byte is tried as a record start: its length must fit, its seq
   must be at least ``s`` and at most one per :data:`~spool.server.txlog.format.codec.MIN_RECORD`
   bytes skipped, its CRC must check, and the record after it must check too (or the data
   end there). The earliest such offset wins.

Sequence numbers decide what was lost: the records between ``s`` and the resume point's
seq are the lost span (a span may hold no seq at all: bytes inserted between two intact
records). Damage that runs to the end of the data has no resume point: its last seq is
unknown here (the caller knows it from the next journal or an index, or it is a torn
tail).

Blocking I/O: call from a worker thread (recovery's, the scrub's, the CLI's).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final

import google_crc32c

from spool.server.txlog.damage.ranges import DamagedRange, FoundBy
from spool.server.txlog.errors import CorruptRecord
from spool.server.txlog.format.codec import (
    CRC_RESIDUE,
    FORMAT,
    HEADER,
    HEADER_SIZE,
    MIN_RECORD,
    record_size,
    scan,
)
from spool.server.txlog.storage.source import JournalSource, PlainSource

__all__ = [
    "BlockHint",
    "LostSpan",
    "Piece",
    "Salvage",
    "nonzero_end",
    "ranges_of",
    "salvage",
]

#: bytes read at a time when scanning records
SCAN_CHUNK: Final = 8 << 20
#: bytes searched at a time for the next record after damage
SEARCH_CHUNK: Final = 1 << 20

_crc = google_crc32c.value
_FMT: Final = bytes((FORMAT,))

#: ``(offset, length, first_seq, crc)`` of an index block, as an index says it is
BlockHint = tuple[int, int, int, int]
#: ``(journal offset, length, timestamp_us, index key, pub_seq)`` of an intact record
Row = tuple[int, int, int, int, int]


@dataclass(frozen=True, slots=True)
class LostSpan:
    """Damaged bytes of a journal and the local sequences they held.

    Attributes:
        offset: where the damage starts (the end of the last intact record before it).
        end: where intact records resume; for damage that runs to the end of the data,
            the end of its last non-zero byte.
        first_seq: the first seq not intact.
        last_seq: the last one; None when the damage runs to the end of the data (the
            number of records it held is not known from this journal alone).
        reason: what was wrong at ``offset`` (a codec reason: ``crc mismatch``...).
    """

    offset: int
    end: int
    first_seq: int
    last_seq: int | None
    reason: str

    @property
    def count(self) -> int | None:
        """Local sequences lost (None: unknown)."""
        return None if self.last_seq is None else self.last_seq - self.first_seq + 1


@dataclass(slots=True)
class Piece:
    """Consecutive intact records of a journal.

    Attributes:
        offset: journal offset of the first.
        first_seq: its seq.
        rows: one per record, in order (:data:`Row`: the index keys a scan gives).
    """

    offset: int
    first_seq: int
    rows: list[Row] = field(default_factory=list)

    @property
    def end(self) -> int:
        """Where the piece ends."""
        if not self.rows:
            return self.offset
        last = self.rows[-1]
        return last[0] + last[1]

    @property
    def next_seq(self) -> int:
        return self.first_seq + len(self.rows)


@dataclass(slots=True)
class Salvage:
    """A journal read past its damage.

    Attributes:
        pieces: the intact runs of records, in order (the first may be empty).
        spans: the lost spans between and after them, in order.
        end: where the data ends (the end of the last intact record).
        next_seq: the seq after the last intact record.
        garbage_end: the end of the last non-zero byte at or after ``end``.
        checked: bytes of records whose CRC was checked.
    """

    pieces: list[Piece]
    spans: list[LostSpan]
    end: int
    next_seq: int
    garbage_end: int
    checked: int

    @property
    def damaged(self) -> bool:
        return bool(self.spans) or self.garbage_end > self.end

    @property
    def count(self) -> int:
        """Intact records."""
        return sum(len(p.rows) for p in self.pieces)


def salvage(
    source: JournalSource,
    base: int,
    *,
    size: int | None = None,
    hints: Sequence[BlockHint] = (),
    start: int = 0,
    start_seq: int | None = None,
) -> Salvage:
    """Walk a journal's records from ``start``, past any damage (module docstring).

    Args:
        source: the journal's bytes.
        base: its first seq.
        size: bytes to consider (default: the source's size).
        hints: blocks its index gives (their CRCs are checked before they are used).
        start: offset of a record boundary to begin at (with ``start_seq``).
        start_seq: the seq of the record at ``start`` (default ``base``).
    """
    limit = source.size() if size is None else size
    pos = start
    seq = base if start_seq is None else start_seq
    pieces: list[Piece] = []
    spans: list[LostSpan] = []
    checked = 0
    ordered = sorted(hints)
    while True:
        piece = Piece(pos, seq)
        pos, seq, reason, scanned = _scan_piece(source, piece, limit)
        checked += scanned
        pieces.append(piece)
        garbage = nonzero_end(source, pos, limit)
        if reason is None and garbage <= pos:
            return Salvage(pieces, spans, pos, seq, pos, checked)
        found = _resume(source, pos, seq, limit, ordered)
        if found is None:
            spans.append(LostSpan(pos, garbage, seq, None, reason or "data after end of data"))
            return Salvage(pieces, spans, pos, seq, garbage, checked)
        at, at_seq = found
        spans.append(LostSpan(pos, at, seq, at_seq - 1, reason or "zeroed bytes"))
        pos, seq = at, at_seq


def _scan_piece(
    source: JournalSource, piece: Piece, limit: int
) -> tuple[int, int, str | None, int]:
    """Scan records into ``piece`` until damage or the end of the data.

    Returns:
        ``(end, next seq, damage reason or None at a clean end, bytes checked)``.
    """
    pos = piece.offset
    seq = piece.first_seq
    chunk = SCAN_CHUNK
    scanned = 0
    rows = piece.rows
    while pos < limit:
        try:
            buf = source.read(pos, min(chunk, limit - pos))
        except CorruptRecord as exc:  # a compressed chunk that does not decompress
            return pos, seq, exc.reason, scanned
        if not buf:
            return pos, seq, "torn record", scanned
        final = pos + len(buf) >= limit
        res = scan(buf, 0, len(buf), seq, final=final, base=pos)
        rows.extend(res.rows)
        scanned += res.end
        pos += res.end
        seq = res.next_seq
        if res.need_more:
            need = record_size(buf, res.end)
            chunk = max(SCAN_CHUNK, need) if need >= MIN_RECORD else SCAN_CHUNK
            continue
        chunk = SCAN_CHUNK
        if res.reason is not None:
            reason = res.reason
            if reason == "end of data" or (
                reason == "torn record" and nonzero_end(source, pos, limit) == pos
            ):
                return pos, seq, None, scanned  # a few zero bytes end the file
            return pos, seq, reason, scanned
    return pos, seq, None, scanned


def _resume(
    source: JournalSource, pos: int, seq: int, limit: int, hints: Sequence[BlockHint]
) -> tuple[int, int] | None:
    """The first intact record after damage at ``pos`` (expecting ``seq``): its offset
    and seq, or None when no record after ``pos`` checks."""
    stop = limit
    block = _next_good_block(source, pos, seq, limit, hints)
    if block is not None:
        stop = block[0]
    found = _search(source, pos + 1, seq, stop, limit)
    return found if found is not None else block


def _next_good_block(
    source: JournalSource, pos: int, seq: int, limit: int, hints: Sequence[BlockHint]
) -> tuple[int, int] | None:
    for off, length, first, crc in hints:
        if off <= pos or first < seq or off + length > limit:
            continue
        data = source.read(off, length)
        if len(data) == length and _crc(data) == crc and _record_at(data, 0, first, length):
            return off, first
    return None


def _record_at(buf: bytes, at: int, seq: int | None, end: int) -> int:
    """Length of a record that checks at ``buf[at:]`` (with ``seq`` when given), else 0."""
    if end - at < HEADER_SIZE:
        return 0
    length, fmt = HEADER.unpack_from(buf, at)[:2]
    rseq = HEADER.unpack_from(buf, at)[4]
    if fmt != FORMAT or length < MIN_RECORD or at + length > end:
        return 0
    if seq is not None and rseq != seq:
        return 0
    return length if _crc(buf[at : at + length]) == CRC_RESIDUE else 0


def _search(
    source: JournalSource, start: int, seq: int, stop: int, limit: int
) -> tuple[int, int] | None:
    """The earliest offset in ``[start, stop)`` where two records that check follow each
    other (or one that checks ends the data), with a seq that fits the bytes skipped."""
    damaged_at = start - 1
    pos = start
    while pos < stop:
        window = source.read(pos, min(SEARCH_CHUNK + HEADER_SIZE, limit - pos))
        if not window:
            return None
        span = min(SEARCH_CHUNK, stop - pos)
        i = window.find(_FMT, 4)
        while i >= 0 and i - 4 < span:
            at = pos + i - 4
            found = _candidate(source, window, i - 4, at, seq, damaged_at, limit)
            if found is not None:
                return at, found
            i = window.find(_FMT, i + 1)
        pos += span
    return None


def _candidate(
    source: JournalSource, window: bytes, rel: int, at: int, seq: int, damaged_at: int, limit: int
) -> int | None:
    """The seq of a record starting at journal offset ``at`` that resumes the data, if it
    is one (``window[rel:]`` holds its start)."""
    if len(window) - rel < HEADER_SIZE:
        head = source.read(at, HEADER_SIZE)
        if len(head) < HEADER_SIZE:
            return None
    else:
        head = window[rel : rel + HEADER_SIZE]
    length, fmt, _kind, _flags, rseq = HEADER.unpack_from(head, 0)[:5]
    if fmt != FORMAT or length < MIN_RECORD or at + length > limit:
        return None
    # at most one lost record per MIN_RECORD bytes skipped (and one torn short): a seq
    # further on is noise
    if rseq < seq or rseq - seq > (at - damaged_at) // MIN_RECORD + 1:
        return None
    data = source.read(at, min(length + HEADER_SIZE, limit - at))
    if len(data) < length or _crc(data[:length]) != CRC_RESIDUE:
        return None
    nxt = at + length
    following = data[length : length + 4]
    if limit - nxt < 4 or following == b"\0\0\0\0":
        return int(rseq)  # the data ends after it
    head2 = source.read(nxt, HEADER_SIZE)
    if len(head2) < HEADER_SIZE:
        return None
    length2 = HEADER.unpack_from(head2, 0)[0]
    if length2 < MIN_RECORD or nxt + length2 > limit:
        return None
    second = source.read(nxt, length2)
    return int(rseq) if _record_at(second, 0, rseq + 1, len(second)) else None


def nonzero_end(source: JournalSource, start: int, size: int) -> int:
    """End of the last non-zero byte in ``[start, size)`` (``start`` if all zero).

    The space after a journal's data is normally preallocated and never written: the
    file system reports it as having no data (``SEEK_DATA``), so this costs nothing; a
    region that does hold data is read and compared with zeros in large chunks.
    """
    found = start
    pos = source.next_data(start) if isinstance(source, PlainSource) else start
    zeros = bytes(min(SCAN_CHUNK, max(size - start, 0)))
    while pos is not None and pos < size:
        buf = source.read(pos, min(SCAN_CHUNK, size - pos))
        if not buf:
            break
        if buf != zeros[: len(buf)]:
            found = pos + len(buf.rstrip(b"\0"))
        pos += len(buf)
    return found


def ranges_of(
    spans: Iterable[LostSpan],
    journal: int,
    path: str,
    last_seq: int | None,
    found_by: FoundBy,
    found_us: int,
) -> list[DamagedRange]:
    """The damaged ranges of a journal's lost spans; a span that runs to the end of its
    data ends at ``last_seq`` (None: unknown)."""
    return [
        DamagedRange(
            journal,
            path,
            span.offset,
            span.end,
            span.first_seq,
            span.last_seq if span.last_seq is not None else last_seq,
            span.reason,
            found_by,
            found_us,
        )
        for span in spans
    ]
