"""What the log holds per publisher, rebuilt at start-up: the gap table from the indexes.

:class:`~spool.server.txlog.publishers.gaps.PublisherGaps` lives in memory; at :meth:`TransactionLog.open`
it is rebuilt from the journals' bookmark indexes, which already say, per block, the range
of each publisher's sequences and how many records it has there:

- a range whose count equals its span (``last - first + 1``) is held whole: no read;
- a range with fewer records than its span has gaps inside one block; that block's record
  headers are read (a few KB) to find which sequences it holds. These reads go newest
  block first and stop after :data:`MAX_BLOCK_READS` blocks; older ranges beyond that
  budget count as held whole (their inner gaps are forgotten, as the table's own bound
  forgets the oldest gaps);
- the records of the block still being filled are known one by one (the builder's rows).

A publisher's late records are indexed under its late key
(:func:`~spool.server.txlog.format.record.late_key`); both keys' ranges count as held. When journals
were removed (the log no longer starts at seq 1), sequences below a publisher's lowest
held one are not gaps: they may have been in the removed journals. Keys that stand for no
publisher (fence placeholders, due records: ``is_publisher_key``) are passed over: a
due record repeats a bookmark the log holds, and the ranges of due records, scattered
along the log, would take the block reads real gaps need.

Blocking (block reads): :func:`read_held` runs in a worker thread.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from spool.server.txlog.damage.fences import Fence
from spool.server.txlog.format.codec import HEADER, HEADER_SIZE, MIN_RECORD
from spool.server.txlog.format.record import (
    RecordKind,
    index_key,
    is_publisher_key,
    late_key,
    publisher_of,
)
from spool.server.txlog.index.answers import BlockSpan
from spool.server.txlog.publishers.gaps import Interval, PublisherGaps
from spool.server.txlog.storage.journal import Journal

__all__ = [
    "MAX_BLOCK_READS",
    "HeldPlan",
    "build_gaps",
    "lacks_any",
    "plan_held",
    "read_held",
    "resync_start",
    "with_fenced",
]

#: most index blocks read at start-up to find the gaps inside them
MAX_BLOCK_READS: Final = 4096
_DUE: Final = int(RecordKind.DUE)


@dataclass(slots=True)
class HeldPlan:
    """The held intervals known from the indexes, and the blocks still to read.

    Attributes:
        held: index key -> held intervals.
        reads: ``(journal, block, ranges)`` to read: the block holds these ranges of
            sequences (index key -> ranges) with gaps inside.
    """

    held: dict[int, list[Interval]] = field(default_factory=dict)
    reads: list[tuple[Journal, BlockSpan, dict[int, list[Interval]]]] = field(default_factory=list)


def plan_held(journals: Iterable[Journal], max_reads: int = MAX_BLOCK_READS) -> HeldPlan:
    """Walk the journals' indexes, newest first (event loop; no I/O)."""
    plan = HeldPlan()
    held = plan.held
    pending: dict[tuple[int, int], tuple[Journal, BlockSpan, dict[int, list[Interval]]]] = {}
    for journal in reversed(list(journals)):
        for key, first, last, count, span in journal.index.key_ranges():
            if not is_publisher_key(key):
                continue
            if count >= last - first + 1 or span is None:
                held.setdefault(key, []).append((first, last))
                continue
            slot = (journal.base, span.offset)
            entry = pending.get(slot)
            if entry is None and len(pending) >= max_reads:
                held.setdefault(key, []).append((first, last))  # past the budget: held
                continue
            if entry is None:
                entry = pending[slot] = (journal, span, {})
            entry[2].setdefault(key, []).append((first, last))
    plan.reads = list(pending.values())
    return plan


def read_held(plan: HeldPlan) -> dict[int, list[Interval]]:
    """Read the planned blocks and add what they hold (worker thread).

    A block that cannot be read whole (a journal archived meanwhile, a damaged block)
    counts its ranges as held whole: a gap is only ever claimed when the bytes show it.
    """
    held = plan.held
    for journal, span, ranges in plan.reads:
        found = _block_sequences(journal, span, set(ranges))
        for key, whole in ranges.items():
            if found is None:
                held.setdefault(key, []).extend(whole)
            else:
                held.setdefault(key, []).extend((s, s) for s in found.get(key, ()))
    return held


def _block_sequences(
    journal: Journal, span: BlockSpan, keys: set[int]
) -> dict[int, list[int]] | None:
    """The sequences of ``keys`` in one block (record headers only); None when the block
    cannot be read whole."""
    source = journal.source
    out: dict[int, list[int]] = {}
    if source is None:
        return None
    length = min(span.length, journal.durable_len - span.offset)
    try:
        buf = source.read(span.offset, length)
    except OSError:
        return None
    pos = 0
    for _ in range(span.count):
        if len(buf) - pos < HEADER_SIZE:
            return None
        h = HEADER.unpack_from(buf, pos)
        size = h[0]
        if size < MIN_RECORD or pos + size > len(buf):
            return None
        key = index_key(h[6], h[3])
        if key in keys and h[2] != _DUE:  # a due record is filed under DUE_KEY
            out.setdefault(key, []).append(h[7])
        pos += size
    return out


def build_gaps(
    held: dict[int, list[Interval]],
    publishers: Iterable[int],
    *,
    removed_before: bool,
) -> PublisherGaps:
    """The gap table of ``publishers`` from what the log holds under both their keys.

    Args:
        held: index key -> held intervals (:func:`plan_held` + :func:`read_held`).
        publishers: the log's publishers.
        removed_before: journals were removed: no gap below a publisher's lowest held.
    """

    def pieces() -> Iterable[tuple[int, list[Interval]]]:
        for pub in publishers:
            intervals = held.get(pub, []) + held.get(late_key(pub), [])
            if not intervals:
                continue
            if removed_before:
                intervals.append((1, min(lo for lo, _hi in intervals)))
            yield pub, intervals

    return PublisherGaps.rebuild_from(pieces())


def _lacks(holdings: dict[int, tuple[int, list[Interval]]], pub: int, lo: int, hi: int) -> bool:
    """Whether holdings miss any sequence of ``pub`` in ``[lo, hi]``."""
    entry = holdings.get(pub)
    if entry is None:
        return True
    last, gaps = entry
    return hi > last or any(g_lo <= hi and lo <= g_hi for g_lo, g_hi in gaps)


def resync_start(
    journals: Iterable[Journal],
    publishers: dict[int, tuple[int, int]],
    holdings: dict[int, tuple[int, list[Interval]]],
) -> int | None:
    """The first seq of the oldest journal that may hold a record another instance lacks.

    ``holdings`` is what that instance holds per publisher (its highest and its gaps).
    Coarse to a journal (the per-journal publisher summaries answer without reading a
    record): a resync from there examines records the other side already holds and skips
    them. None when no journal holds anything it lacks.
    """
    for journal in journals:
        if not journal.index.count:
            continue
        for summary in journal.index.publishers():
            key = summary.pub_hash
            if not is_publisher_key(key):
                continue  # fenced records' placeholders, due records: nothing to resend
            pub = key if key in publishers or late_key(key) not in publishers else late_key(key)
            if _lacks(holdings, pub, summary.min_pub_seq, summary.max_pub_seq):
                return journal.base
    return None


def with_fenced(
    holdings: dict[int, tuple[int, list[Interval]]], fences: Iterable[Fence]
) -> dict[int, tuple[int, list[Interval]]]:
    """``holdings`` with every fence's intervals counted as held.

    A fence's records are written back in place, under their seqs, by the repair
    (server/replication/repair.py); a replication source that resent them over a link
    would give them new seqs, as late arrivals applied in arrival order (an older SOW
    value over a newer one, an acked queue message entering again), and the fence could
    never be filled. So what an instance tells its sources it holds includes them: the
    repair alone fills a fenced range. An inexact fence's intervals may over-approximate
    (sequences that were never in the lost range, e.g. records of topics this instance
    does not take, or records not here yet): those are withheld by the resync only while
    the fence stands; once it is filled or released, the links that were told so resync
    again (server/replication/inbound.py). An index key stands for one of two
    publishers (``publisher_of``): the one the log knows, else the key itself.
    """
    out = {h: (last, list(gaps)) for h, (last, gaps) in holdings.items()}
    for fence in fences:
        for key, lo, hi in fence.identities:
            pub = next((p for p in publisher_of(key) if p in out), key)
            last, gaps = out.get(pub, (0, []))
            kept = [g for g in gaps if g[1] < lo or g[0] > hi]
            for g_lo, g_hi in gaps:
                if g_lo <= hi and g_hi >= lo:  # what is left of a gap around the fence
                    if g_lo < lo:
                        kept.append((g_lo, lo - 1))
                    if g_hi > hi:
                        kept.append((hi + 1, g_hi))
            if lo > last + 1:
                kept.append((last + 1, lo - 1))  # lacked between the highest and the fence
            out[pub] = (max(last, hi), sorted(kept))
    return out


def lacks_any(
    holdings: dict[int, tuple[int, list[Interval]]], intervals: Iterable[tuple[int, int, int]]
) -> bool:
    """Whether ``holdings`` miss a sequence of any ``(index key, first, last)`` interval
    (an index key read as :func:`with_fenced` reads it): a source told these were held
    has withheld what it holds of them from its resync."""
    for key, lo, hi in intervals:
        pub = next((p for p in publisher_of(key) if p in holdings), key)
        if _lacks(holdings, pub, lo, hi):
            return True
    return False
