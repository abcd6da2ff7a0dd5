"""Turning damage into fences: which local sequences, and what their records were.

A journal read past its damage (server/txlog/damage/salvage.py) gives its intact pieces and its
lost spans; :func:`fences_of` makes each span a :class:`~spool.server.txlog.damage.fences.Fence` with
what a repair must ask a peer for:

- **the bookmarks of its records**, the best the log can tell:

  1. *exactly*, from the journal's index when it is intact (a sealed index whose journal
     bytes are damaged, or the blocks of an open index): each block keeps, per
     publisher, the range of sequences it holds and how many; the blocks the span
     touches, less the intact records decoded in them, are the lost records. Exact when
     every such range is whole (as many records as sequences) and they add up to the span;
  2. *by neighbours* otherwise: per publisher, the sequences between its last intact
     record before the span and its first after it (this journal's records, else the
     summaries of the journals around it);

- **the time window** between the intact records around it, which bounds what a peer
  reads to find them.

A torn or truncated tail of the last journal is different: its bytes were never
complete, and a crash leaves such a tail behind every time (records that were written
but not yet fsynced, never acknowledged). It is cut, as it always was; only records
*known to have been durable* are fenced after the cut (:func:`tail_fence`): the
``clients.ack`` file covered them, or the open index listed their block (both are
written only after the fsync of what they describe), or, from outside the log, a
replication peer acknowledged them (server/engine.py). Their seqs then stay taken.

Pure computation on values already read: any thread.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from spool.server.txlog.damage.fences import Fence, Part, placeholders
from spool.server.txlog.damage.salvage import LostSpan, Piece, Salvage
from spool.server.txlog.format.record import is_publisher_key
from spool.server.txlog.index.answers import BlockSpan, PublisherSummary

__all__ = [
    "KeyRanges",
    "Neighbours",
    "fences_of",
    "journal_parts",
    "neighbours_of",
    "tail_fence",
    "unnamed_intervals",
]


class KeyRanges(Protocol):
    """What an index tells of its blocks' publishers (both index forms have it)."""

    def key_ranges(self) -> Iterable[tuple[int, int, int, int, BlockSpan | None]]: ...


@dataclass(slots=True)
class Neighbours:
    """What the journals around one journal say of its edges.

    Attributes:
        before: per index key, its highest sequence in the journals before.
        after: per index key, its lowest sequence in the journals after.
        t_before: time of the last record of the journal before (None: none).
        t_after: time of the first record of the journal after (None: none).
    """

    before: dict[int, int] = field(default_factory=dict)
    after: dict[int, int] = field(default_factory=dict)
    t_before: int | None = None
    t_after: int | None = None


class _Summaries(Protocol):
    @property
    def count(self) -> int: ...
    @property
    def first_ts(self) -> int: ...
    @property
    def last_ts(self) -> int: ...
    def publishers(self) -> Iterable[object]: ...


def neighbours_of(before: Sequence[_Summaries], after: Sequence[_Summaries]) -> Neighbours:
    """The :class:`Neighbours` of a journal from the indexes of the journals before and
    after it (oldest first each)."""
    nb = Neighbours()
    for index in before:
        for p in index.publishers():
            key, high = p.pub_hash, p.max_pub_seq  # type: ignore[attr-defined]
            if is_publisher_key(key) and high > nb.before.get(key, 0):
                nb.before[key] = high
        if index.count:
            nb.t_before = index.last_ts
    for index in reversed(after):
        for p in index.publishers():
            key, low = p.pub_hash, p.min_pub_seq  # type: ignore[attr-defined]
            if is_publisher_key(key):
                nb.after[key] = min(low, nb.after.get(key, low))
        if index.count:
            nb.t_after = index.first_ts
    return nb


def fences_of(
    spans: Sequence[LostSpan],
    sv: Salvage,
    *,
    journal: int,
    path: str,
    last_seq: int,
    index: KeyRanges | None,
    neighbours: Neighbours,
    found_by: str,
    found_us: int,
    saved: str | None,
) -> list[Fence]:
    """The fences of a journal's lost spans (module docstring).

    Args:
        spans: the spans to fence (a span running to the end of the data ends at
            ``last_seq``).
        sv: the journal read past its damage.
        journal: its base.
        path: its file.
        last_seq: its last seq (what a span to the end of its data runs to).
        index: its index, when one is intact (exact bookmarks).
        neighbours: what the journals around it say.
        found_by, found_us, saved: the fences' origin.
    """
    rows = _rows_by_seq(sv.pieces)
    fences = []
    for span in spans:
        last = span.last_seq if span.last_seq is not None else last_seq
        if last < span.first_seq:
            continue  # bytes that held no record: nothing to fence
        before = _last_before(rows, span.first_seq, neighbours)
        after = _first_after(rows, last, neighbours)
        t_lo = _time_before(rows, span.first_seq, neighbours)
        t_hi = _time_after(rows, last, neighbours)
        ids: list[tuple[int, int, int]] = []
        exact = False
        if index is not None:
            ids, exact = _from_index(index, rows, span.first_seq, last)
        if not exact:
            ids = _from_neighbours(before, after)
        fence = Fence(
            span.first_seq, last, journal, span.reason, found_by, found_us, path,
            span.offset, saved, ids, exact, (t_lo, t_hi),
        )  # fmt: skip
        fences.append(fence)
    return fences


#: ``seq -> (index key, pub_seq, timestamp)`` of the intact records
_Rows = dict[int, tuple[int, int, int]]


def _rows_by_seq(pieces: Sequence[Piece]) -> _Rows:
    out: _Rows = {}
    for piece in pieces:
        seq = piece.first_seq
        for _off, _len, ts, key, ps in piece.rows:
            out[seq] = (key, ps, ts)
            seq += 1
    return out


def _last_before(rows: _Rows, first: int, nb: Neighbours) -> dict[int, int]:
    found = dict(nb.before)
    for seq in sorted(s for s in rows if s < first):
        key, ps, _ts = rows[seq]
        if is_publisher_key(key):
            found[key] = ps
    return found


def _first_after(rows: _Rows, last: int, nb: Neighbours) -> dict[int, int]:
    found = dict(nb.after)
    for seq in sorted((s for s in rows if s > last), reverse=True):
        key, ps, _ts = rows[seq]
        if is_publisher_key(key):
            found[key] = ps
    return found


def _time_before(rows: _Rows, first: int, nb: Neighbours) -> int:
    seqs = [s for s in rows if s < first]
    if seqs:
        return rows[max(seqs)][2]
    return nb.t_before if nb.t_before is not None else 0


def _time_after(rows: _Rows, last: int, nb: Neighbours) -> int | None:
    seqs = [s for s in rows if s > last]
    if seqs:
        return rows[min(seqs)][2]
    return nb.t_after


def _from_index(
    index: KeyRanges, rows: _Rows, first: int, last: int
) -> tuple[list[tuple[int, int, int]], bool]:
    """The bookmarks of the records in seqs ``first..last`` from the index blocks they lie
    in, less the intact records of those blocks; exact when every range involved is whole
    and they add up to the span."""
    lost: dict[int, set[int]] = {}
    whole = True
    touched = False
    for key, lo, hi, count, span in index.key_ranges():
        if span is None or not is_publisher_key(key):
            continue
        b_first, b_last = span.seq, span.seq + span.count - 1
        if b_last < first or b_first > last:
            continue
        touched = True
        if count != hi - lo + 1:
            whole = False
            continue
        intact = {rows[s][1] for s in range(b_first, b_last + 1) if s in rows and rows[s][0] == key}
        gone = set(range(lo, hi + 1)) - intact
        if gone:
            lost.setdefault(key, set()).update(gone)
        # records of the block outside the span that are not intact belong to another span
        outside = [s for s in range(b_first, b_last + 1) if not first <= s <= last]
        if any(s not in rows for s in outside):
            whole = False
    total = sum(len(v) for v in lost.values())
    exact = touched and whole and total == last - first + 1
    return _intervals(lost), exact


def _intervals(lost: dict[int, set[int]]) -> list[tuple[int, int, int]]:
    out = []
    for key in sorted(lost):
        seqs = sorted(lost[key])
        start = prev = seqs[0]
        for s in seqs[1:]:
            if s != prev + 1:
                out.append((key, start, prev))
                start = s
            prev = s
        out.append((key, start, prev))
    return out


def _from_neighbours(before: dict[int, int], after: dict[int, int]) -> list[tuple[int, int, int]]:
    """Per publisher with a record after the span, the sequences between its last record
    before (none: 0) and its first after. A publisher whose first records were in the
    span has none before: its records there are among ``1..first after - 1``."""
    return [
        (key, before.get(key, 0) + 1, after[key] - 1)
        for key in sorted(after)
        if after[key] > before.get(key, 0) + 1
    ]


class _Index(KeyRanges, Protocol):
    def publishers(self) -> Iterable[PublisherSummary]: ...


class _Indexed(Protocol):
    @property
    def base(self) -> int: ...
    @property
    def last_seq(self) -> int: ...
    @property
    def index(self) -> _Index: ...


def unnamed_intervals(
    fence: Fence,
    own: int,
    journals: Sequence[_Indexed],
    own_floor: int = 0,
    highest: Mapping[int, int] | None = None,
) -> list[tuple[int, int, int]]:
    """The intervals of publishers an inexact ``fence`` does not name yet, from every
    journal of the log (module docstring; docs/transaction-log.md "Fences").

    A fence made at open knows only the few journals around it (a journal of
    placeholders or the open journal after it may say nothing), so once the log is open
    each publisher it lacks is looked up in all of them: one with a record after the
    fence gets ``last before (none: 0) + 1 .. first after - 1``. The instance's own
    identity (``own``) numbers its records one after the other (``publisher_last + 1``),
    so with none of them after the fence its records there are at most as many as the
    fence's seqs, numbered after the last one before it or after a skip that moved its
    highest past lost ones (``own_floor``, server/txlog/publishers/ownfloor.py; no record backs that
    highest): ``last before + 1 .. max(last before, own_floor) + records``. Wider than the
    records when the skip came after them: a repair that finds too many writes nothing,
    but it never asks short of the records. A publisher with no record after the fence
    whose highest sequence (``highest``: the publisher table, which ``clients.ack`` keeps
    past a missing journal) is above its last record before it gets ``last before + 1 ..
    highest``: those records are nowhere else in the log. Ranges of the fence's own
    journal whose block lies across the fence are left out: that only widens an interval.
    """
    if fence.exact:
        return []
    named = {key for key, _lo, _hi in fence.identities}
    before: dict[int, int] = {}
    after: dict[int, int] = {}
    for journal in journals:
        if journal.last_seq < fence.first_seq or journal.base > fence.last_seq:
            later = journal.base > fence.last_seq
            ranges = [
                (p.pub_hash, p.min_pub_seq, p.max_pub_seq, later)
                for p in journal.index.publishers()
            ]
        else:
            ranges = [
                (key, lo, hi, span.seq > fence.last_seq)
                for key, lo, hi, _n, span in journal.index.key_ranges()
                if span is not None
                and (span.seq + span.count - 1 < fence.first_seq or span.seq > fence.last_seq)
            ]
        for key, lo, hi, later in ranges:
            if key in named or not is_publisher_key(key):
                continue
            if later:
                after[key] = min(after.get(key, lo), lo)
            else:
                before[key] = max(before.get(key, 0), hi)
    out = _from_neighbours(before, after)
    for key, top in (highest or {}).items():
        last = before.get(key, 0)
        if (
            key not in named
            and key not in after
            and key != own
            and is_publisher_key(key)
            and top > last
        ):
            out.append((key, last + 1, top))
    if own not in named and own not in after:
        last = before.get(own, 0)
        out.append((own, last + 1, max(last, own_floor) + fence.records))
    return sorted(out)


def tail_fence(
    cut_seq: int,
    *,
    durable_upto: int,
    known: dict[int, tuple[int, int]],
    highest: dict[int, int],
    journal: int,
    path: str,
    reason: str,
    offset: int,
    saved: str | None,
    t_lo: int,
    found_by: str,
    found_us: int,
) -> Fence | None:
    """The fence of records cut from the end of the log that were known to be durable.

    Args:
        cut_seq: the first seq the cut removed.
        durable_upto: the highest seq known durable (``clients.ack``'s covered seq, the
            open index's last block, a peer's acknowledgment); nothing is fenced when it
            is below ``cut_seq``.
        known: ``pub_hash -> (highest pub_seq, its seq)`` as the evidence last saw the
            publishers (``clients.ack``): a publisher whose highest record lies in the
            cut lost the sequences above what the log still holds of it.
        highest: per publisher, its highest sequence the log still holds.
        journal, path, reason, offset, saved, found_by, found_us: the fence's origin.
        t_lo: time of the last record kept.
    """
    if durable_upto < cut_seq:
        return None
    ids = sorted(
        (h, highest.get(h, 0) + 1, ps)
        for h, (ps, seq) in known.items()
        if cut_seq <= seq <= durable_upto and ps > highest.get(h, 0) and is_publisher_key(h)
    )
    exact = sum(hi - lo + 1 for _h, lo, hi in ids) == durable_upto - cut_seq + 1
    return Fence(
        cut_seq, durable_upto, journal, reason, found_by, found_us, path, offset, saved,
        ids, exact, (t_lo, None),
    )  # fmt: skip


def journal_parts(sv: Salvage, spans: list[LostSpan], fences: list[Fence]) -> list[Part]:
    """A journal rewritten with its fences: each intact piece's bytes (as a range of the
    old journal), and each fence's placeholders where its span was (bytes of a span that
    held no seq are dropped, and so is anything after the last piece)."""
    by_first = {f.first_seq: f for f in fences}
    parts: list[Part] = []
    items: list[tuple[int, int, Part | Fence]] = []
    for piece in sv.pieces:
        if piece.rows:
            items.append((piece.first_seq, 0, (piece.offset, piece.end)))
    for span in spans:
        fence = by_first.get(span.first_seq)
        if fence is not None:
            items.append((fence.first_seq, 1, fence))
    items.sort(key=lambda item: (item[0], item[1]))
    for _seq, _kind, item in items:
        if isinstance(item, Fence):
            parts.extend(placeholders(item, item.window[0]))
        else:
            parts.append(item)
    return parts
