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

:func:`recover` runs these steps in order over parts that each do one of them:
:mod:`.discovery` (1, 2: what is on disk), :mod:`.checking` (3: one journal, read-only),
:mod:`.repair` (4: every change to the disk, only with ``apply``), :mod:`.clients` (6) and
:mod:`.recoveryreport` (what is reported).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

from server.txlog.checking import Examined, examine
from server.txlog.clients import rebuild_publishers
from server.txlog.discovery import Candidate, discover
from server.txlog.errors import JournalSequenceGap
from server.txlog.files import Compression, FileSeam, OsFileSeam, clients_ack_name
from server.txlog.index import BLOCK_BYTES
from server.txlog.indexbuilder import IndexBuilder
from server.txlog.reader import JournalSource
from server.txlog.recoveryreport import RecoveryReport, Truncation
from server.txlog.repair import (
    cut_journal,
    finish_journal,
    move_aside,
    remove_files,
    sync_directories,
)
from server.txlog.sealedindex import SealedIndex

__all__ = ["RecoveredJournal", "Recovery", "recover"]

log = logging.getLogger("spool.txlog")


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

    def close(self) -> None:
        """Release every journal's reader and mapped index (when no log takes them over)."""
        for j in self.journals:
            j.source.retire()
            if isinstance(j.index, SealedIndex):
                j.index.close()


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
        seam: the file seam for journal writes (apply only; default: the OS).
        block_bytes: index block size for rebuilt indexes.

    Raises:
        JournalSequenceGap: a journal is missing between two intact ones.
    """
    started = time.perf_counter()
    files = seam if seam is not None else OsFileSeam()
    # 1. what is on disk; duplicates and leftovers go
    found = discover(journal_dir, archive_dir, instance)
    if apply:
        remove_files(found.duplicates + found.leftovers)
    # 2. check the journals in order, up to the first damage
    examined, problems = _check(found.journals, trust=trust_indexes, block_bytes=block_bytes)
    # 3. cut the damage and everything after it
    later = found.journals[len(examined) :]
    truncations = _cut(examined, later, apply, journal_dir, instance, files, journal_size)
    # 4. the journals the log keeps: trimmed, with their index files right
    journals: list[RecoveredJournal] = []
    for i, ex in enumerate(examined):
        cand = ex.cand
        plain = not cand.compression and not cand.archived
        # the last plain journal takes the appends, unless it was finished (sealed)
        active = i == len(examined) - 1 and plain and isinstance(ex.index, IndexBuilder)
        index = ex.index
        if apply:
            index = finish_journal(
                ex, active=active, instance=instance, seam=files, problems=problems
            )
        journals.append(
            RecoveredJournal(
                cand.base, cand.path, cand.compression, cand.archived, index, ex.source,
                active, _disk_size(cand.path),
            )
        )  # fmt: skip
    # 5. the publisher table
    try:
        ack: bytes | None = (journal_dir / clients_ack_name(instance)).read_bytes()
    except OSError:
        ack = None
    publishers, ack_use = rebuild_publishers(ack, [j.index for j in journals])
    # 6. make the deletions and moves durable
    if apply and (found.leftovers or found.duplicates or truncations):
        sync_directories(journal_dir, archive_dir)
    last_seq = journals[-1].index.last_seq if journals else 0
    report = RecoveryReport(
        instance=instance,
        files_scanned=len(examined),
        records_recovered=sum(j.index.count for j in journals),
        first_seq=journals[0].base if journals else last_seq + 1,
        last_seq=last_seq,
        bytes_verified=sum(ex.verified for ex in examined),
        bytes_truncated=sum(t.bytes_cut for t in truncations),
        truncations=tuple(truncations),
        indexes_rebuilt=tuple(str(ex.cand.path) for ex in examined if ex.rebuilt),
        index_problems=tuple(problems),
        clients_ack=ack_use,
        publishers=len(publishers),
        duplicates_removed=tuple(str(p) for p in found.duplicates),
        duration_s=time.perf_counter() - started,
        damage=tuple(d for ex in examined for d in ex.damage),
    )
    return Recovery(report, journals, publishers, found.preallocated, found.next_prealloc_number)


def _check(
    cands: list[Candidate], *, trust: bool, block_bytes: int
) -> tuple[list[Examined], list[str]]:
    """Examine journals in base order until the first damaged one (included).

    Returns:
        ``(the journals examined, the index problems found)``.

    Raises:
        JournalSequenceGap: a journal does not start right after the previous one.
    """
    last_plain = None
    if cands and not cands[-1].compression and not cands[-1].archived:
        last_plain = cands[-1].base
    examined: list[Examined] = []
    problems: list[str] = []
    for cand in cands:
        if examined and cand.base != examined[-1].index.last_seq + 1:
            for ex in examined:
                ex.source.retire()
            raise JournalSequenceGap(examined[-1].index.last_seq + 1, cand.base, str(cand.path))
        ex = examine(cand, active=cand.base == last_plain, trust=trust, block_bytes=block_bytes)
        problems.extend(ex.problems)
        examined.append(ex)
        if ex.damaged:
            break
    return examined, problems


def _cut(
    examined: list[Examined],
    later: list[Candidate],
    apply: bool,
    journal_dir: Path,
    instance: str,
    seam: FileSeam,
    journal_size: int,
) -> list[Truncation]:
    """Report (and with ``apply`` make) the cuts: the damaged journal's tail, then every
    journal after it; each is logged as a warning."""
    truncations: list[Truncation] = []
    if examined and examined[-1].damaged:
        ex = examined[-1]
        saved = None
        cut = ex.garbage_end - ex.end if ex.cand.compression is None else ex.size - ex.end
        first_lost = ex.index.last_seq + 1
        if apply:
            saved = cut_journal(ex, journal_dir, instance, seam, journal_size)
        reason = ex.reason or "data after end of data"
        truncations.append(Truncation(str(ex.cand.path), ex.end, cut, reason, first_lost, saved))
    for cand in later:
        size = _disk_size(cand.path)
        saved = move_aside(cand, journal_dir) if apply else None
        truncations.append(
            Truncation(str(cand.path), 0, size, "follows damaged journal", cand.base, saved)
        )
    for t in truncations:
        log.warning(
            "journal recovery cut %d bytes of %s at offset %d (%s); first seq lost %d%s",
            t.bytes_cut, t.path, t.offset, t.reason, t.first_seq_cut,
            f"; kept in {t.saved_to}" if t.saved_to else "",
        )  # fmt: skip
    return truncations


def _disk_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0
