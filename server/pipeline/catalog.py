"""The journals of one instance, as a reader that must not touch them finds them.

A :class:`Catalog` lists an instance's journal files in the journal and archive
directories (plain and compressed; the prefix rule and file names of
:mod:`spool.server.txlog.storage.files`), and gives each one the index blocks a reader plans with:
``(first seq, offset, length, records, running max time, CRC)`` per ~4 KB block, from the
journal's sealed index, or its open index plus a scan of the tail the open index does not
cover yet (the active journal of a running broker). A journal whose index is missing or
unusable is scanned too when it is small; a larger one is left *unindexed*: readers then
decode it whole, with every record checked.

Nothing here writes: indexes are read, never rebuilt on disk, and duplicates left by an
interrupted archive or compress are resolved the way recovery resolves them (archived >
compressed > plain) without deleting anything, so a catalog is safe on a live instance's
directories. Lookups of a bookmark or a time reuse :mod:`spool.server.txlog.storage.search`.

Everything blocks (file reads): the Spark driver and executors call it, never an event
loop.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from spool.server.pipeline.errors import (
    AmbiguousInstance,
    JournalDirectoryNotFound,
    NoJournals,
    UnreadableJournal,
)
from spool.server.txlog.errors import CorruptRecord
from spool.server.txlog.format.codec import scan
from spool.server.txlog.format.record import DUE_KEY, late_key
from spool.server.txlog.index.builder import IndexBuilder
from spool.server.txlog.index.fileformat import parse_open_index
from spool.server.txlog.index.sealed import SealedIndex
from spool.server.txlog.storage.files import Compression, index_name, parse_name
from spool.server.txlog.storage.journal import Journal
from spool.server.txlog.storage.search import SpanQuery, plan_bookmark, plan_time, search_span
from spool.server.txlog.storage.source import JournalSource, RecordWindows, open_source

__all__ = ["TAIL_SCAN_LIMIT", "Block", "Catalog", "JournalFile"]

#: the most bytes of a journal the catalog checks and indexes itself (the unindexed tail of
#: the active journal is a few KB; a whole journal without index larger than this is left
#: to the readers, which decode it in one partition)
TAIL_SCAN_LIMIT: Final = 16 << 20
_SCAN_CHUNK: Final = 1 << 20


@dataclass(frozen=True, slots=True)
class Block:
    """One index block of a journal: whole records, checked by one CRC.

    Attributes:
        first_seq: seq of its first record.
        offset: journal offset (raw bytes, also for compressed journals).
        length: bytes.
        count: records.
        ts_max: running maximum of the records' times at the block's end (this journal).
        crc: CRC-32C of its bytes.
    """

    first_seq: int
    offset: int
    length: int
    count: int
    ts_max: int
    crc: int

    @property
    def end(self) -> int:
        return self.offset + self.length

    @property
    def last_seq(self) -> int:
        return self.first_seq + self.count - 1


@dataclass(slots=True)
class JournalFile:
    """One journal file and what its index says.

    Attributes:
        base: seq of its first record (the journal id).
        path: where it is now.
        compression: ``zstd``, ``gzip`` or None.
        archived: it lives in the archive directory.
        blocks: index blocks covering ``[0, indexed_end)``.
        indexed_end: where the indexed bytes end.
        complete: the blocks reach the end of the journal's data (its last seq is known).
        index: the index (sealed, or a builder over the open index and the scanned tail),
            for lookups; None when the journal has no usable index.
        note: why the journal is not (completely) indexed, or damage seen while scanning.
        damage: ``(offset, reason)`` of damage found while scanning the tail.
    """

    base: int
    path: Path
    compression: Compression | None
    archived: bool
    blocks: list[Block] = field(default_factory=list)
    indexed_end: int = 0
    complete: bool = False
    index: SealedIndex | IndexBuilder | None = None
    note: str | None = None
    damage: tuple[int, str] | None = None

    @property
    def last_seq(self) -> int | None:
        """Seq of the last record when the blocks cover the whole journal."""
        if not self.complete:
            return None
        return self.blocks[-1].last_seq if self.blocks else self.base - 1

    @property
    def next_seq(self) -> int:
        """The seq of the first record after the indexed blocks."""
        return self.blocks[-1].last_seq + 1 if self.blocks else self.base

    def blocks_of_publisher(self, pub_hash: int) -> list[int]:
        """Block numbers that may hold records of ``pub_hash`` (all of them without an
        index), ascending: its own ranges, those of its late records (under its late key)
        and those of due records, which the index files under ``DUE_KEY`` whoever
        published them (a reader keeps this publisher's by the records' headers)."""
        if self.index is None:
            return list(range(len(self.blocks)))
        own = self.index.publisher_blocks(pub_hash)
        others = [
            *self.index.publisher_blocks(late_key(pub_hash)),
            *self.index.publisher_blocks(DUE_KEY),
        ]
        return sorted({*own, *others}) if others else own


class Catalog:
    """The journals of one instance, in log order.

    Use :meth:`open`; :meth:`close` releases the mapped sealed indexes.

    Attributes:
        instance: the instance name (file prefix).
        journal_dir: the JournalDirectory.
        archive_dir: the JournalArchiveDirectory, if given.
        journals: by base, ascending.
    """

    def __init__(
        self,
        instance: str,
        journal_dir: Path,
        archive_dir: Path | None,
        journals: list[JournalFile],
    ) -> None:
        self.instance = instance
        self.journal_dir = journal_dir
        self.archive_dir = archive_dir
        self.journals = journals

    @classmethod
    def open(
        cls,
        journal_dir: Path,
        archive_dir: Path | None = None,
        name: str | None = None,
        *,
        scan_limit: int = TAIL_SCAN_LIMIT,
    ) -> Catalog:
        """Find and index an instance's journals.

        Args:
            journal_dir: the JournalDirectory.
            archive_dir: the JournalArchiveDirectory (None: none).
            name: the instance; None takes the only one found.
            scan_limit: most bytes per journal checked here when its index does not
                cover them.

        Raises:
            JournalDirectoryNotFound: a directory does not exist.
            NoJournals: no journal file (of that instance).
            AmbiguousInstance: several instances and no ``name``.
            UnreadableJournal: a file cannot be read.
        """
        dirs: list[tuple[Path, bool]] = [(journal_dir, False)]
        if archive_dir is not None:
            dirs.append((archive_dir, True))
        names: dict[Path, list[str]] = {}
        for directory, archived in dirs:
            what = "journal archive directory" if archived else "journal directory"
            if not directory.is_dir():
                raise JournalDirectoryNotFound(str(directory), what)
            try:
                names[directory] = os.listdir(directory)
            except OSError as exc:
                raise UnreadableJournal(str(directory), exc) from exc
        where = " and ".join(str(d) for d, _ in dirs)
        instance = name if name is not None else _only_instance(names, where)
        found: dict[int, JournalFile] = {}
        for directory, archived in dirs:
            for filename in names[directory]:
                parsed = parse_name(filename, instance)
                if parsed is None or parsed.kind != "journal":
                    continue
                cand = JournalFile(parsed.base, directory / filename, parsed.compression, archived)
                old = found.get(parsed.base)
                if old is None or _rank(cand) > _rank(old):
                    found[parsed.base] = cand
        if not found:
            raise NoJournals(where, instance)
        journals = [found[b] for b in sorted(found)]
        for j in journals:
            _index(instance, j, scan_limit)
        return cls(instance, journal_dir, archive_dir, journals)

    def close(self) -> None:
        """Release the sealed indexes' mappings."""
        for j in self.journals:
            if isinstance(j.index, SealedIndex):
                j.index.close()
            j.index = None

    def __enter__(self) -> Catalog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[JournalFile]:
        return iter(self.journals)

    @property
    def first_seq(self) -> int:
        """Seq of the oldest record the directories hold."""
        return self.journals[0].base

    def last_seq(self) -> int | None:
        """Seq of the newest record, when the last journal is completely indexed."""
        return self.journals[-1].last_seq

    def seq_range(self, j: JournalFile) -> tuple[int, int | None]:
        """``(first, last)`` seqs of journal ``j``; the last from the next journal's base
        when ``j`` is not completely indexed (None for the last journal then)."""
        last = j.last_seq
        if last is None:
            later = [k.base for k in self.journals if k.base > j.base]
            if later:
                last = later[0] - 1
        return j.base, last

    # -- lookups --------------------------------------------------------------------------

    def _lookup_journals(self) -> list[Journal]:
        out = []
        for j in self.journals:
            if j.index is not None:
                out.append(
                    Journal(j.base, j.path, j.index, compression=j.compression, archived=j.archived)
                )
        return out

    def seq_for_bookmark(self, pub_hash: int, pub_seq: int) -> int | None:
        """Seq of the record with bookmark ``(pub_hash, pub_seq)``; None if not indexed here.

        Raises:
            UnreadableJournal: the block holding it cannot be read or is damaged.
        """
        plan = plan_bookmark(self._lookup_journals(), pub_hash, pub_seq)
        return None if plan is None else self._resolve(plan)

    def seq_for_time(self, timestamp_us: int) -> int:
        """First seq (in log order) whose time is at or after ``timestamp_us``.

        Returns ``last + 1`` when no record is that recent (as the broker's lookup does).

        Raises:
            UnreadableJournal: the block holding it cannot be read or is damaged.
        """
        plan = plan_time(self._lookup_journals(), timestamp_us)
        if plan is None:
            tail = self.journals[-1]
            return tail.next_seq
        found = self._resolve(plan)
        assert found is not None  # the block's running maximum reaches the time
        return found

    def _resolve(self, plan: SpanQuery) -> int | None:
        journal = plan.journal
        span = plan.span
        try:
            source = open_source(journal.path, journal.compression)
        except OSError as exc:
            raise UnreadableJournal(str(journal.path), exc) from exc
        try:
            buf = source.read(span.offset, span.length)
            match, _ = search_span(plan, buf, span.seq + span.count)
        except (OSError, CorruptRecord) as exc:
            raise UnreadableJournal(str(journal.path), exc) from exc
        finally:
            source.retire()
        return None if match is None else match.seq


def _rank(j: JournalFile) -> int:
    """Which copy of a journal is the most advanced (archived > compressed > plain)."""
    return 2 if j.archived else 1 if j.compression else 0


def _only_instance(names: dict[Path, list[str]], where: str) -> str:
    instances = {
        p.instance
        for listing in names.values()
        for filename in listing
        if (p := parse_name(filename)) is not None and p.kind == "journal"
    }
    if not instances:
        raise NoJournals(where, None)
    if len(instances) > 1:
        raise AmbiguousInstance(where, sorted(instances))
    return instances.pop()


def _index(instance: str, j: JournalFile, scan_limit: int) -> None:
    """Fill ``j``'s blocks from its index file, then scan what the index does not cover."""
    ipath = j.path.parent / index_name(instance, j.base)
    sealed = SealedIndex.load(ipath, j.base) if ipath.exists() else None
    if sealed is not None:
        j.index = sealed
        j.blocks = [Block(f, o, ln, c, ts, crc) for f, o, ln, c, ts, crc, _r in sealed.blocks()]
        j.indexed_end = sealed.data_len
        j.complete = True
        return
    builder = IndexBuilder(j.base)
    if ipath.exists():
        try:
            data = ipath.read_bytes()
        except OSError as exc:
            raise UnreadableJournal(str(ipath), exc) from exc
        entries, problem = parse_open_index(data, j.base)
        builder.restore(entries)
        if problem is not None and problem != "not an open index":
            j.note = f"index {ipath.name}: {problem}"
    else:
        j.note = f"no index {ipath.name}"
    try:
        source = open_source(j.path, j.compression)
    except OSError as exc:
        raise UnreadableJournal(str(j.path), exc) from exc
    try:
        _scan_tail(j, builder, source, scan_limit)
    except OSError as exc:
        raise UnreadableJournal(str(j.path), exc) from exc
    except CorruptRecord as exc:  # a compressed chunk that does not decompress
        j.damage = (exc.offset, exc.reason)
        j.complete = False
    finally:
        source.retire()
    builder.close_block(encode=False)
    j.index = builder
    j.blocks = [
        Block(
            builder.b_first[i],
            builder.b_off[i],
            builder.b_len[i],
            builder.b_cnt[i],
            builder.b_ts[i],
            builder.b_crc[i],
        )
        for i in range(len(builder.b_first))
    ]
    j.indexed_end = builder.data_len


def _scan_tail(
    j: JournalFile, builder: IndexBuilder, source: JournalSource, scan_limit: int
) -> None:
    """Check and index records after the indexed blocks, up to ``scan_limit`` bytes (the
    record that crosses the limit is finished)."""
    start = builder.data_len
    seq = builder.base + builder.count
    windows = RecordWindows(source, start, window=max(1, min(_SCAN_CHUNK, scan_limit)))
    while (buf := windows.read()) is not None:
        pos = windows.offset
        res = scan(buf, 0, len(buf), seq, final=False, base=pos)
        builder.add_scanned(buf, pos, res)
        seq = res.next_seq
        if res.damaged:
            assert res.reason is not None
            j.damage = (pos + res.end, res.reason)
            return
        windows.advance(res.end)
        if not windows.ended and windows.offset - start >= scan_limit:
            j.note = (j.note + "; " if j.note else "") + (
                f"bytes after offset {windows.offset} not indexed (more than {scan_limit})"
            )
            return
    if windows.reason in (None, "end of data"):
        j.complete = True
    else:
        j.damage = (windows.offset, str(windows.reason))
