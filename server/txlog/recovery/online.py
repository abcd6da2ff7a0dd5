"""Changes to a finished journal of a running log: fencing its damage, writing records
back in place of a fence.

Recovery fences what it finds at open (server/txlog/recovery/recover.py); while the log runs, the
scrub or a read can find damage in a finished journal too. :func:`fence_journal` does the
same work on it, in a worker thread: the journal is read past its damage, its lost spans
become fences (server/txlog/damage/fenceplan.py), its intact bytes and the fences' placeholders are
written as a new journal that replaces it (server/txlog/recovery/rewrite.py; the old one is kept in
``damaged/``), and the new file's reader and sealed index are handed back for the log to
swap in on the loop.

:func:`fill_journal` is the other direction: a repair found the records a fence stands
for (server/replication/repair.py); they are written in place of its placeholders, under
the same local seqs, and the journal is written anew around them the same way. A record
placed below its publisher's highest sequence before it in the log is flagged late
(server/txlog/format/record.py ``FLAG_LATE``), as it would have been when it first arrived.

The journal being written is not changed here: damage in it is fenced by the next open.

Blocking I/O: call from a worker thread. The log holds its retention lock meanwhile, so
the journal is not archived, compressed or removed under it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from spool.server.txlog.damage.fenceplan import Neighbours, fences_of, journal_parts
from spool.server.txlog.damage.fences import Fence, Part, placeholders
from spool.server.txlog.damage.salvage import BlockHint, salvage
from spool.server.txlog.format.codec import encode
from spool.server.txlog.format.record import FLAG_LATE, Record
from spool.server.txlog.index.sealed import SealedIndex
from spool.server.txlog.recovery.rewrite import keep_damaged, rewrite_journal
from spool.server.txlog.storage.files import DAMAGED_DIR, FileSeam, index_name
from spool.server.txlog.storage.source import JournalSource, open_source

__all__ = ["Mended", "fence_journal", "fill_journal"]


@dataclass(slots=True)
class Mended:
    """A journal written anew: where it is now, its reader, index and fences.

    Attributes:
        path: the new journal file (plain).
        source: an open reader of it.
        index: its sealed index, mapped.
        fences: the fences it holds that this change made.
        size: its size.
    """

    path: Path
    source: JournalSource
    index: SealedIndex
    fences: list[Fence]
    size: int


def fence_journal(
    *,
    path: Path,
    source: JournalSource,
    base: int,
    last_seq: int,
    hints: list[BlockHint],
    index: SealedIndex | None,
    neighbours: Neighbours,
    journal_dir: Path,
    instance: str,
    seam: FileSeam,
    block_bytes: int,
    found_by: str,
    found_us: int,
) -> Mended | None:
    """Fence the damage of a finished journal (module docstring).

    Args:
        path: the journal file.
        source: its reader.
        base, last_seq: its first and last seq.
        hints: its index blocks.
        index: its sealed index (the lost records' bookmarks when it is intact).
        neighbours: what the journals around it say.
        journal_dir: the journal directory (``damaged/`` is in it).
        instance: the instance name.
        seam: the file seam journal writes go through.
        block_bytes: the new index's block size.
        found_by, found_us: who found the damage, when.

    Returns:
        The journal as written anew; None when reading it again found nothing damaged.
    """
    size = index.data_len if index is not None else source.size()
    sv = salvage(source, base, size=size, hints=hints)
    if not sv.damaged:
        return None
    spans = list(sv.spans)
    fences = fences_of(
        spans, sv, journal=base, path=str(path), last_seq=last_seq, index=index,
        neighbours=neighbours, found_by=found_by, found_us=found_us, saved=None,
    )  # fmt: skip
    kept = keep_damaged(path, journal_dir / DAMAGED_DIR, f"{path.name}.{found_us}")
    for fence in fences:
        fence.saved = kept
    parts = journal_parts(sv, spans, fences)
    return _rewritten(path, source, base, parts, fences, instance, seam, block_bytes)


def fill_journal(
    *,
    path: Path,
    source: JournalSource,
    base: int,
    fence: Fence,
    records: list[Record],
    released: int,
    highest_before: dict[int, int],
    instance: str,
    seam: FileSeam,
    block_bytes: int,
    kept: int = 0,
) -> Mended:
    """Write ``records`` in place of ``fence``'s placeholders (module docstring).

    Args:
        path, source, base: the journal holding the fence, its reader, its base.
        fence: the fence.
        records: what goes in its first seqs, in order (their own seqs and flags are not
            used: each takes its slot's seq; the late flag is decided here).
        released: how many placeholders stay after them, released (their records reached
            the log elsewhere meanwhile).
        kept: how many placeholders stay after them still fenced: a fence of the
            remaining seqs, with the fence's description (a repair that found only part
            of an inexact fence's records; the rest may come later). Not with ``released``.
        highest_before: per publisher, its highest sequence in the journals before this
            one (records not late).
        instance, seam, block_bytes: as for :func:`fence_journal`.

    Raises:
        ValueError: the records and released placeholders do not fill the fence, or the
            journal does not hold the fence's placeholders.
    """
    if len(records) + released + kept != fence.records or (released and kept):
        raise ValueError(
            f"{len(records)} records, {released} released and {kept} kept placeholders for "
            f"a fence of {fence.records} seqs"
        )
    sv = salvage(source, base)
    if sv.damaged:
        raise ValueError(f"{path} is damaged: it is fenced first")
    rows = [(p.first_seq + i, row) for p in sv.pieces for i, row in enumerate(p.rows)]
    at = {seq: row for seq, row in rows}
    first, last = at.get(fence.first_seq), at.get(fence.last_seq)
    if first is None or last is None:
        raise ValueError(f"{path} does not hold seqs {fence.first_seq}..{fence.last_seq}")
    highest = dict(highest_before)
    for seq, (_off, _len, _ts, key, ps) in rows:
        if seq >= fence.first_seq:
            break
        if ps > highest.get(key, 0):
            highest[key] = ps
    parts: list[Part] = [(0, first[0])]
    seq = fence.first_seq
    for rec in records:
        flags = 0
        if rec.pub_hash and rec.pub_seq <= highest.get(rec.pub_hash, 0):
            flags = FLAG_LATE
        elif rec.pub_hash:
            highest[rec.pub_hash] = rec.pub_seq
        data = encode(
            seq, rec.timestamp_us, rec.pub_hash, rec.pub_seq, rec.topic, rec.message_type,
            rec.kind, rec.path, flags, rec.body, rec.corr_id, rec.sow_key,
        )  # fmt: skip
        parts.append(data)
        seq += 1
    remaining: list[Fence] = []
    if released or kept:
        rest = Fence(
            seq, fence.last_seq, fence.journal, fence.reason, fence.found_by, fence.found_us,
            fence.path, fence.offset, fence.saved, fence.identities, fence.exact, fence.window,
        )  # fmt: skip
        parts.extend(placeholders(rest, fence.window[0], released=bool(released)))
        if kept:
            remaining.append(rest)
    parts.append((last[0] + last[1], sv.end))
    return _rewritten(path, source, base, parts, remaining, instance, seam, block_bytes)


def _rewritten(
    path: Path,
    source: JournalSource,
    base: int,
    parts: list[Part],
    fences: list[Fence],
    instance: str,
    seam: FileSeam,
    block_bytes: int,
) -> Mended:
    """``path`` written anew from ``parts`` (server/txlog/recovery/rewrite.py), with its new reader
    and sealed index."""
    new = rewrite_journal(
        directory=path.parent, instance=instance, base=base, parts=parts, source=source,
        replaces=path, seam=seam, block_bytes=block_bytes,
    )  # fmt: skip
    fresh = SealedIndex.load(new.parent / index_name(instance, base), base)
    if fresh is None:
        raise OSError(f"{new}: its index was written but does not load")
    return Mended(new, open_source(new, None), fresh, fences, new.stat().st_size)
