"""One journal file as the log tracks it, and :class:`JournalInfo`, its public view.

A :class:`Journal` is owned by the event loop: the flusher thread only reads the fields it
was handed for one batch, and results come back to the loop to be applied.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from server.txlog.files import Compression
from server.txlog.index import IndexBuilder, SealedIndex
from server.txlog.reader import JournalSource

__all__ = ["Journal", "JournalInfo", "JournalState"]

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
        """A JSON-ready dict."""
        return {
            "id": self.id,
            "path": self.path,
            "state": self.state,
            "size_bytes": self.size_bytes,
            "data_bytes": self.data_bytes,
            "compression": self.compression,
            "records": self.records,
            "first_seq": self.first_seq,
            "last_seq": self.last_seq,
            "first_bookmark": self.first_bookmark,
            "last_bookmark": self.last_bookmark,
            "first_time_us": self.first_time_us,
            "last_time_us": self.last_time_us,
            "pinned_by": self.pinned_by,
        }


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
            first_bookmark=None if empty else f"{fh}|{fp}|",
            last_bookmark=None if empty else f"{lh}|{lp}|",
            first_time_us=None if empty else idx.first_ts,
            last_time_us=None if empty else idx.last_ts,
            pinned_by=pinned_by,
        )

    def __repr__(self) -> str:
        return f"Journal({self.base}, {self.path.name}, records={self.count})"
