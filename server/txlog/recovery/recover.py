"""Recovery: find the journals of an instance, check them, cut damage, rebuild indexes.

Run at every open (in a worker thread) and, read-only, by ``spool journal verify`` and
``spool journal find``, after Kafka's ``LogSegment.recover`` and nats-server's
``rebuildStateFromBufLocked``: only this instance's files, duplicates of an interrupted
archive resolved, journals checked (a sealed index trusted after cheap checks, the last
journal always checked), damage fenced and the intact records after it kept, a torn tail
cut (its known-durable records fenced), the publisher table and the fences rebuilt.
:func:`recover` runs these steps over parts that each do one of them: :mod:`.discovery`,
:mod:`.checking`, :mod:`..damage.fenceplan` and :mod:`.rewrite`, :mod:`.changes` (only with
``apply``), :mod:`..publishers.clientsack` and :mod:`.report`. See docs/transaction-log.md
"Recovery" for the rules step by step.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from spool.server.txlog.damage.fenceplan import (
    KeyRanges,
    Neighbours,
    fences_of,
    journal_parts,
    neighbours_of,
    tail_fence,
)
from spool.server.txlog.damage.fences import Fence, Part, placeholders
from spool.server.txlog.damage.salvage import BlockHint, LostSpan, Salvage, salvage
from spool.server.txlog.errors import CorruptRecord, JournalSequenceGap
from spool.server.txlog.format.codec import HEADER, decode
from spool.server.txlog.format.record import FLAG_RELEASED, LOST_KEY, RecordKind, is_publisher_key
from spool.server.txlog.index.answers import BLOCK_BYTES
from spool.server.txlog.index.builder import IndexBuilder
from spool.server.txlog.index.fileformat import parse_open_index
from spool.server.txlog.index.sealed import SealedIndex
from spool.server.txlog.publishers.clientsack import (
    highest_in_fences,
    parse_clients_ack,
    rebuild_publishers,
)
from spool.server.txlog.recovery.changes import (
    cut_journal,
    finish_journal,
    remove_files,
    sync_directories,
)
from spool.server.txlog.recovery.checking import Examined, examine
from spool.server.txlog.recovery.discovery import Candidate, discover
from spool.server.txlog.recovery.report import RecoveryReport, Truncation
from spool.server.txlog.recovery.rewrite import adopt_pending, keep_damaged, rewrite_journal
from spool.server.txlog.storage.files import (
    DAMAGED_DIR,
    Compression,
    FileSeam,
    OsFileSeam,
    clients_ack_name,
    parse_name,
)
from spool.server.txlog.storage.source import JournalSource

__all__ = ["RecoveredJournal", "Recovery", "fences_in", "recover"]

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
    """The recovered log: its journals, publishers, preallocated files and fences."""

    report: RecoveryReport
    journals: list[RecoveredJournal]
    publishers: dict[int, tuple[int, int]]
    preallocated: list[Path]
    next_prealloc_number: int
    fences: list[Fence] = field(default_factory=list)
    #: publishers whose last record (as ``clients.ack`` names it) is fenced: their
    #: highest sequence, which the publisher table leaves out
    in_fences: dict[int, int] = field(default_factory=dict)

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
    known_durable: int = 0,
) -> Recovery:
    """Recover (``apply``) or just examine (read-only) an instance's log.

    Args:
        journal_dir: TransactionLog/JournalDirectory.
        archive_dir: TransactionLog/JournalArchiveDirectory (None: none to look at).
        instance: the instance name (file prefix).
        apply: fence and cut damage, write rebuilt indexes, delete duplicates. Without it
            nothing on disk changes (``spool journal verify`` / ``find`` on a live
            broker): the fences it would make are reported.
        trust_indexes: use valid sealed indexes instead of scanning finished journals
            (``verify`` passes False to check every record).
        journal_size: size the active journal is preallocated to (apply only).
        seam: the file seam for journal writes (apply only; default: the OS).
        block_bytes: index block size for rebuilt indexes.
        known_durable: a seq the instance knows was durable from outside the log (a
            replication peer acknowledged it): a cut tail up to it is fenced.

    Raises:
        JournalSequenceGap: two journals overlap (a journal starts inside the one before).
    """
    started = time.perf_counter()
    files = seam if seam is not None else OsFileSeam()
    # 1. rewrites a crash interrupted after their commit point are finished; then what is
    #    on disk: duplicates and leftovers go (an orphaned index first says what its
    #    journal held, for a fence in its place)
    if apply:
        for directory in {journal_dir, archive_dir or journal_dir}:
            adopt_pending(directory, instance, files)
    found = discover(journal_dir, archive_dir, instance)
    orphans = _orphan_indexes(found.leftovers, instance)
    if apply:
        remove_files(found.duplicates + found.leftovers)
    try:
        ack: bytes | None = (journal_dir / clients_ack_name(instance)).read_bytes()
    except OSError:
        ack = None
    # 2..5. check the journals in order; fence damage, cut a torn tail
    walk = _Walk(
        journal_dir, instance, apply=apply, trust=trust_indexes, seam=files,
        journal_size=journal_size, block_bytes=block_bytes, orphans=orphans,
    )  # fmt: skip
    try:
        examined = walk.run(found.journals)
        walk.fence_tail(examined, ack, known_durable)
    except BaseException:
        walk.release()
        raise
    problems = walk.problems
    truncations = walk.truncations
    # the journals the log keeps: trimmed, with their index files right
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
    # 7. every fence of the log (read-only: those it would make)
    fences = fences_in(journals) if apply else walk.fences
    # 6. the publisher table: what the log holds, fenced records not included
    publishers, ack_use = rebuild_publishers(
        ack, [j.index for j in journals], lambda seq: _fenced(fences, seq)
    )
    in_fences = highest_in_fences(ack, lambda seq: _fenced(fences, seq))
    # make the deletions and moves durable
    if apply and (
        found.leftovers or found.duplicates or truncations or walk.fences or walk.unnamed
    ):
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
        fenced=tuple(f.to_dict() for f in walk.fences),
        unnamed=tuple(f.to_dict() for f in walk.unnamed),
    )
    return Recovery(
        report, journals, publishers, found.preallocated, found.next_prealloc_number, fences,
        in_fences,
    )  # fmt: skip


class _Walk:
    """Steps 2 to 5 of the module docstring over an instance's journals, in base order.

    Keeps what it found (fences made, cuts, index problems) for the report; with
    ``apply`` it writes the journals that hold the fences (server/txlog/recovery/rewrite.py) and cuts
    a torn tail (server/txlog/recovery/changes.py).
    """

    def __init__(
        self,
        journal_dir: Path,
        instance: str,
        *,
        apply: bool,
        trust: bool,
        seam: FileSeam,
        journal_size: int,
        block_bytes: int,
        orphans: dict[int, bytes],
    ) -> None:
        self.journal_dir = journal_dir
        self.instance = instance
        self.apply = apply
        self.trust = trust
        self.seam = seam
        self.journal_size = journal_size
        self.block_bytes = block_bytes
        self.orphans = orphans
        self.now_us = int(time.time() * 1e6)
        self.fences: list[Fence] = []
        #: durable records cut from the tail that nothing names: held by released
        #: placeholders (:meth:`fence_tail`)
        self.unnamed: list[Fence] = []
        self.truncations: list[Truncation] = []
        self.problems: list[str] = []
        #: the torn tail of the last journal, and what said records in it were durable
        self.tail: LostSpan | None = None
        self.evidence = _Evidence()
        #: the seq after the last intact record of a damaged last journal
        self.end_seq: int | None = None
        #: the time of the last record kept before a torn tail
        self.last_kept_us: int | None = None
        self._open: list[Examined] = []

    def release(self) -> None:
        """Close every reader and index opened (a failed recovery)."""
        for ex in self._open:
            ex.source.retire()
            if isinstance(ex.index, SealedIndex):
                ex.index.close()

    def run(self, cands: list[Candidate]) -> list[Examined]:
        last_plain = None
        if cands and not cands[-1].compression and not cands[-1].archived:
            last_plain = cands[-1].base
        out: list[Examined] = self._open
        for i, cand in enumerate(cands):
            gap: int | None = None
            if out:
                expected = out[-1].index.last_seq + 1
                if cand.base < expected:
                    raise JournalSequenceGap(expected, cand.base, str(cand.path))
                if cand.base > expected:
                    gap = expected
            ex = examine(cand, active=cand.base == last_plain, trust=self.trust,
                         block_bytes=self.block_bytes)  # fmt: skip
            self.problems.extend(ex.problems)
            if gap is not None:
                # the journal after the hole is read first: its records say what the
                # missing one held (its publishers' first sequences after it, its time)
                missing = self._missing(gap, cand.base - 1, out, [ex.index], cands[i + 1 :])
                if missing is not None:
                    out.append(missing)
            out.append(ex)
            if ex.damaged or ex.damage:
                last = i == len(cands) - 1
                out[-1] = self._damaged(ex, last=last, before=out[:-1], after=cands[i + 1 :])
        return out

    # -- a damaged journal ----------------------------------------------------------------

    def _damaged(
        self, ex: Examined, *, last: bool, before: list[Examined], after: list[Candidate]
    ) -> Examined:
        """Fence the damage of one journal (and, in the last journal, find its torn tail).

        The journal is read past its damage; its lost spans become fences, written as
        placeholders in a rewritten journal. Damage that runs to the end of the last
        journal's data is its torn tail: cut, with the fence of what was known durable in
        it made after the walk (:meth:`fence_tail`).
        """
        cand = ex.cand
        source = ex.source
        hints, ids_index = _hints(cand, ex)
        sv = salvage(source, cand.base, size=source.size(), hints=hints)
        spans = list(sv.spans)
        tail: LostSpan | None = None
        if spans and spans[-1].last_seq is None:
            # the journal's own index, or the next journal, says where its data ended; the
            # last journal without a sealed index was being written: its end is a torn tail
            if isinstance(ids_index, SealedIndex):
                end_seq = ids_index.last_seq
            elif not last:
                end_seq = after[0].base - 1
            else:
                end_seq = None
            if end_seq is None:
                tail = spans.pop()
            else:
                spans[-1] = replace(spans[-1], last_seq=max(end_seq, spans[-1].first_seq - 1))
        last_seq = spans[-1].last_seq if spans and spans[-1].last_seq is not None else 0
        nb = _neighbours(before, [], after)
        fences = fences_of(
            spans, sv, journal=cand.base, path=str(cand.path), last_seq=last_seq,
            index=ids_index, neighbours=nb, found_by="startup", found_us=self.now_us,
            saved=None,
        )  # fmt: skip
        if last:
            self.end_seq = sv.next_seq
        if tail is not None:
            self.tail = tail
            self.evidence = _tail_evidence(ex, tail)
            times = [p.rows[-1][2] for p in sv.pieces if p.rows and p.end <= tail.offset]
            self.last_kept_us = times[-1] if times else nb.t_before
        if not spans:
            if tail is not None and self.apply:
                self._cut_tail(ex)
            elif tail is not None:
                self._report_cut(ex, tail, None)
            return ex
        if not self.apply:
            self.fences.extend(fences)
            if tail is not None:
                self._report_cut(ex, tail, None)
            return ex
        # rewrite the journal: its intact pieces, placeholders for its fences, no tail
        kept = keep_damaged(
            cand.path, self.journal_dir / DAMAGED_DIR, f"{cand.path.name}.{self.now_us}"
        )
        for fence in fences:
            fence.saved = kept
        parts = journal_parts(sv, spans, fences)
        if tail is not None:
            self._report_cut(ex, tail, kept)
        path = rewrite_journal(
            directory=cand.path.parent, instance=self.instance, base=cand.base, parts=parts,
            source=source, replaces=cand.path, seam=self.seam, block_bytes=self.block_bytes,
        )  # fmt: skip
        self.fences.extend(fences)
        for fence in fences:
            _warn(fence)
        source.retire()
        if isinstance(ex.index, SealedIndex):
            ex.index.close()
        return examine(
            Candidate(cand.base, path, None, cand.archived, _index_beside(path, self.instance)),
            active=False, trust=True, block_bytes=self.block_bytes,
        )  # fmt: skip

    def _cut_tail(self, ex: Examined) -> None:
        """Cut the torn tail of the last journal (its bytes kept in ``damaged/``)."""
        saved = cut_journal(ex, self.journal_dir, self.instance, self.seam, self.journal_size)
        assert self.tail is not None
        self._report_cut(ex, self.tail, saved)

    def _report_cut(self, ex: Examined, tail: LostSpan, saved: str | None) -> None:
        cut = tail.end - tail.offset
        t = Truncation(
            str(ex.cand.path), tail.offset, cut, tail.reason, tail.first_seq, saved,
            self.last_kept_us,
        )  # fmt: skip
        self.truncations.append(t)
        log.warning(
            "journal recovery cut %d bytes of %s at offset %d (%s); first seq lost %d%s",
            t.bytes_cut, t.path, t.offset, t.reason, t.first_seq_cut,
            f"; kept in {t.saved_to}" if t.saved_to else "",
        )  # fmt: skip

    # -- a journal missing between two ------------------------------------------------------

    def _missing(
        self,
        first: int,
        last: int,
        before: list[Examined],
        next_index: list[IndexBuilder | SealedIndex],
        after: list[Candidate],
    ) -> Examined | None:
        """Fence seqs ``first..last`` whose journal is gone: a journal of placeholders
        takes its place (its identities from its orphaned index, if it left one)."""
        orphan = self.orphans.get(first)
        index: KeyRanges | None = None
        if orphan is not None:
            index = SealedIndex.from_buffer(orphan, first) or _open_builder(orphan, first)
        nb = _neighbours(before, next_index, after)
        sv = Salvage([], [], 0, first, 0, 0)
        span = LostSpan(-1, -1, first, last, "journal missing")
        name = self.journal_dir / f"{self.instance}.{first:020d}.journal"
        (fence,) = fences_of(
            [span], sv, journal=first, path=str(name), last_seq=last, index=index,
            neighbours=nb, found_by="startup", found_us=self.now_us, saved=None,
        )  # fmt: skip
        self.fences.append(fence)
        _warn(fence)
        if not self.apply:
            return None
        return self._placeholder_journal(fence)

    def _placeholder_journal(self, fence: Fence, *, released: bool = False) -> Examined:
        """Write a journal of ``fence``'s placeholders (base ``fence.first_seq``)."""
        parts: list[Part] = list(placeholders(fence, fence.window[0], released=released))
        path = rewrite_journal(
            directory=self.journal_dir, instance=self.instance, base=fence.first_seq,
            parts=parts, source=None, replaces=None, seam=self.seam,
            block_bytes=self.block_bytes,
        )  # fmt: skip
        return examine(
            Candidate(fence.first_seq, path, None, False, _index_beside(path, self.instance)),
            active=False, trust=True, block_bytes=self.block_bytes,
        )  # fmt: skip

    # -- durable records cut with a torn tail ---------------------------------------------

    def fence_tail(self, examined: list[Examined], ack: bytes | None, known_durable: int) -> None:
        """After the walk: fence what the cut tail held that was known to be durable
        (module docstring, step 5), in a journal of placeholders after the last one."""
        if not examined:
            return
        last = examined[-1]
        cut_seq = last.index.last_seq + 1
        if not self.apply and self.end_seq is not None:
            cut_seq = self.end_seq  # read-only: the damaged journal was not rewritten
        durable = known_durable
        known: dict[int, tuple[int, int]] = {}
        parsed = parse_clients_ack(ack) if ack is not None else None
        if parsed is not None:
            covered, known = parsed
            durable = max(durable, covered)
        reason = "lost after the end of the data"
        offset = last.end
        if self.tail is not None:
            tail, ev = self.tail, self.evidence
            reason, offset = tail.reason, tail.offset
            durable = max(durable, ev.upto)
            for h, ps in ev.highest.items():
                if ps > known.get(h, (0, 0))[0]:
                    known[h] = (ps, ev.upto)
            if ev.torn is not None and ev.torn[0] not in known and tail.first_seq == cut_seq:
                known[ev.torn[0]] = (ev.torn[1], cut_seq)
        if durable < cut_seq:
            return
        highest: dict[int, int] = {}
        for ex in examined:
            for p in ex.index.publishers():
                if p.max_pub_seq > highest.get(p.pub_hash, 0):
                    highest[p.pub_hash] = p.max_pub_seq
        fence = tail_fence(
            cut_seq, durable_upto=durable, known=known, highest=highest, journal=cut_seq,
            path=str(last.cand.path), reason=reason, offset=offset,
            saved=self.truncations[-1].saved_to if self.truncations else None,
            t_lo=last.index.last_ts, found_by="startup", found_us=self.now_us,
        )  # fmt: skip
        if fence is None:
            return
        if not fence.identities:
            # nothing says which records these seqs held: no peer can be asked for them.
            # Their seqs stay taken (released placeholders: a peer's acknowledged
            # positions keep their meaning), and the log says when it lost records, so
            # its sources send again what it lacks (docs/replication.md)
            self.unnamed.append(fence)
            log.warning(
                "journal recovery lost seqs %d..%d after the end of %s: durable, but "
                "nothing says which records they held; their seqs stay taken, and the "
                "replication sources send again what this log lacks",
                fence.first_seq, fence.last_seq, fence.path,
            )  # fmt: skip
            if self.apply:
                examined.append(self._placeholder_journal(fence, released=True))
            return
        self.fences.append(fence)
        _warn(fence)
        if self.apply:
            examined.append(self._placeholder_journal(fence))


def _warn(fence: Fence) -> None:
    log.warning(
        "journal recovery fenced seqs %d..%d of %s (%s): the records after them are kept; "
        "they are not served until a repair from a replication peer writes them back",
        fence.first_seq, fence.last_seq, fence.path, fence.reason,
    )  # fmt: skip


def _hints(cand: Candidate, ex: Examined) -> tuple[list[BlockHint], KeyRanges | None]:
    """Block hints for the salvage of a damaged journal, and the index its lost records'
    bookmarks can be read from (an intact sealed index, or every open-index entry that
    passes its own CRC)."""
    if isinstance(ex.index, SealedIndex):
        blocks = [(b[1], b[2], b[0], b[5]) for b in ex.index.blocks()]
        return blocks, ex.index
    if cand.index_path is not None and cand.compression is None:
        try:
            data = cand.index_path.read_bytes()
        except OSError:
            data = b""
        sealed = SealedIndex.from_buffer(data, cand.base) if data else None
        if sealed is not None:
            return [(b[1], b[2], b[0], b[5]) for b in sealed.blocks()], sealed
        builder = _open_builder(data, cand.base)
        if builder is not None:
            hints = list(zip(builder.b_off, builder.b_len, builder.b_first, builder.b_crc,
                             strict=True))  # fmt: skip
            return hints, builder
    return [], None


def _open_builder(data: bytes, base: int) -> IndexBuilder | None:
    """An index of the open-form entries of ``data`` that pass their own CRC."""
    entries, _problem = parse_open_index(data, base)
    if not entries:
        return None
    builder = IndexBuilder(base)
    builder.restore(entries)
    return builder


def _neighbours(
    before: list[Examined],
    known_after: list[IndexBuilder | SealedIndex],
    after: list[Candidate],
) -> Neighbours:
    """What the journals around a damaged or missing one say: the indexes of those before,
    ``known_after`` (indexes already read of those right after), then the sealed indexes
    of the next few, mapped for the moment."""
    later: list[SealedIndex] = []
    try:
        for cand in after[:4]:
            if cand.index_path is not None:
                sealed = SealedIndex.load(cand.index_path, cand.base)
                if sealed is not None:
                    later.append(sealed)
        indexes: list[IndexBuilder | SealedIndex] = [*known_after, *later]
        return neighbours_of([ex.index for ex in before], indexes)
    finally:
        for sealed in later:
            sealed.close()


def _orphan_indexes(leftovers: list[Path], instance: str) -> dict[int, bytes]:
    """The bytes of index files whose journal is gone, by base."""
    out: dict[int, bytes] = {}
    for path in leftovers:
        parsed = parse_name(path.name, instance)
        if parsed is not None and parsed.kind == "index":
            try:
                out[parsed.base] = path.read_bytes()
            except OSError:
                continue
    return out


def _index_beside(journal: Path, instance: str) -> Path | None:
    parsed = parse_name(journal.name, instance)
    if parsed is None:
        return None
    path = journal.parent / f"{instance}.{parsed.base:020d}.index"
    return path if path.exists() else None


@dataclass(slots=True)
class _Evidence:
    """What says records of a torn tail were durable before the cut.

    Attributes:
        upto: the last seq the open index lists in the tail (0: none).
        highest: per index key, its highest sequence there.
        torn: the bookmark in the header of the torn record itself, when it is whole.
    """

    upto: int = 0
    highest: dict[int, int] = field(default_factory=dict)
    torn: tuple[int, int] | None = None


def _tail_evidence(ex: Examined, tail: LostSpan) -> _Evidence:
    """Read, before the tail is cut, what its journal's files say of it: the open index
    (written only after the fsync of the bytes it describes, it proves them durable) and
    the header of the torn record."""
    ev = _Evidence()
    path = ex.cand.index_path
    if path is not None and ex.cand.compression is None:
        try:
            entries, _ = parse_open_index(path.read_bytes(), ex.cand.base)
        except OSError:
            entries = []
        for e in entries:
            last = e.first_seq + e.records - 1
            if last < tail.first_seq:
                continue
            ev.upto = max(ev.upto, last)
            for h, _first, lst, _ls, _blk, _cnt in e.ranges:
                if is_publisher_key(h) and lst > ev.highest.get(h, 0):
                    ev.highest[h] = lst
    try:
        head = ex.source.read(tail.offset, HEADER.size)
    except (OSError, CorruptRecord):
        head = b""
    if len(head) >= 40:
        fields = HEADER.unpack_from(head + bytes(HEADER.size - len(head)), 0)
        if fields[1] == 0xA1 and fields[4] == tail.first_seq and fields[6]:
            ev.torn = (fields[6], fields[7])
    return ev


def fences_in(journals: list[RecoveredJournal]) -> list[Fence]:
    """Every fence of a recovered log: the runs of placeholders its indexes list (under
    their own key), each described by its first placeholder; released ones are not."""
    fences: list[Fence] = []
    for j in journals:
        if j.index.publisher(LOST_KEY) is None:
            continue
        seqs = sorted(
            s
            for key, first, last, _count, _span in j.index.key_ranges()
            if key == LOST_KEY
            for s in range(first, last + 1)
        )
        for first, last in _runs(seqs):
            fence = _described(j, first, last)
            if fence is not None:
                fences.append(fence)
    return fences


def _runs(seqs: list[int]) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    for s in seqs:
        if runs and runs[-1][1] == s - 1:
            runs[-1] = (runs[-1][0], s)
        else:
            runs.append((s, s))
    return runs


def _described(j: RecoveredJournal, first: int, last: int) -> Fence | None:
    """The fence a run of placeholders stands for (None: released)."""
    span = j.index.span_for_seq(first)
    if span is None:
        return None
    buf = j.source.read(span.offset, span.length)
    pos = 0
    seq = span.seq
    while pos < len(buf) and seq < first:
        pos += HEADER.unpack_from(buf, pos)[0]
        seq += 1
    try:
        record, _ = decode(buf, pos)
    except (CorruptRecord, ValueError):
        return Fence(first, last, j.base, "damaged", "startup", 0, str(j.path))
    if record.kind is not RecordKind.LOST:
        return None
    if record.flags & FLAG_RELEASED:
        return None
    return Fence.from_meta(record.body, first, last, j.base)


def _fenced(fences: list[Fence], seq: int) -> bool:
    return any(f.first_seq <= seq <= f.last_seq for f in fences)


def _disk_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0
