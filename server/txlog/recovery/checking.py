"""Checking one journal: how much of it is good, and its index.

The read-only half of recovery, shared by ``open()`` (then :mod:`.changes` acts on the
result) and by ``spool journal verify`` / ``find`` (which must not change anything). A
journal is checked the cheapest way its files allow, as the recovery rules say
(:mod:`.recover`):

- a finished journal with a valid sealed index is trusted after cheap checks: the bytes
  after its indexed end (normally unwritten preallocated space, which costs nothing to
  skip), and the CRCs of its first and last index blocks (two reads of about 16 KB: a
  torn, truncated or zeroed end of a finished journal shows there). The rest of its bytes
  is checked by the scrub (server/txlog/damage/scrub.py), not at every start. When an edge block
  does not match, the journal is read past its damage (server/txlog/damage/salvage.py) and
  what is lost is listed in :attr:`Examined.damage`;
- the journal that was being written is checked at disk speed where its index covers it
  (one CRC-32C per ~4 KB block, read in large chunks), record by record after that;
- a journal without a usable index is scanned record by record into a new
  :class:`~spool.server.txlog.index.builder.IndexBuilder`;
- with ``trust`` off (``verify``) every record is scanned, and the index file is only
  compared with what the scan found.

The result, :class:`Examined`, says where the valid data ends, why it stops there (None:
it does not, or only zeros follow), where the last non-zero byte after it is, and carries
the journal's index and open reader for the log to keep.

Thread contract: everything here runs in the one thread that runs recovery (a worker
thread at ``open()``, the CLI's main thread); an :class:`Examined` and the index and
reader it holds stay with that thread until :func:`~spool.server.txlog.recovery.recover.recover`
returns them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Final

import google_crc32c

from spool.server.txlog.damage.ranges import DamagedRange
from spool.server.txlog.damage.salvage import nonzero_end, ranges_of, salvage
from spool.server.txlog.errors import CorruptRecord
from spool.server.txlog.format.codec import HEADER, HEADER_SIZE, scan
from spool.server.txlog.index.builder import IndexBuilder
from spool.server.txlog.index.fileformat import parse_open_index
from spool.server.txlog.index.sealed import SealedIndex
from spool.server.txlog.recovery.discovery import Candidate
from spool.server.txlog.storage.source import JournalSource, RecordWindows, open_source

__all__ = ["SCAN_CHUNK", "Examined", "examine", "scan_into"]

#: bytes read at a time when scanning records or looking for non-zero bytes
SCAN_CHUNK: Final = 8 << 20
#: bytes read at a time when checking block CRCs
VERIFY_CHUNK: Final = 8 << 20


@dataclass(slots=True)
class Examined:
    """One checked journal.

    Attributes:
        cand: the journal file (replaced when repair rewrites a compressed journal plain).
        source: an open reader of its bytes (the log keeps it; retire it otherwise).
        index: its index up to ``end``: the sealed one when trusted, else a builder.
        end: where its valid data ends.
        size: its size (raw bytes for a compressed journal).
        reason: why the data stops at ``end`` (None: clean, or only zeros follow).
        garbage_end: end of the last non-zero byte at or after ``end``.
        rebuilt: its index was (or, in ``verify``, would be) rebuilt from the records.
        verified: journal bytes whose CRCs were checked.
        problems: why its index file could not be used as it is.
        index_intact: its open-form index file is right as it is (no rewrite needed).
        damage: what the edge checks of a trusted finished journal found lost.
    """

    cand: Candidate
    source: JournalSource
    index: IndexBuilder | SealedIndex
    end: int
    size: int
    reason: str | None
    garbage_end: int
    rebuilt: bool
    verified: int
    problems: list[str] = field(default_factory=list)
    index_intact: bool = False
    damage: list[DamagedRange] = field(default_factory=list)

    @property
    def damaged(self) -> bool:
        """Recovery must cut it: a bad record, or non-zero bytes after the data."""
        return self.reason is not None or self.garbage_end > self.end


def examine(cand: Candidate, *, active: bool, trust: bool, block_bytes: int) -> Examined:
    """Check one journal and produce its index (see the module docstring).

    Args:
        cand: the journal.
        active: it is the journal that was being written (always checked).
        trust: use a valid sealed index instead of reading a finished journal.
        block_bytes: block size of an index built here.
    """
    source = open_source(cand.path, cand.compression)
    try:
        return _examine_source(cand, source, active=active, trust=trust, block_bytes=block_bytes)
    except BaseException:
        source.retire()
        raise


def _examine_source(
    cand: Candidate, source: JournalSource, *, active: bool, trust: bool, block_bytes: int
) -> Examined:
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
            return Examined(cand, source, sealed, end, end, None, end, False, 0)
        size = source.size()
        if sealed is not None:
            fits = sealed.data_len == size or (cand.compression is None and sealed.data_len <= size)
            if not fits:
                problems.append(f"{cand.index_path}: does not match the journal's size")
                sealed.close()
            elif trust and not active:
                garbage = nonzero_end(source, sealed.data_len, size)
                if garbage == sealed.data_len:
                    ex = Examined(
                        cand, source, sealed, sealed.data_len, size, None, garbage, False, 0
                    )
                    ex.verified, ex.damage = _check_edges(cand, source, sealed)
                    return ex
                problems.append(f"{cand.index_path}: journal has bytes after its indexed end")
                sealed.close()
            else:
                blocks = [(b[1], b[2], b[5]) for b in sealed.blocks()]
                bad, verified = _verify_blocks(source, blocks)
                if bad is None:
                    garbage = nonzero_end(source, sealed.data_len, size)
                    return Examined(
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
    cand: Candidate,
    source: JournalSource,
    builder: IndexBuilder | None,
    verified: int,
    problems: list[str],
    intact: bool,
    block_bytes: int,
) -> Examined:
    """Scan a journal record by record from where ``builder`` (if any) stops."""
    size = source.size()
    rebuilt = builder is None
    if builder is None:
        builder = IndexBuilder(cand.base, block_bytes)
    start = builder.data_len
    end, reason, scanned = scan_into(builder, source, start, size)
    verified += scanned
    if reason == "end of data":
        reason = None
    garbage = nonzero_end(source, end, size) if cand.compression is None and end < size else end
    ex = Examined(cand, source, builder, end, size, reason, garbage, rebuilt, verified, problems)
    ex.index_intact = intact and builder.data_len > 0
    return ex


def _check_edges(
    cand: Candidate, source: JournalSource, sealed: SealedIndex
) -> tuple[int, list[DamagedRange]]:
    """The CRCs of a finished journal's first and last index blocks; when one does not
    match, every lost span of the journal (read past its damage).

    Returns:
        ``(bytes checked, damaged ranges)``.
    """
    n = sealed.block_count
    edges = [sealed.block(i) for i in sorted({0, n - 1})] if n else []
    blocks = [(b[1], b[2], b[5]) for b in edges]
    checked = 0
    for block in blocks:
        bad, size = _verify_blocks(source, [block])
        checked += size
        if bad is not None:
            hints = [(b[1], b[2], b[0], b[5]) for b in sealed.blocks()]
            sv = salvage(source, cand.base, size=sealed.data_len, hints=hints)
            now = int(time.time() * 1e6)
            damage = ranges_of(sv.spans, cand.base, str(cand.path), sealed.last_seq, "startup", now)
            return checked + sv.checked, damage
    return checked, []


def _index_problems(cand: Candidate, ex: Examined) -> list[str]:
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


def scan_into(
    builder: IndexBuilder, source: JournalSource, start: int, size: int
) -> tuple[int, str | None, int]:
    """Scan records from ``start`` into ``builder``.

    Returns:
        ``(end of valid data, reason it stopped or None at the end of the file, bytes)``;
        the reason of a compressed journal whose data stops at an undecodable chunk is
        that damage.
    """
    seq = builder.last_seq + 1
    scanned = 0
    windows = RecordWindows(source, start, window=SCAN_CHUNK, size=size)
    while True:
        try:
            buf = windows.read()
        except CorruptRecord as exc:  # a compressed chunk that does not decompress
            return windows.offset, exc.reason, scanned
        if buf is None:
            return windows.offset, windows.reason, scanned
        pos = windows.offset
        res = scan(buf, 0, len(buf), seq, final=False, base=pos)
        builder.add_scanned(buf, pos, res)
        scanned += res.end
        seq = res.next_seq
        if res.damaged:
            return pos + res.end, res.reason, scanned
        windows.advance(res.end)


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
