"""Cutting an instance's journals into slices: the input partitions of a scan.

A :class:`Slice` is a contiguous run of whole index blocks of one journal (a few MB, so a
large journal gives several), or the unindexed rest of a journal. The planner drops the
blocks a :class:`~spool.server.pipeline.predicate.ScanPredicate` cannot match, using only the
indexes (no journal byte is read here):

- **seq**: blocks outside the seq range (each block knows its first seq and count);
- **time**: blocks whose running maximum time is below the lower bound (every record in
  them is older); an upper time bound cannot drop blocks, because recorded times may go
  backwards, so readers test it per record;
- **publisher**: blocks without a record of the publishers asked for (the index's
  per-publisher ranges).

Topics are not in the indexes: readers test them per record, on the header, before the
body is copied. :class:`ScanPlan` counts the blocks kept and dropped, which is how the
tests see pruning work.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from spool.server.pipeline.catalog import Block, Catalog, JournalFile
from spool.server.pipeline.predicate import ScanPredicate

__all__ = ["DEFAULT_SLICE_BYTES", "ScanPlan", "Slice", "plan_scan"]

DEFAULT_SLICE_BYTES: Final = 32 << 20


@dataclass(frozen=True, slots=True)
class Slice:
    """One input partition: bytes of one journal to decode.

    Attributes:
        instance: the instance (file prefix), to find the journal again if it moved.
        journal_dir, archive_dir: where its journals live.
        base: the journal id.
        path: where the planner found it (a reader looks again if it moved since).
        compression: of that file.
        offset: where the first record is.
        first_seq: seq of that record.
        end: where the slice ends; None: at the end of the journal's data.
        blocks: the index blocks covering ``[offset, end)`` (empty: unindexed bytes, every
            record checked on its own).
        damage: damage the catalog found at the start of an unindexed slice.
        index: position of the slice in the plan (log order).
    """

    instance: str
    journal_dir: str
    archive_dir: str | None
    base: int
    path: str
    compression: str | None
    offset: int
    first_seq: int
    end: int | None
    blocks: tuple[Block, ...] = ()
    damage: tuple[int, str] | None = None
    index: int = 0

    @property
    def nbytes(self) -> int | None:
        return None if self.end is None else self.end - self.offset


@dataclass(slots=True)
class ScanPlan:
    """The slices of a scan and what pruning did.

    Attributes:
        slices: in log order.
        blocks_total: index blocks of every journal.
        blocks_planned: the blocks the slices cover.
        unindexed: slices over unindexed bytes (read whole).
        journals: journals with at least one slice.
        notes: why some journals are not (completely) indexed.
    """

    slices: list[Slice] = field(default_factory=list)
    blocks_total: int = 0
    blocks_planned: int = 0
    unindexed: int = 0
    journals: int = 0
    notes: list[str] = field(default_factory=list)


def plan_scan(
    catalog: Catalog, predicate: ScanPredicate, slice_bytes: int = DEFAULT_SLICE_BYTES
) -> ScanPlan:
    """The slices a scan with ``predicate`` must read, at most ``slice_bytes`` each.

    A slice never spans two journals nor a dropped block, and is at least one block.
    """
    plan = ScanPlan()
    if predicate.empty:
        plan.blocks_total = sum(len(j.blocks) for j in catalog)
        return plan
    for j in catalog:
        plan.blocks_total += len(j.blocks)
        if j.note:
            plan.notes.append(f"{j.path.name}: {j.note}")
        first, last = catalog.seq_range(j)
        if first > predicate.seq_hi or (last is not None and last < predicate.seq_lo):
            continue
        before = len(plan.slices)
        kept = _kept_blocks(j, predicate)
        plan.blocks_planned += len(kept)
        for run in _runs(kept, slice_bytes):
            plan.slices.append(_slice(catalog, j, run[0].offset, run[0].first_seq, run))
        if not j.complete and j.next_seq <= predicate.seq_hi:
            plan.slices.append(_slice(catalog, j, j.indexed_end, j.next_seq, (), damage=j.damage))
            plan.unindexed += 1
        if len(plan.slices) > before:
            plan.journals += 1
    plan.slices = [
        Slice(
            s.instance,
            s.journal_dir,
            s.archive_dir,
            s.base,
            s.path,
            s.compression,
            s.offset,
            s.first_seq,
            s.end,
            s.blocks,
            s.damage,
            i,
        )
        for i, s in enumerate(plan.slices)
    ]
    return plan


def _kept_blocks(j: JournalFile, p: ScanPredicate) -> list[Block]:
    allowed: set[int] | None = None
    if p.publishers is not None:
        allowed = set()
        for h in p.publishers:
            allowed.update(j.blocks_of_publisher(h))
    out = []
    for i, b in enumerate(j.blocks):
        if b.last_seq < p.seq_lo or b.first_seq > p.seq_hi:
            continue
        if b.ts_max < p.ts_lo:
            continue
        if allowed is not None and i not in allowed:
            continue
        out.append(b)
    return out


def _runs(blocks: list[Block], slice_bytes: int) -> list[list[Block]]:
    """Consecutive (adjacent) blocks grouped up to ``slice_bytes``."""
    runs: list[list[Block]] = []
    cur: list[Block] = []
    size = 0
    for b in blocks:
        if cur and (cur[-1].end != b.offset or size + b.length > slice_bytes):
            runs.append(cur)
            cur, size = [], 0
        cur.append(b)
        size += b.length
    if cur:
        runs.append(cur)
    return runs


def _slice(
    catalog: Catalog,
    j: JournalFile,
    offset: int,
    first_seq: int,
    blocks: list[Block] | tuple[()],
    damage: tuple[int, str] | None = None,
) -> Slice:
    return Slice(
        instance=catalog.instance,
        journal_dir=str(catalog.journal_dir),
        archive_dir=str(catalog.archive_dir) if catalog.archive_dir is not None else None,
        base=j.base,
        path=str(j.path),
        compression=j.compression,
        offset=offset,
        first_seq=first_seq,
        end=blocks[-1].end if blocks else None,
        blocks=tuple(blocks),
        damage=damage,
    )
