"""Changes to a finished journal of a running log: fencing its damage.

Recovery fences what it finds at open (server/txlog/recovery.py); while the log runs, the
scrub or a read can find damage in a finished journal too. :func:`fence_journal` does the
same work on it, in a worker thread: the journal is read past its damage, its lost spans
become fences (server/txlog/fencing.py), its intact bytes and the fences' placeholders are
written as a new journal that replaces it (server/txlog/rewrite.py; the old one is kept in
``damaged/``), and the new file's reader and sealed index are handed back for the log to
swap in on the loop.

The journal being written is not changed here: damage in it is fenced by the next open.

Blocking I/O: call from a worker thread. The log holds its retention lock meanwhile, so
the journal is not archived, compressed or removed under it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from server.txlog.fences import Fence
from server.txlog.fencing import Neighbours, fences_of, journal_parts
from server.txlog.files import DAMAGED_DIR, FileSeam, index_name
from server.txlog.reader import JournalSource, open_source
from server.txlog.rewrite import keep_damaged, rewrite_journal
from server.txlog.salvage import BlockHint, salvage
from server.txlog.sealedindex import SealedIndex

__all__ = ["Mended", "fence_journal"]


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
    new = rewrite_journal(
        directory=path.parent, instance=instance, base=base, parts=parts, source=source,
        replaces=path, seam=seam, block_bytes=block_bytes,
    )  # fmt: skip
    fresh = SealedIndex.load(new.parent / index_name(instance, base), base)
    if fresh is None:
        raise OSError(f"{new}: its index was written but does not load")
    return Mended(new, open_source(new, None), fresh, fences, new.stat().st_size)
