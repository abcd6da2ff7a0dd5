"""Finding a record by bookmark or by time across journals, without scanning the log.

A lookup is planned against the journals' indexes (no I/O): a walk over the journals'
per-publisher summaries or running-maximum timestamps picks one journal, its index picks
one block. :func:`search_span` then walks that block's record headers (a few KB) for the
exact record. The log adds its in-memory tail on top; ``spool journal find`` uses this
alone on a directory it must not modify.

A bookmark names the record of the message as it was published. A delayed message has a
second record with the same bookmark, its due record (server/txlog/format/record.py
``RecordKind.DUE``), which a lookup by bookmark never takes for it; :func:`plan_due`
plans the search for that one, where it was delivered.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import google_crc32c

from spool.server.txlog.errors import CorruptRecord
from spool.server.txlog.format.codec import (
    CRC_RESIDUE,
    HEADER,
    HEADER_SIZE,
    MIN_RECORD,
    build_record,
)
from spool.server.txlog.format.record import DUE_KEY, RecordKind, split_schedule_field
from spool.server.txlog.index.answers import BlockSpan
from spool.server.txlog.storage.journal import Journal

__all__ = [
    "Match",
    "SpanQuery",
    "due_time",
    "plan_bookmark",
    "plan_due",
    "plan_late",
    "plan_later",
    "plan_time",
    "search_span",
]

_DUE = int(RecordKind.DUE)
_SCHEDULED = int(RecordKind.SCHEDULED)


@dataclass(frozen=True, slots=True)
class SpanQuery:
    """A lookup narrowed to one block of one journal.

    ``timestamp_us`` set: the first record at or after that time; ``above``: the first
    record of a message of ``pub_hash`` with a sequence above ``pub_seq`` (any kind but a
    due record); otherwise the record with bookmark ``(pub_hash, pub_seq)``: its due
    record when ``due``, else the record it was published as (any kind but a due record).
    """

    journal: Journal
    span: BlockSpan
    pub_hash: int = 0
    pub_seq: int = 0
    timestamp_us: int | None = None
    due: bool = False
    above: bool = False

    def matches(self, ts: int, pub_hash: int, pub_seq: int, kind: int) -> bool:
        """Whether a record with these fields is the one looked for."""
        if self.timestamp_us is not None:
            return ts >= self.timestamp_us
        if pub_hash != self.pub_hash or (kind == _DUE) != self.due:
            return False
        return pub_seq > self.pub_seq if self.above else pub_seq == self.pub_seq


@dataclass(frozen=True, slots=True)
class Match:
    """The record found: its seq, journal offset, time, bookmark and kind, and for a
    scheduled record its due time (None when its field does not say one)."""

    seq: int
    offset: int
    timestamp_us: int
    pub_hash: int
    pub_seq: int
    kind: int = int(RecordKind.PUBLISH)
    due_us: int | None = None


def plan_bookmark(journals: Sequence[Journal], pub_hash: int, pub_seq: int) -> SpanQuery | None:
    """The block that holds bookmark ``(pub_hash, pub_seq)`` if any journal can.

    Journals are searched newest first (resumes ask for recent bookmarks); a publisher's
    sequences increase along the log, so the first journal whose range for that publisher
    starts at or below ``pub_seq`` decides.
    """
    if not pub_hash:
        return None
    for j in reversed(journals):
        summary = j.index.publisher(pub_hash)
        if summary is None:
            continue
        if pub_seq > summary.max_pub_seq:
            return None
        if pub_seq < summary.min_pub_seq:
            continue
        span = j.index.span_for_bookmark(pub_hash, pub_seq)
        return None if span is None else SpanQuery(j, span, pub_hash, pub_seq)
    return None


def plan_late(
    journals: Sequence[Journal], key: int, pub_hash: int, pub_seq: int
) -> list[SpanQuery]:
    """Every block that may hold the late record ``(pub_hash, pub_seq)``, indexed under
    ``key`` (its publisher's late key): late records of one publisher need not increase
    along the log, so every journal and block whose range covers the sequence is a
    candidate (they are few: late records are rare)."""
    plans: list[SpanQuery] = []
    for j in reversed(journals):
        summary = j.index.publisher(key)
        if summary is None or not summary.min_pub_seq <= pub_seq <= summary.max_pub_seq:
            continue
        plans.extend(
            SpanQuery(j, span, pub_hash, pub_seq) for span in j.index.late_spans(key, pub_seq)
        )
    return plans


def plan_later(journals: Sequence[Journal], pub_hash: int, pub_seq: int) -> SpanQuery | None:
    """The block holding the first record, in log order, of a message of ``pub_hash``
    with a sequence above ``pub_seq`` (None: the log holds none).

    That record is always under the publisher's own index key, whose sequences increase
    along the log: a record filed under the late key arrived after one of its publisher
    with a higher sequence, which therefore comes before it. So the first journal whose
    own range goes above ``pub_seq`` holds it, and a binary search in that journal's
    ranges gives the block.
    """
    if not pub_hash:
        return None
    holder: Journal | None = None
    for j in reversed(journals):
        summary = j.index.publisher(pub_hash)
        if summary is None:
            continue
        if summary.max_pub_seq <= pub_seq:
            break
        holder = j
        if summary.min_pub_seq <= pub_seq:
            break
    if holder is None:
        return None
    spans = holder.index.spans_from(pub_hash, pub_seq + 1, 1)
    return SpanQuery(holder, spans[0], pub_hash, pub_seq, above=True) if spans else None


def plan_due(
    journals: Sequence[Journal], from_seq: int, pub_hash: int, pub_seq: int, limit: int
) -> list[SpanQuery]:
    """The first ``limit`` blocks, in log order, that may hold the due record of bookmark
    ``(pub_hash, pub_seq)`` at or after seq ``from_seq``: the blocks holding due records
    from there (``DUE_KEY``, indexed by their own seqs, which increase along the log)."""
    plans: list[SpanQuery] = []
    for j in journals:
        if len(plans) >= limit:
            break
        summary = j.index.publisher(DUE_KEY)
        if summary is None or summary.max_pub_seq < from_seq:
            continue
        plans.extend(
            SpanQuery(j, span, pub_hash, pub_seq, due=True)
            for span in j.index.spans_from(DUE_KEY, from_seq, limit - len(plans))
        )
    return plans


def plan_time(journals: Sequence[Journal], timestamp_us: int) -> SpanQuery | None:
    """The block holding the first record at or after ``timestamp_us`` (None: no such).

    Uses running maxima, so the answer is the first record in log order whose own time
    reaches ``timestamp_us`` even if recorded times went backwards.
    """
    running = -(1 << 63)
    for j in journals:
        if not j.count:
            continue
        if max(running, j.index.ts_max) >= timestamp_us:
            span = j.index.span_for_time(timestamp_us)
            if span is None:  # pragma: no cover - the journal's maximum reaches the time
                return None
            return SpanQuery(j, span, timestamp_us=timestamp_us)
        running = max(running, j.index.ts_max)
    return None


def search_span(q: SpanQuery, buf: bytes, stop_seq: int) -> tuple[Match | None, int]:
    """Walk the records of ``q``'s block read into ``buf``, up to seq ``stop_seq``.

    Each header read is checked (length, sequence, CRC) so a damaged block is reported,
    never misread.

    Returns:
        ``(match or None, the seq the walk reached)``.

    Raises:
        CorruptRecord: the block's bytes are not the records the index promised.
    """
    seq = q.span.seq
    stop = min(stop_seq, q.span.seq + q.span.count)
    pos = 0
    crc = google_crc32c.value
    path = str(q.journal.path)
    while seq < stop and len(buf) - pos >= HEADER_SIZE:
        h = HEADER.unpack_from(buf, pos)
        length = h[0]
        if length < MIN_RECORD or pos + length > len(buf):
            raise CorruptRecord(q.span.offset + pos, "bad length", path)
        if h[4] != seq:
            raise CorruptRecord(q.span.offset + pos, "sequence gap", path)
        if crc(buf[pos : pos + length]) != CRC_RESIDUE:
            raise CorruptRecord(q.span.offset + pos, "crc mismatch", path)
        if q.matches(h[5], h[6], h[7], h[2]):
            due = due_time(buf, pos, h) if h[2] == _SCHEDULED else None
            return Match(seq, q.span.offset + pos, h[5], h[6], h[7], h[2], due), seq
        pos += length
        seq += 1
    return None, seq


def due_time(buf: bytes, pos: int, h: tuple[int, ...]) -> int | None:
    """The due time of the checked scheduled record at ``pos`` (header ``h``); None when
    its SOW key field does not start with one."""
    try:
        return split_schedule_field(build_record(buf, pos, h).sow_key)[0]
    except (ValueError, CorruptRecord):
        return None
