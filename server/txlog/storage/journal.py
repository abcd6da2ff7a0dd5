"""One journal file as the log tracks it, the ordered list of them, and :class:`JournalInfo`,
their public view.

A :class:`Journal` and the :class:`JournalList` are owned by the event loop: the flusher
thread only reads the fields it was handed for one batch, and results come back to the loop
to be applied.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from spool.server.bookmarks import format_bookmark
from spool.server.txlog.index.builder import IndexBuilder
from spool.server.txlog.index.sealed import SealedIndex
from spool.server.txlog.storage.files import Compression
from spool.server.txlog.storage.source import JournalSource

__all__ = ["Journal", "JournalInfo", "JournalList", "JournalState"]

JournalState = Literal["active", "closed", "compressed", "archived", "preallocated"]


@dataclass(frozen=True, slots=True)
class JournalInfo:
    """A journal file as ``journals()`` and the admin API list it.

    Attributes:
        id: the journal's base sequence (0 for a preallocated file, which has none yet).
        path: where it is.
        state: ``active`` (being appended to), ``closed`` (finished, plain),
            ``compressed``, ``archived`` (in the archive directory, compressed or not),
            ``preallocated`` (created ahead, empty).
        size_bytes: bytes on disk (an active journal is preallocated to JournalSize).
        data_bytes: bytes of records (raw, before compression).
        compression: ``zstd``, ``gzip`` or None.
        records: number of records.
        first_seq: seq of the first record (``id``).
        last_seq: seq of the last record (``first_seq - 1`` when empty).
        first_bookmark: ``PUBHASH|PUBSEQ|`` of the first record, None when empty.
        last_bookmark: of the last record.
        first_time_us: timestamp of the first record, None when empty.
        last_time_us: timestamp of the last record.
        pinned_by: owner of the oldest pin that still needs this journal, if any.
    """

    id: int
    path: str
    state: JournalState
    size_bytes: int
    data_bytes: int
    compression: Compression | None
    records: int
    first_seq: int
    last_seq: int
    first_bookmark: str | None
    last_bookmark: str | None
    first_time_us: int | None
    last_time_us: int | None
    pinned_by: str | None = None

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready dict: every field, in the order declared."""
        return asdict(self)


class Journal:
    """A journal of the log: its file, index, reader and write state.

    Attributes:
        base: first seq, also the journal id.
        path: current location.
        compression: ``zstd``/``gzip`` or None.
        archived: it lives in the archive directory.
        index: builder while active; sealed once finished and written.
        source: reader of its bytes (None until the flusher created the file).
        disk_size: bytes it occupies on disk (for TransactionLog/MaxSize).
        durable_len: data bytes known durable (what readers may read).
        finished: no more appends (rolled, or recovered as finished).
        prealloc: the preallocated file to rename into ``path`` when it is created.
        created: the file exists on disk.
        rolling: finished but its last group commit (truncate, seal) is still to come.
    """

    __slots__ = (
        "archived",
        "base",
        "compression",
        "created",
        "disk_size",
        "durable_len",
        "finished",
        "index",
        "path",
        "prealloc",
        "rolling",
        "source",
    )

    def __init__(
        self,
        base: int,
        path: Path,
        index: IndexBuilder | SealedIndex,
        *,
        compression: Compression | None = None,
        archived: bool = False,
        source: JournalSource | None = None,
        disk_size: int = 0,
        finished: bool = False,
        prealloc: Path | None = None,
        created: bool = True,
    ) -> None:
        self.base = base
        self.path = path
        self.index = index
        self.compression = compression
        self.archived = archived
        self.source = source
        self.disk_size = disk_size
        self.durable_len = index.data_len if created else 0
        self.finished = finished
        self.prealloc = prealloc
        self.created = created
        self.rolling = False

    @property
    def count(self) -> int:
        return self.index.count

    @property
    def last_seq(self) -> int:
        return self.index.last_seq

    @property
    def sealed(self) -> bool:
        """Finished and its sealed index is in place (safe to archive, compress, remove)."""
        return self.finished and isinstance(self.index, SealedIndex)

    def close(self) -> None:
        """Release its reader and its mapped index (closing, removed, or a failed open)."""
        if self.source is not None:
            self.source.retire()
        if isinstance(self.index, SealedIndex):
            self.index.close()

    def info(self, state: JournalState, pinned_by: str | None) -> JournalInfo:
        """The public view of this journal."""
        idx = self.index
        empty = idx.count == 0
        fh, fp = idx.first_bookmark
        lh, lp = idx.last_bookmark
        return JournalInfo(
            id=self.base,
            path=str(self.path),
            state=state,
            size_bytes=self.disk_size,
            data_bytes=idx.data_len,
            compression=self.compression,
            records=idx.count,
            first_seq=self.base,
            last_seq=idx.last_seq,
            first_bookmark=None if empty else format_bookmark(fh, fp),
            last_bookmark=None if empty else format_bookmark(lh, lp),
            first_time_us=None if empty else idx.first_ts,
            last_time_us=None if empty else idx.last_ts,
            pinned_by=pinned_by,
        )

    def __repr__(self) -> str:
        return f"Journal({self.base}, {self.path.name}, records={self.count})"


class JournalList:
    """The journals of one log, oldest first; the newest is the active one.

    Journals are contiguous: each starts at the seq after the previous one's last. Appends
    go to the newest (:attr:`active`); a roll adds a new newest; retention drops the oldest.
    Event loop only.
    """

    __slots__ = ("_bases", "_items")

    def __init__(self) -> None:
        self._items: list[Journal] = []
        self._bases: list[int] = []  # the items' base seqs, for bisection

    def reset(self, journals: list[Journal]) -> None:
        """Start from what recovery found (at open)."""
        self._items = list(journals)
        self._bases = [j.base for j in journals]

    @property
    def items(self) -> list[Journal]:
        """The journals, oldest first (the list itself: do not modify)."""
        return self._items

    @property
    def active(self) -> Journal:
        """The journal appends go to."""
        return self._items[-1]

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Journal]:
        return iter(self._items)

    def __contains__(self, base: object) -> bool:
        """Whether a journal has this base seq (its id)."""
        i = bisect.bisect_left(self._bases, base) if isinstance(base, int) else len(self._bases)
        return i < len(self._bases) and self._bases[i] == base

    def holding(self, seq: int) -> Journal:
        """The journal whose range holds ``seq`` (the oldest for a seq before the log)."""
        i = bisect.bisect_right(self._bases, seq) - 1
        return self._items[max(i, 0)]

    def after(self, journal: Journal) -> int:
        """Base seq of the journal that follows ``journal``; 0 for the active one."""
        if journal is self.active:
            return 0
        return self._bases[bisect.bisect_right(self._bases, journal.base)]

    def add(self, journal: Journal) -> None:
        """A roll: ``journal`` becomes the active one."""
        self._items.append(journal)
        self._bases.append(journal.base)

    def drop_oldest(self, n: int) -> None:
        """Forget the ``n`` oldest journals (removed from disk by the caller)."""
        del self._items[:n]
        del self._bases[:n]
