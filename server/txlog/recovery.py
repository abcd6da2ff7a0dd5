"""Recovery: find the journals of an instance, check them, cut damage, rebuild indexes.

Run at every open (in a worker thread) and, read-only, by ``spool journal verify`` and
``spool journal find``. The rules, after Kafka's ``LogSegment.recover`` and nats-server's
``rebuildStateFromBufLocked``:

1. **Prefix rule.** Only ``NAME.*`` files of this instance (see :mod:`.files`) are looked
   at, in the journal and archive directories.
2. **Duplicates** from an interrupted archive or compress (the same base twice) keep the
   most advanced copy (archived > compressed > plain); the other is deleted.
3. **Checks.** Journals are taken in base order. A finished journal with a valid sealed
   index is trusted (it was fully checked when sealed); the last plain journal - the one
   that was being written - is always checked, at disk speed when its index covers it
   (one CRC per ~4 KB block) and record by record after the last indexed block. A journal
   without a valid index is scanned record by record and its index rebuilt.
4. **The first damage ends the log.** A torn record, a CRC mismatch, a record out of
   sequence, or non-zero bytes after the end-of-data marker: everything from there on is
   cut - the rest of that journal and every later journal. Nothing is destroyed: cut bytes
   and later journals are moved to ``JournalDirectory/damaged/``. Each cut is reported
   (file, offset, bytes, reason, first seq lost).
5. **A hole** (a journal missing between two intact ones) is not damage recovery can
   repair without losing good data: opening fails with :class:`JournalSequenceGap`.
6. **Publishers**: the ``clients.ack`` table, trimmed to the recovered log, completed
   from the index summaries of the journals it does not cover.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import google_crc32c

from server.txlog.clients import parse_clients_ack
from server.txlog.codec import HEADER, HEADER_SIZE, MIN_RECORD, record_size, scan
from server.txlog.errors import CorruptRecord, JournalSequenceGap
from server.txlog.files import (
    DAMAGED_DIR,
    Compression,
    FileSeam,
    JournalHandle,
    clients_ack_name,
    fsync_dir,
    index_name,
    journal_name,
    parse_name,
    write_atomic,
)
from server.txlog.index import (
    BLOCK_BYTES,
    IndexBuilder,
    SealedIndex,
    parse_open_index,
)
from server.txlog.reader import JournalSource, PlainSource, open_source

__all__ = [
    "RecoveredJournal",
    "Recovery",
    "RecoveryReport",
    "Truncation",
    "recover",
]

log = logging.getLogger("spool.txlog")

SCAN_CHUNK: Final = 8 << 20
VERIFY_CHUNK: Final = 8 << 20


@dataclass(frozen=True, slots=True)
class Truncation:
    """One cut made (or, read-only, that would be made) by recovery.

    Attributes:
        path: the journal cut.
        offset: where the cut starts in it (0: the whole journal).
        bytes_cut: bytes removed from the log (up to the last non-zero byte).
        reason: why (``crc mismatch``, ``torn record``, ``follows damaged journal``...).
        first_seq_cut: the seq the first lost record had (or would have had).
        saved_to: where the cut bytes were kept, when they were.
    """

    path: str
    offset: int
    bytes_cut: int
    reason: str
    first_seq_cut: int
    saved_to: str | None = None


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    """What recovery found and did.

    Attributes:
        instance: the instance name (file prefix).
        files_scanned: journals examined.
        records_recovered: records in the log after recovery.
        first_seq: oldest seq available (``last_seq + 1`` when empty).
        last_seq: newest seq (0 when the log is empty).
        bytes_verified: journal bytes whose CRCs were checked.
        bytes_truncated: total bytes cut.
        truncations: every cut.
        indexes_rebuilt: journals whose index was rebuilt from their records.
        index_problems: why indexes could not be used (``verify`` reports these).
        clients_ack: ``used``, ``partial`` (stale or behind), ``rebuilt`` (missing/bad).
        publishers: publishers known after recovery.
        duplicates_removed: copies of the same journal left by an interrupted operation.
        duration_s: wall time of recovery.
    """

    instance: str
    files_scanned: int
    records_recovered: int
    first_seq: int
    last_seq: int
    bytes_verified: int
    bytes_truncated: int
    truncations: tuple[Truncation, ...]
    indexes_rebuilt: tuple[str, ...]
    index_problems: tuple[str, ...]
    clients_ack: str
    publishers: int
    duplicates_removed: tuple[str, ...]
    duration_s: float

    @property
    def clean(self) -> bool:
        """Nothing was cut."""
        return not self.truncations

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready dict (for the event log and ``--json``)."""
        return {
            "instance": self.instance,
            "files_scanned": self.files_scanned,
            "records_recovered": self.records_recovered,
            "first_seq": self.first_seq,
            "last_seq": self.last_seq,
            "bytes_verified": self.bytes_verified,
            "bytes_truncated": self.bytes_truncated,
            "truncations": [
                {
                    "path": t.path,
                    "offset": t.offset,
                    "bytes_cut": t.bytes_cut,
                    "reason": t.reason,
                    "first_seq_cut": t.first_seq_cut,
                    "saved_to": t.saved_to,
                }
                for t in self.truncations
            ],
            "indexes_rebuilt": list(self.indexes_rebuilt),
            "index_problems": list(self.index_problems),
            "clients_ack": self.clients_ack,
            "publishers": self.publishers,
            "duplicates_removed": list(self.duplicates_removed),
            "duration_s": round(self.duration_s, 6),
        }


@dataclass(slots=True)
class RecoveredJournal:
    """A journal of the recovered log, ready for the log to serve.

    Attributes:
        base: its first seq (also its id).
        path: where it is.
        compression: ``zstd``/``gzip`` or None.
        archived: it lives in the archive directory.
        index: its index (a builder for the active journal or in read-only mode).
        source: an open reader of its bytes.
        active: it is the journal appends continue in.
        size: bytes on disk.
    """

    base: int
    path: Path
    compression: Compression | None
    archived: bool
    index: IndexBuilder | SealedIndex
    source: JournalSource
    active: bool
    size: int


@dataclass(slots=True)
class Recovery:
    """The recovered log: its journals, publishers and preallocated files."""

    report: RecoveryReport
    journals: list[RecoveredJournal]
    publishers: dict[int, tuple[int, int]]
    preallocated: list[Path]
    next_prealloc_number: int


@dataclass(slots=True)
class _Candidate:
    base: int
    path: Path
    compression: Compression | None
    archived: bool
    index_path: Path | None = None

    @property
    def rank(self) -> int:
        return 2 if self.archived else 1 if self.compression else 0


@dataclass(slots=True)
class _Examined:
    cand: _Candidate
    source: JournalSource
    index: IndexBuilder | SealedIndex
    end: int  # end of valid data
    size: int  # raw size
    reason: str | None  # damage reason (None: clean)
    garbage_end: int  # end of the last non-zero byte at or after `end`
    rebuilt: bool
    verified: int
    problems: list[str] = field(default_factory=list)
    index_intact: bool = False  # its open-form index file is right as it is

    @property
    def damaged(self) -> bool:
        return self.reason is not None or self.garbage_end > self.end


def recover(
    journal_dir: Path,
    archive_dir: Path | None,
    instance: str,
    *,
    apply: bool,
    trust_indexes: bool = True,
    journal_size: int = 0,
    seam: FileSeam | None = None,
    block_bytes: int = BLOCK_BYTES,
) -> Recovery:
    """Recover (``apply``) or just examine (read-only) an instance's log.

    Args:
        journal_dir: TransactionLog/JournalDirectory.
        archive_dir: TransactionLog/JournalArchiveDirectory (None: none to look at).
        instance: the instance name (file prefix).
        apply: cut damage, write rebuilt indexes, delete duplicates. Without it nothing
            on disk changes (``spool journal verify`` / ``find`` on a live broker).
        trust_indexes: use valid sealed indexes instead of scanning finished journals
            (``verify`` passes False to check every record).
        journal_size: size the active journal is preallocated to (apply only).
        seam: the file seam for journal writes (apply only).
        block_bytes: index block size for rebuilt indexes.

    Raises:
        JournalSequenceGap: a journal is missing between two intact ones.
    """
    started = time.perf_counter()
    cands, index_paths, preallocs, max_prealloc, dupes, stale = _discover(
        journal_dir, archive_dir, instance
    )
    if apply:
        for path in dupes + stale:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
    bases = sorted(cands)
    last = cands[bases[-1]] if bases else None
    last_plain = (
        last.base if last is not None and not last.compression and not last.archived else None
    )
    examined: list[_Examined] = []
    truncations: list[Truncation] = []
    problems: list[str] = []
    cut_from = len(bases)  # journals from this position on follow the damage
    for pos, base in enumerate(bases):
        cand = cands[base]
        cand.index_path = index_paths.get(base)
        if examined and base != examined[-1].index.last_seq + 1:
            for ex in examined:
                ex.source.retire()
            raise JournalSequenceGap(examined[-1].index.last_seq + 1, base, str(cand.path))
        ex = _examine(cand, active=base == last_plain, trust=trust_indexes, block_bytes=block_bytes)
        problems.extend(ex.problems)
        examined.append(ex)
        if ex.damaged:
            cut_from = pos + 1
            break
    damaged_dir = journal_dir / DAMAGED_DIR
    if examined and examined[-1].damaged:
        ex = examined[-1]
        saved = None
        cut = ex.garbage_end - ex.end if ex.cand.compression is None else ex.size - ex.end
        first_lost = ex.index.last_seq + 1
        if apply:
            saved = _cut_journal(ex, journal_dir, damaged_dir, instance, seam, journal_size)
        reason = ex.reason or "data after end of data"
        truncations.append(Truncation(str(ex.cand.path), ex.end, cut, reason, first_lost, saved))
    for base in bases[cut_from:]:
        cand = cands[base]
        size = _disk_size(cand.path)
        saved = None
        if apply:
            damaged_dir.mkdir(exist_ok=True)
            dest = damaged_dir / cand.path.name
            shutil.move(cand.path, dest)
            saved = str(dest)
            _unlink(index_paths.get(base))
        truncations.append(
            Truncation(str(cand.path), 0, size, "follows damaged journal", cand.base, saved)
        )
    for t in truncations:
        log.warning(
            "journal recovery cut %d bytes of %s at offset %d (%s); first seq lost %d%s",
            t.bytes_cut, t.path, t.offset, t.reason, t.first_seq_cut,
            f"; kept in {t.saved_to}" if t.saved_to else "",
        )  # fmt: skip
    journals: list[RecoveredJournal] = []
    rebuilt: list[str] = []
    for i, ex in enumerate(examined):
        cand = ex.cand
        plain_here = not cand.compression and not cand.archived
        # the last plain journal takes the appends, unless it was finished (sealed)
        is_active = i == len(examined) - 1 and plain_here and isinstance(ex.index, IndexBuilder)
        index: IndexBuilder | SealedIndex = ex.index
        if ex.rebuilt:
            rebuilt.append(str(cand.path))
        if apply:
            ipath = cand.path.parent / index_name(instance, cand.base)
            if not is_active and cand.compression is None and ex.size > ex.end:
                _truncate(cand.path, ex.end, seam)
            # indexes are caches: one that cannot be written (a full disk) is rebuilt at
            # the next open, and the log works from the one in memory meanwhile
            try:
                if is_active:
                    assert isinstance(index, IndexBuilder)
                    if not ex.index_intact or ex.damaged:
                        write_atomic(ipath, index.open_form(), durable=False)
                elif isinstance(index, IndexBuilder):
                    write_atomic(ipath, index.seal())
                    sealed = SealedIndex.load(ipath, cand.base)
                    if sealed is not None:
                        index = sealed
            except OSError as exc:
                log.warning("index %s not written: %s", ipath, exc)
                problems.append(f"{ipath}: not written: {exc}")
        journals.append(
            RecoveredJournal(
                cand.base,
                cand.path,
                cand.compression,
                cand.archived,
                index,
                ex.source,
                is_active,
                _disk_size(cand.path),
            )
        )
    publishers, ack_state = _publishers(journal_dir, instance, journals)
    if apply and (stale or dupes or truncations):
        for d in {journal_dir, archive_dir or journal_dir}:
            if d.is_dir():
                fsync_dir(d)
    last_seq = journals[-1].index.last_seq if journals else 0
    first_seq = journals[0].base if journals else last_seq + 1
    report = RecoveryReport(
        instance=instance,
        files_scanned=len(examined),
        records_recovered=sum(j.index.count for j in journals),
        first_seq=first_seq,
        last_seq=last_seq,
        bytes_verified=sum(ex.verified for ex in examined),
        bytes_truncated=sum(t.bytes_cut for t in truncations),
        truncations=tuple(truncations),
        indexes_rebuilt=tuple(rebuilt),
        index_problems=tuple(problems),
        clients_ack=ack_state,
        publishers=len(publishers),
        duplicates_removed=tuple(str(p) for p in dupes),
        duration_s=time.perf_counter() - started,
    )
    return Recovery(report, journals, publishers, preallocs, max_prealloc + 1)


def _discover(
    journal_dir: Path, archive_dir: Path | None, instance: str
) -> tuple[dict[int, _Candidate], dict[int, Path], list[Path], int, list[Path], list[Path]]:
    """Journals (one per base), their index files, preallocated files, duplicates, leftovers."""
    cands: dict[int, _Candidate] = {}
    indexes: dict[int, list[Path]] = {}
    preallocs: list[tuple[int, Path]] = []
    dupes: list[Path] = []
    stale: list[Path] = []
    for directory, archived in ((journal_dir, False), (archive_dir, True)):
        if directory is None:
            continue
        try:
            names = sorted(os.listdir(directory))
        except FileNotFoundError:
            continue
        for name in names:
            path = directory / name
            if name.endswith(".tmp"):
                if parse_name(name[:-4], instance) is not None:
                    stale.append(path)  # an interrupted atomic write
                continue
            parsed = parse_name(name, instance)
            if parsed is None:
                continue
            if parsed.kind == "index":
                indexes.setdefault(parsed.base, []).append(path)
            elif parsed.kind == "prealloc" and not archived:
                preallocs.append((parsed.number, path))
            elif parsed.kind == "journal":
                cand = _Candidate(parsed.base, path, parsed.compression, archived)
                old = cands.get(parsed.base)
                if old is None:
                    cands[parsed.base] = cand
                elif cand.rank > old.rank:
                    dupes.append(old.path)
                    cands[parsed.base] = cand
                else:
                    dupes.append(path)
    chosen: dict[int, Path] = {}
    for base, paths in indexes.items():
        owner = cands.get(base)
        for path in paths:
            if owner is not None and path.parent == owner.path.parent:
                chosen[base] = path
            else:
                stale.append(path)  # no journal, or beside a copy that was dropped
    preallocs.sort()
    max_number = preallocs[-1][0] if preallocs else 0
    return cands, chosen, [p for _, p in preallocs], max_number, dupes, stale


def _examine(cand: _Candidate, *, active: bool, trust: bool, block_bytes: int) -> _Examined:
    """Check one journal and produce its index (see the module rules)."""
    source = open_source(cand.path, cand.compression)
    try:
        return _examine_source(cand, source, active=active, trust=trust, block_bytes=block_bytes)
    except BaseException:
        source.retire()
        raise


def _examine_source(
    cand: _Candidate, source: JournalSource, *, active: bool, trust: bool, block_bytes: int
) -> _Examined:
    problems: list[str] = []
    verified = 0
    builder: IndexBuilder | None = None
    intact = False  # an open-form index on disk that needs no rewrite
    if not trust:  # verification: every record, whatever the index says; then the index
        ex = _scan(cand, source, None, 0, [], False, block_bytes)
        ex.problems.extend(_index_problems(cand, ex))
        ex.rebuilt = bool(ex.problems)  # what the next open would have to rebuild
        return ex
    if cand.index_path is not None:
        sealed = SealedIndex.load(cand.index_path, cand.base)
        if sealed is not None and trust and not active and cand.compression is not None:
            # compressed from a verified journal, with zstd/gzip checksums of their own:
            # trusted without decompressing anything at open
            end = sealed.data_len
            return _Examined(cand, source, sealed, end, end, None, end, False, 0)
        size = source.size()
        if sealed is not None:
            fits = sealed.data_len == size or (cand.compression is None and sealed.data_len <= size)
            if not fits:
                problems.append(f"{cand.index_path}: does not match the journal's size")
                sealed.close()
            elif trust and not active:
                garbage = _nonzero_end(source, sealed.data_len, size)
                if garbage == sealed.data_len:
                    return _Examined(
                        cand, source, sealed, sealed.data_len, size, None, garbage, False, 0
                    )
                problems.append(f"{cand.index_path}: journal has bytes after its indexed end")
                sealed.close()
            else:
                blocks = [(b[1], b[2], b[5]) for b in sealed.blocks()]
                bad, verified = _verify_blocks(source, blocks)
                if bad is None:
                    garbage = _nonzero_end(source, sealed.data_len, size)
                    return _Examined(
                        cand, source, sealed, sealed.data_len, size, None, garbage, False, verified
                    )
                problems.append(f"{cand.index_path}: block {bad} does not match the journal")
                sealed.close()
        elif cand.compression is None:
            try:
                data = cand.index_path.read_bytes()
            except OSError as exc:
                data = b""
                problems.append(f"{cand.index_path}: {exc}")
            entries, problem = parse_open_index(data, cand.base)
            if problem is not None and problem != "not an open index":
                problems.append(f"{cand.index_path}: {problem}")
            if problem == "not an open index":
                problems.append(f"{cand.index_path}: invalid sealed index")
            intact = problem is None
            if entries:
                bad, verified = _verify_blocks(
                    source, [(e.offset, e.length, e.data_crc) for e in entries]
                )
                if bad is not None:
                    problems.append(f"{cand.index_path}: block {bad} does not match the journal")
                    entries = entries[:bad]
                    intact = False
            if entries:
                builder = IndexBuilder(cand.base, block_bytes)
                builder.restore(entries)
                first = _edge(source, 0)
                last = _edge(source, entries[-1].offset + entries[-1].last_rel)
                if first is None or last is None:
                    builder = None
                    intact = False
                else:
                    builder.set_edges(first, last)
        else:
            problems.append(f"{cand.index_path}: invalid index")
    return _scan(cand, source, builder, verified, problems, intact, block_bytes)


def _scan(
    cand: _Candidate,
    source: JournalSource,
    builder: IndexBuilder | None,
    verified: int,
    problems: list[str],
    intact: bool,
    block_bytes: int,
) -> _Examined:
    """Scan a journal record by record from where ``builder`` (if any) stops."""
    size = source.size()
    rebuilt = builder is None
    if builder is None:
        builder = IndexBuilder(cand.base, block_bytes)
    start = builder.data_len
    end, reason, scanned = _scan_into(builder, source, start, size)
    verified += scanned
    if reason == "end of data":
        reason = None
    damage = getattr(source, "damage", None)
    if reason is None and damage is not None and end == size:
        reason = damage  # a compressed journal whose data stops at an undecodable frame
    garbage = _nonzero_end(source, end, size) if cand.compression is None and end < size else end
    ex = _Examined(cand, source, builder, end, size, reason, garbage, rebuilt, verified, problems)
    ex.index_intact = intact and builder.data_len > 0
    return ex


def _index_problems(cand: _Candidate, ex: _Examined) -> list[str]:
    """Whether the index file of a fully scanned journal agrees with what the scan found."""
    if cand.index_path is None:
        return [f"{cand.path}: no index"]
    sealed = SealedIndex.load(cand.index_path, cand.base)
    if sealed is not None:
        try:
            same = (sealed.count, sealed.data_len) == (ex.index.count, ex.end)
        finally:
            sealed.close()
        return [] if same else [f"{cand.index_path}: does not match the journal"]
    try:
        entries, problem = parse_open_index(cand.index_path.read_bytes(), cand.base)
    except OSError as exc:
        return [f"{cand.index_path}: {exc}"]
    if problem is not None:
        return [f"{cand.index_path}: {problem}"]
    covered = entries[-1].offset + entries[-1].length if entries else 0
    return [] if covered <= ex.end else [f"{cand.index_path}: indexes past the journal's data"]


def _edge(source: JournalSource, offset: int) -> tuple[int, int, int] | None:
    """``(timestamp_us, pub_hash, pub_seq)`` of the record header at ``offset``."""
    head = source.read(offset, HEADER_SIZE)
    if len(head) < HEADER_SIZE:
        return None
    h = HEADER.unpack(head)
    return h[5], h[6], h[7]


def _scan_into(
    builder: IndexBuilder, source: JournalSource, start: int, size: int
) -> tuple[int, str | None, int]:
    """Scan records from ``start`` into ``builder``.

    Returns:
        ``(end of valid data, reason it stopped or None at the end of the file, bytes)``.
    """
    pos = start
    seq = builder.last_seq + 1
    chunk = SCAN_CHUNK
    scanned = 0
    while pos < size:
        try:
            buf = source.read(pos, min(chunk, size - pos))
        except CorruptRecord as exc:  # a compressed chunk that does not decompress
            return pos, exc.reason, scanned
        if not buf:
            return pos, "torn record", scanned
        final = pos + len(buf) >= size
        res = scan(buf, 0, len(buf), seq, final=final, base=pos)
        builder.add_scanned(buf, pos, res)
        scanned += res.end
        pos += res.end
        seq = res.next_seq
        if res.need_more:
            need = record_size(buf, res.end)
            chunk = max(SCAN_CHUNK, need) if need >= MIN_RECORD else SCAN_CHUNK
            continue
        chunk = SCAN_CHUNK
        if res.reason is not None:
            return pos, res.reason, scanned
    return pos, None, scanned


def _verify_blocks(
    source: JournalSource, blocks: list[tuple[int, int, int]]
) -> tuple[int | None, int]:
    """Check ``(offset, length, crc)`` blocks in large reads.

    Returns:
        ``(index of the first bad block or None, bytes checked)``.
    """
    crc = google_crc32c.value
    checked = 0
    i = 0
    n = len(blocks)
    while i < n:
        start = blocks[i][0]
        j = i
        stop = start
        while j < n and (stop - start < VERIFY_CHUNK or j == i):
            stop = blocks[j][0] + blocks[j][1]
            j += 1
        try:
            buf = source.read(start, stop - start)
        except CorruptRecord:
            return i, checked
        for k in range(i, j):
            off, length, want = blocks[k]
            a = off - start
            if a + length > len(buf) or crc(buf[a : a + length]) != want:
                return k, checked
            checked += length
        i = j
    return None, checked


def _nonzero_end(source: JournalSource, start: int, size: int) -> int:
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


def _cut_journal(
    ex: _Examined,
    journal_dir: Path,
    damaged_dir: Path,
    instance: str,
    seam: FileSeam | None,
    journal_size: int,
) -> str | None:
    """Cut the damaged tail of ``ex``: keep the bytes in ``damaged/``, shorten the journal.

    A compressed or archived journal cannot be shortened in place: its valid prefix is
    written as a plain journal in the journal directory and the original moved aside.
    """
    damaged_dir.mkdir(exist_ok=True)
    cand = ex.cand
    saved: Path
    if cand.compression is None and not cand.archived:
        saved = damaged_dir / f"{cand.path.name}.{ex.end:020d}.cut"
        _copy_range(ex.source, ex.end, ex.garbage_end, saved)
        handle = _seam(seam).open(cand.path, create=False)
        try:
            handle.truncate(ex.end)
            _allocate(handle, journal_size)
            handle.fsync()
        finally:
            handle.close()
        fsync_dir(damaged_dir)
        return str(saved)
    plain = journal_dir / journal_name(instance, cand.base)
    handle = _seam(seam).open(plain, create=True)
    try:
        pos = 0
        while pos < ex.end:
            buf = ex.source.read(pos, min(SCAN_CHUNK, ex.end - pos))
            handle.write(pos, buf)
            pos += len(buf)
        _allocate(handle, journal_size)
        handle.fsync()
    finally:
        handle.close()
    saved = damaged_dir / cand.path.name
    ex.source.retire()
    shutil.move(cand.path, saved)
    _unlink(cand.index_path)
    ex.source = open_source(plain, None)
    ex.cand = _Candidate(cand.base, plain, None, False, None)
    fsync_dir(journal_dir)
    return str(saved)


def _allocate(handle: JournalHandle, journal_size: int) -> None:
    """Allocate a journal to ``JournalSize`` when there is room; without it the writes
    extend the file (preallocation is an optimisation, see space.py)."""
    if journal_size:
        try:
            handle.allocate(journal_size)
        except OSError as exc:
            log.warning("journal not preallocated (%s); writes will extend it", exc)


def _copy_range(source: JournalSource, start: int, stop: int, dest: Path) -> None:
    with open(dest, "wb") as out:
        pos = start
        while pos < stop:
            buf = source.read(pos, min(SCAN_CHUNK, stop - pos))
            if not buf:
                break
            out.write(buf)
            pos += len(buf)
        out.flush()
        os.fdatasync(out.fileno())


def _truncate(path: Path, size: int, seam: FileSeam | None) -> None:
    """Trim a finished journal left longer than its data (a crash between roll steps)."""
    handle = _seam(seam).open(path, create=False)
    try:
        handle.truncate(size)
        handle.fsync()
    finally:
        handle.close()


def _seam(seam: FileSeam | None) -> FileSeam:
    if seam is None:
        from server.txlog.files import OsFileSeam

        return OsFileSeam()
    return seam


def _unlink(path: Path | None) -> None:
    if path is not None:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _disk_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _publishers(
    journal_dir: Path, instance: str, journals: list[RecoveredJournal]
) -> tuple[dict[int, tuple[int, int]], str]:
    """The publisher table: clients.ack trimmed to the log, completed from index summaries."""
    last_seq = journals[-1].index.last_seq if journals else 0
    table: dict[int, tuple[int, int]] = {}
    try:
        parsed = parse_clients_ack((journal_dir / clients_ack_name(instance)).read_bytes())
    except OSError:
        parsed = None
    if parsed is None:
        state = "rebuilt"
        covered = 0
        todo = journals
    else:
        covered, saved = parsed
        table = {h: v for h, v in saved.items() if v[1] <= last_seq}
        if covered > last_seq:
            state = "partial"
            todo = journals
        else:
            todo = [j for j in journals if j.index.last_seq > covered]
            state = "used" if not todo else "partial"
    for j in todo:
        for p in j.index.publishers():
            cur = table.get(p.pub_hash)
            if cur is None or p.last_seq > cur[1]:
                table[p.pub_hash] = (p.max_pub_seq, p.last_seq)
    return table, state
