"""The transaction log: append on the event loop, group commit in a thread, read anywhere.

:class:`TransactionLog` is the broker's truth (ARCHITECTURE.md). Its contract:

- :meth:`~TransactionLog.append` runs on the event loop and does no I/O: it encodes the
  record, adds it to the pending buffer and the active journal's index, and wakes the
  flusher. It assigns ``seq = last_seq + 1`` and the timestamp.
- The **flusher** task gathers appends and hands each batch to a worker thread that
  writes and fsyncs it - at most one fsync per ``FlushInterval`` (group commit), or
  sooner when a lot is pending. Back on the loop, ``durable_seq`` advances, durable
  listeners run (persisted acks, durable delivery) and :meth:`wait_durable` callers wake.
- The first failed write or fsync is **latched** (:class:`TxlogWriteFailed`): after a
  failed fsync the page cache may hold data the disk does not, so the log refuses every
  later append until it is reopened, and recovery decides from what the disk holds.
- **Reads** return durable records only: recent ones from an in-memory tail cache,
  older ones decoded in a thread from plain or compressed journals.
- **Journals** roll at ``JournalSize`` into preallocated files; finished journals can be
  archived, compressed or removed, oldest first, unless a :class:`Pin` still needs them.

Thread-safety: every public method is for the event loop that called :meth:`open`.
State is never shared with threads: a worker receives the data of one batch or one read
and reports back; only the flusher thread writes journal files.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import heapq
import itertools
import logging
import os
import shutil
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from server.clock import SYSTEM_CLOCK, Clock, time_us
from server.config import TransactionLogConfig
from server.txlog.batch import RecordBatch, decode_batch
from server.txlog.clients import encode_clients_ack
from server.txlog.codec import HEADER, decode_records, encode, encode_run, make_record
from server.txlog.compression import compress_journal
from server.txlog.cursor import LogCursor
from server.txlog.errors import (
    JournalActive,
    JournalNotFound,
    JournalPinned,
    PublisherSequenceRegression,
    TxlogClosed,
    TxlogError,
    TxlogFull,
    TxlogWriteFailed,
)
from server.txlog.files import (
    Compression,
    FileSeam,
    JournalHandle,
    OsFileSeam,
    clients_ack_name,
    fsync_dir,
    index_name,
    journal_name,
    prealloc_name,
    validate_instance,
    write_atomic,
)
from server.txlog.index import BLOCK_BYTES, IndexBuilder, SealedIndex, encode_open_header
from server.txlog.journal import Journal, JournalInfo, JournalState
from server.txlog.lookup import SpanQuery, plan_bookmark, plan_time, search_span
from server.txlog.pins import Pin, PinInfo, PinRegistry
from server.txlog.reader import JournalSource, PlainSource, open_source, read_span
from server.txlog.record import Record, RecordKind
from server.txlog.recovery import Recovery, RecoveryReport, recover

__all__ = ["EventCallback", "TransactionLog"]

log = logging.getLogger("spool.txlog")

EventCallback = Callable[[str, dict[str, object]], None]

#: flush at once, without waiting for the interval, past this many pending bytes
FLUSH_HIGH_WATER: Final = 4 << 20
#: default budget of the in-memory tail cache (encoded bytes of records kept)
TAIL_CACHE_BYTES: Final = 32 << 20
_LATENCY_SAMPLES: Final = 2048
_NEW, _OPEN, _CLOSING, _CLOSED = range(4)


@dataclass(slots=True)
class _Batch:
    """What one group commit writes: handed whole to the flusher thread."""

    chunks: list[tuple[Journal, int, bytearray]]
    index_entries: list[tuple[Journal, bytes]]
    finished: list[Journal]
    last_seq: int
    records: int
    nbytes: int
    clients: tuple[int, dict[int, tuple[int, int]]] | None = None


@dataclass(slots=True)
class _Written:
    """What the flusher thread reports back to the loop."""

    sources: list[tuple[Journal, JournalSource]] = field(default_factory=list)
    sealed: list[tuple[Journal, SealedIndex]] = field(default_factory=list)
    cache_errors: list[str] = field(default_factory=list)
    fsync_s: float = 0.0


@dataclass(slots=True)
class Located:
    """Answers of lookups made ahead of a synchronous planning (see ``using``)."""

    bookmarks: dict[tuple[int, int], int | None] = field(default_factory=dict)
    times: dict[int, int] = field(default_factory=dict)


@dataclass(slots=True)
class _Opened:
    report: RecoveryReport
    journals: list[Journal]
    publishers: dict[int, tuple[int, int]]
    preallocated: list[Path]
    next_prealloc: int
    handle: JournalHandle
    index_fd: int


class TransactionLog:
    """The transaction log of one instance.

    Args:
        config: the TransactionLog section.
        instance: the instance name (prefixes every file; see :mod:`.files`).
        clock: time source for timestamps and the group-commit interval.
        on_event: called on the loop with structured events: ``recovery_truncated``,
            ``journal_rolled``, ``flush_failed``, ``cache_write_failed``,
            ``journal_archived``, ``journal_compressed``, ``journal_removed``.
        files: the file seam for journal writes (tests inject failures through it).
        tail_cache_bytes: budget of recent records kept in memory for readers.
        block_bytes: index block size (tests use small blocks).
    """

    def __init__(
        self,
        config: TransactionLogConfig,
        instance: str,
        *,
        clock: Clock = SYSTEM_CLOCK,
        on_event: EventCallback | None = None,
        files: FileSeam | None = None,
        tail_cache_bytes: int = TAIL_CACHE_BYTES,
        block_bytes: int = BLOCK_BYTES,
    ) -> None:
        self.config = config
        self.instance = validate_instance(instance)
        self._clock = clock
        self._on_event = on_event
        self._seam: FileSeam = files if files is not None else OsFileSeam()
        self._tail_budget = tail_cache_bytes
        self._block_bytes = block_bytes
        self._journal_size = config.journal_size
        self._dir = Path(config.journal_directory)
        self._archive_dir = Path(config.archive_directory)
        self._state = _NEW
        self._journals: list[Journal] = []
        self._bases: list[int] = []
        self._active: Journal  # set by open()
        self._last_seq = 0
        self._durable_seq = 0
        self._pubs: dict[int, tuple[int, int]] = {}
        self._pins = PinRegistry()
        # pending writes (loop side)
        self._builder = IndexBuilder(1, block_bytes)  # the active journal's index
        self._active_len = 0  # data bytes of the active journal, appended so far
        self._pend_buf = bytearray()  # appended bytes of the active journal not yet taken
        self._pend_off = 0  # where _pend_buf starts in the active journal
        self._pend_chunks: list[tuple[Journal, int, bytearray]] = []  # of rolled journals
        self._pend_index: list[tuple[Journal, bytes]] = []
        self._pend_finished: list[Journal] = []
        self._taken_seq = 0  # last seq handed to the flusher
        # tail cache: the encoded records tail_first.. in _tail[_tail_head:], accounted per
        # batch. Encoded bytes rather than Record objects: bytes are not tracked by the
        # garbage collector, so a large tail does not lengthen GC pauses.
        self._tail: list[bytes] = []
        self._last_ts = 0  # timestamp of the last appended record
        self._tail_batches: deque[tuple[int, int]] = deque()  # (last seq, bytes)
        self._tail_head = 0
        self._tail_first = 1
        self._tail_bytes = 0
        # flusher
        self._wake = asyncio.Event()
        self._flusher: asyncio.Task[None] | None = None
        self._cache_queue: deque[_Batch] = deque()
        self._located: Located | None = None  # see using()
        self._prealloc_busy = 0  # preallocations under way (counted in _disk_bytes)
        self._prealloc_void = 0  # of those, how many a roll took the room of
        self._cache_task: asyncio.Task[None] | None = None
        self._last_flush = float("-inf")
        self._werr: TxlogWriteFailed | None = None
        self._listeners: list[Callable[[int], None]] = []
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._append_waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._waiter_ids = itertools.count()
        self._closed_event = asyncio.Event()
        # flusher-thread-owned file state
        self._handles: dict[int, JournalHandle] = {}
        self._index_fds: dict[int, int] = {}
        # preallocation and disk accounting (loop side)
        self._prealloc: list[Path] = []
        self._prealloc_next = 1
        self._disk_bytes = 0
        self._maint_lock = asyncio.Lock()
        # statistics
        self._open_seq = 0
        self._appended_bytes = 0
        self._flushes = 0
        self._flush_lat: deque[float] = deque(maxlen=_LATENCY_SAMPLES)
        self._last_batch = 0
        self._rolls = 0
        self._report: RecoveryReport | None = None

    # -- lifecycle ----------------------------------------------------------------------

    async def open(self) -> RecoveryReport:
        """Recover the journals, rebuild missing indexes, preallocate; start the flusher.

        All file work runs in a worker thread.

        Raises:
            JournalSequenceGap: a journal is missing between two others.
            OSError: the directories cannot be used.
        """
        if self._state != _NEW:
            raise TxlogError("the transaction log can be opened once")
        opened = await asyncio.to_thread(self._open_files)
        self._report = opened.report
        self._journals = opened.journals
        self._bases = [j.base for j in self._journals]
        self._active = self._journals[-1]
        self._handles[self._active.base] = opened.handle
        if opened.index_fd >= 0:
            self._index_fds[self._active.base] = opened.index_fd
        self._last_seq = self._durable_seq = self._taken_seq = self._active.last_seq
        self._open_seq = self._last_seq
        self._tail_first = self._last_seq + 1
        assert isinstance(self._active.index, IndexBuilder)
        self._builder = self._active.index
        self._active_len = self._pend_off = self._builder.data_len
        self._pubs = opened.publishers
        self._prealloc = opened.preallocated
        self._prealloc_next = opened.next_prealloc
        self._disk_bytes = (
            sum(j.disk_size for j in self._journals) + len(self._prealloc) * self._journal_size
        )
        self._state = _OPEN
        for t in opened.report.truncations:
            self._emit(
                "recovery_truncated",
                {
                    "path": t.path,
                    "offset": t.offset,
                    "bytes_cut": t.bytes_cut,
                    "reason": t.reason,
                    "first_seq_cut": t.first_seq_cut,
                    "saved_to": t.saved_to,
                },
            )
        self._flusher = asyncio.get_running_loop().create_task(
            self._flush_loop(), name="txlog-flusher"
        )
        log.info(
            "transaction log %s open: seqs %d..%d in %d journals, recovery %.3fs",
            self.instance, self.first_seq, self._last_seq, len(self._journals),
            opened.report.duration_s,
        )  # fmt: skip
        return opened.report

    def _open_files(self) -> _Opened:
        """Recovery and the active journal's files (worker thread)."""
        self._dir.mkdir(parents=True, exist_ok=True)
        self._archive_dir.mkdir(parents=True, exist_ok=True)
        rec = recover(
            self._dir, self._archive_dir, self.instance, apply=True,
            journal_size=self._journal_size, seam=self._seam, block_bytes=self._block_bytes,
        )  # fmt: skip
        journals = [
            Journal(
                r.base,
                r.path,
                r.index,
                compression=r.compression,
                archived=r.archived,
                source=r.source,
                disk_size=r.size,
                finished=not r.active,
            )
            for r in rec.journals
        ]
        try:
            return self._open_active(rec, journals)
        except BaseException:
            for j in journals:  # nothing is left open behind a failed open()
                if j.source is not None:
                    j.source.retire()
                if isinstance(j.index, SealedIndex):
                    j.index.close()
            raise

    def _open_active(self, rec: Recovery, journals: list[Journal]) -> _Opened:
        """Open (or create) the journal appends go to; preallocate (worker thread)."""
        prealloc = list(rec.preallocated)
        if journals and not journals[-1].finished:
            active = journals[-1]
            handle = self._seam.open(active.path, create=False)
            handle.allocate(self._journal_size)
            active.disk_size = max(self._journal_size, active.index.data_len)
        else:
            base = journals[-1].last_seq + 1 if journals else 1
            active = Journal(
                base, self._dir / journal_name(self.instance, base), IndexBuilder(base, self._block_bytes),
                prealloc=prealloc.pop(0) if prealloc else None, created=False,
            )  # fmt: skip
            handle = self._create_journal(active)
            active.source = PlainSource(active.path)
            active.created = True
            active.disk_size = self._journal_size
            write_atomic(
                self._dir / index_name(self.instance, base),
                encode_open_header(base, self._block_bytes),
                durable=False,
            )
            journals.append(active)
            fsync_dir(self._dir)
        index_fd = self._open_index_fd(active.base)
        prealloc, number = self._fix_preallocation(prealloc, rec.next_prealloc_number, journals)
        return _Opened(rec.report, journals, rec.publishers, prealloc, number, handle, index_fd)

    def _fix_preallocation(
        self, existing: list[Path], number: int, journals: list[Journal]
    ) -> tuple[list[Path], int]:
        """Keep ``PreallocatedJournalFiles`` files of ``JournalSize`` ready (worker thread)."""
        want = self.config.preallocated_files
        keep: list[Path] = []
        for path in existing:
            if len(keep) >= want or path.stat().st_size > self._journal_size:
                path.unlink()
                continue
            keep.append(path)
        for path in keep:
            handle = self._seam.open(path, create=False)
            try:
                handle.allocate(self._journal_size)
            finally:
                handle.close()
        used = sum(j.disk_size for j in journals) + len(keep) * self._journal_size
        while len(keep) < want and self._fits(used + self._journal_size):
            path = self._dir / prealloc_name(self.instance, number)
            number += 1
            self._allocate_file(path)
            keep.append(path)
            used += self._journal_size
        fsync_dir(self._dir)
        return keep, number

    def _fits(self, total: int) -> bool:
        limit = self.config.max_size
        return not limit or total <= limit

    def _allocate_file(self, path: Path) -> None:
        handle = self._seam.open(path, create=True)
        try:
            handle.allocate(self._journal_size)
            handle.fsync()
        finally:
            handle.close()

    async def close(self) -> None:
        """Flush and fsync everything appended, write the caches, close the files.

        Appends are refused from the first step on. Idempotent.
        """
        if self._state in (_NEW, _CLOSED, _CLOSING):
            if self._state == _NEW:
                self._state = _CLOSED
            elif self._state == _CLOSING:
                await self._closed_event.wait()
            return
        # 1. refuse appends
        self._state = _CLOSING
        active = self._active
        # 2. close the partial index block: the next open then has nothing to scan
        entry = self._builder.close_block()
        if entry:
            self._pend_index.append((active, entry))
        # 3. final group commit; the flusher exits once nothing is pending
        self._wake.set()
        if self._flusher is not None:
            await self._flusher
        await self._wait_caches()
        # 4. clients.ack as of the durable position, then close every file
        snapshot = dict(self._pubs) if self._werr is None else None
        await asyncio.to_thread(self._close_files, snapshot, self._durable_seq)
        # 5. wake whoever still waits
        self._state = _CLOSED
        self._fail_waiters(self._werr or TxlogClosed("the transaction log is closed"))
        self._closed_event.set()

    async def abort(self) -> None:
        """Stop as a crash would: drop what is not durable yet, write no cache, close.

        A group commit already in its thread completes (its bytes are on their way to
        the disk either way); appends not yet handed to the flusher are lost, as they
        would be in a crash, and their :meth:`wait_durable` callers get
        :class:`TxlogClosed`. Used after a fatal error, and by tests to leave the files
        exactly as a crash at a group-commit boundary would.
        """
        if self._state in (_NEW, _CLOSED, _CLOSING):
            await self.close()
            return
        self._state = _CLOSING
        self._pend_chunks, self._pend_index, self._pend_finished = [], [], []
        self._pend_buf = bytearray()
        self._wake.set()
        if self._flusher is not None:
            await self._flusher
        await self._wait_caches()
        await asyncio.to_thread(self._close_files, None, self._durable_seq)
        self._state = _CLOSED
        self._fail_waiters(self._werr or TxlogClosed("the transaction log was aborted"))
        self._closed_event.set()

    def _close_files(self, publishers: dict[int, tuple[int, int]] | None, covered: int) -> None:
        if publishers is not None:
            try:
                write_atomic(
                    self._dir / clients_ack_name(self.instance),
                    encode_clients_ack(covered, publishers),
                )
            except OSError as exc:
                log.warning("could not write %s: %s", clients_ack_name(self.instance), exc)
        for handle in self._handles.values():
            with contextlib.suppress(OSError):
                handle.close()
        self._handles.clear()
        for fd in self._index_fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self._index_fds.clear()
        for j in self._journals:
            if j.source is not None:
                j.source.retire()
            if isinstance(j.index, SealedIndex):
                j.index.close()

    # -- properties ---------------------------------------------------------------------

    @property
    def last_seq(self) -> int:
        """Highest seq appended."""
        return self._last_seq

    @property
    def durable_seq(self) -> int:
        """Highest seq written and fsynced."""
        return self._durable_seq

    @property
    def first_seq(self) -> int:
        """Oldest seq still available locally (``last_seq + 1`` when the log is empty)."""
        return self._journals[0].base if self._journals else self._last_seq + 1

    @property
    def write_error(self) -> TxlogWriteFailed | None:
        """The latched write failure, if any."""
        return self._werr

    @property
    def recovery_report(self) -> RecoveryReport | None:
        """What :meth:`open` found."""
        return self._report

    # -- append -------------------------------------------------------------------------

    def append(
        self,
        *,
        topic: str,
        message_type: str,
        pub_hash: int,
        pub_seq: int,
        body: bytes,
        kind: RecordKind = RecordKind.PUBLISH,
        path: tuple[str, ...] = (),
        flags: int = 0,
        corr_id: str = "",
        sow_key: str = "",
        timestamp_us: int | None = None,
    ) -> Record:
        """Append one record (event loop; no I/O). It becomes durable at a later flush.

        ``pub_hash`` 0 means "no publisher identity" (e.g. queue events): such records
        are not indexed by bookmark and do not count as a publisher's last message.

        Raises:
            TxlogClosed: the log is not open.
            TxlogWriteFailed: a previous write failed (latched until reopened).
            TxlogFull: rolling to a new journal would exceed TransactionLog/MaxSize.
            PublisherSequenceRegression: ``pub_seq`` not above the publisher's last.
            RecordTooLarge, FieldOutOfRange: the record does not fit the format.
        """
        if self._state != _OPEN:
            raise TxlogClosed("the transaction log is not open")
        if self._werr is not None:
            raise self._werr
        pubs = self._pubs
        if pub_hash:
            prev = pubs.get(pub_hash)
            if prev is not None and pub_seq <= prev[0]:
                raise PublisherSequenceRegression(pub_hash, pub_seq, prev[0])
        if type(kind) is not RecordKind:
            kind = RecordKind(kind)
        seq = self._last_seq + 1
        ts = self._last_ts = time_us(self._clock) if timestamp_us is None else timestamp_us
        fields = (
            seq, ts, pub_hash, pub_seq, topic, message_type, kind, path, flags, body, corr_id,
            sow_key,
        )  # fmt: skip
        data = encode(*fields)
        self._place([data], ts, pub_hash, [pub_seq])
        return make_record(*fields)

    def append_many(
        self,
        *,
        topic: str,
        message_type: str,
        pub_hash: int,
        pub_seqs: list[int],
        bodies: list[bytes],
        corr_ids: list[str] | None = None,
        sow_keys: list[str] | None = None,
    ) -> int:
        """Append a run of publish records of one publisher to one topic (event loop).

        The publish hot path: a publisher's frame usually carries many messages to one
        topic, and doing the per-append bookkeeping (state checks, clock, flusher wake-up,
        waiter release, publisher table) once per run instead of once per record is what
        makes batching pay. Every record gets the same timestamp (they arrived together).
        No :class:`Record` objects are built; record ``i`` has seq
        ``last_seq - n + 1 + i`` and bookmark ``pub_hash|pub_seqs[i]|``.

        Returns:
            How many records were appended, from the first. Fewer than given when one
            cannot be (a sequence not above the previous one, a record too large, a roll
            that would exceed MaxSize, a closed or failed log): :meth:`append` of that
            record then raises the reason, so callers fall back to it.
        """
        n = len(bodies)
        if self._state != _OPEN or self._werr is not None or not n:
            return 0
        pubs = self._pubs
        prev_seq = -1
        if pub_hash:
            prev = pubs.get(pub_hash)
            if prev is not None:
                prev_seq = prev[0]
        ts = self._last_ts = time_us(self._clock)
        seq = self._last_seq
        # a sequence that does not increase ends the run there (append() says why)
        if pub_hash:
            for i, ps in enumerate(pub_seqs):
                if ps <= prev_seq:
                    n = i
                    break
                prev_seq = ps
        encoded: list[bytes]
        if corr_ids or sow_keys:
            encoded = []
            for i in range(n):
                fields = (
                    seq + 1 + i, ts, pub_hash, pub_seqs[i], topic, message_type,
                    RecordKind.PUBLISH, (), 0, bodies[i],
                    corr_ids[i] if corr_ids else "", sow_keys[i] if sow_keys else "",
                )  # fmt: skip
                try:
                    encoded.append(encode(*fields))
                except Exception:
                    break
        else:
            encoded = encode_run(
                seq + 1, ts, pub_hash, pub_seqs[:n], topic, message_type, bodies[:n]
            )
        try:
            return self._place(encoded, ts, pub_hash, pub_seqs)
        except Exception:
            return 0  # not even the first fitted: append() of it raises the reason

    def _place(self, encoded: list[bytes], ts: int, pub_hash: int, pub_seqs: list[int]) -> int:
        """Put encoded records (consecutive seqs from ``last_seq + 1``) into the active
        journal's pending bytes, index and tail, rolling to a new journal between records
        when one does not fit; then account them once (publisher table, waiters, flusher).

        Returns:
            How many were placed. A roll that fails (``TxlogFull``) ends the run there; it
            is raised only when nothing was placed, so :meth:`append` reports it.
        """
        seq = self._last_seq
        offset = self._active_len
        journal_size = self._journal_size
        add = self._builder.add
        pend_index = self._pend_index
        datas: list[bytes] = []
        keep = datas.append
        done = 0
        for data in encoded:
            size = len(data)
            if offset + size > journal_size and offset:
                # roll between records: this run's bookkeeping first
                self._pend_buf += b"".join(datas)
                self._tail.extend(datas)
                datas.clear()
                self._active_len = offset
                self._last_seq = seq
                try:
                    self._roll(seq + 1)
                except Exception:
                    if not done:
                        raise
                    break
                add = self._builder.add
                offset = 0
            seq += 1
            entry = add(seq, offset, size, ts, pub_hash, pub_seqs[done], data)
            if entry is not None:
                pend_index.append((self._active, entry))
            keep(data)
            offset += size
            done += 1
        if datas:
            self._pend_buf += b"".join(datas)
            self._tail.extend(datas)
        self._active_len = offset
        self._last_seq = seq
        if done:
            if pub_hash:
                self._pubs[pub_hash] = (pub_seqs[done - 1], seq)
            if self._append_waiters and self._append_waiters[0][0] <= seq:
                _release(self._append_waiters, seq)
            self._wake.set()
        return done

    def _roll(self, seq: int) -> None:
        """Finish the active journal; the next one starts at ``seq`` (event loop).

        The files are switched by the flusher thread; here only the bookkeeping.
        """
        old = self._active
        prealloc = self._prealloc.pop(0) if self._prealloc else None
        if prealloc is None and not self._fits(self._disk_bytes + self._journal_size):
            if self._prealloc_busy <= self._prealloc_void:
                raise TxlogFull(
                    f"a new {self._journal_size}-byte journal would exceed MaxSize "
                    f"({self.config.max_size} bytes, {self._disk_bytes} in use)"
                )
            # a preallocation is under way and already counted: this journal takes its
            # room, and the file is deleted when it is done
            self._prealloc_void += 1
            self._disk_bytes -= self._journal_size
        entry = self._builder.close_block()
        if entry:
            self._pend_index.append((old, entry))
        if self._pend_buf:
            self._pend_chunks.append((old, self._pend_off, self._pend_buf))
            self._pend_buf = bytearray()
        old.finished = True
        old.rolling = True
        self._pend_finished.append(old)
        builder = IndexBuilder(seq, self._block_bytes)
        new = Journal(
            seq, self._dir / journal_name(self.instance, seq), builder,
            prealloc=prealloc, created=False, disk_size=self._journal_size,
        )  # fmt: skip
        if prealloc is None:
            self._disk_bytes += self._journal_size
        self._journals.append(new)
        self._bases.append(seq)
        self._active = new
        self._builder = builder
        self._active_len = self._pend_off = 0
        self._rolls += 1

    # -- group commit -------------------------------------------------------------------

    def add_durable_listener(self, cb: Callable[[int], None]) -> None:
        """Call ``cb(durable_seq)`` on the loop after each group commit."""
        self._listeners.append(cb)

    def remove_durable_listener(self, cb: Callable[[int], None]) -> None:
        """Stop calling ``cb``."""
        with contextlib.suppress(ValueError):
            self._listeners.remove(cb)

    async def wait_durable(self, seq: int) -> None:
        """Return once every record up to ``seq`` is fsynced.

        Raises:
            TxlogWriteFailed: the write failed (latched).
            TxlogClosed: the log closed before ``seq`` became durable.
        """
        if seq <= self._durable_seq:
            return
        if self._werr is not None:
            raise self._werr
        if self._state != _OPEN and not (self._state == _CLOSING and seq <= self._last_seq):
            raise TxlogClosed("the transaction log is closed")
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (seq, next(self._waiter_ids), fut))
        await fut

    async def wait_appended(self, seq: int) -> None:
        """Return once a record ``seq`` was appended (for ``live`` subscriptions).

        Raises:
            TxlogClosed: the log closed first.
        """
        if seq <= self._last_seq:
            return
        if self._state != _OPEN:
            raise TxlogClosed("the transaction log is closed")
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._append_waiters, (seq, next(self._waiter_ids), fut))
        await fut

    async def _flush_loop(self) -> None:
        interval = self.config.flush_interval
        clock = self._clock
        while True:
            if not self._has_pending():
                if self._state != _OPEN:
                    return
                self._wake.clear()
                await self._wake.wait()
                continue
            # group commit: at most one fsync per FlushInterval, unless a lot is pending
            delay = self._last_flush + interval - clock.monotonic()
            if delay > 0 and self._state == _OPEN and len(self._pend_buf) < FLUSH_HIGH_WATER:
                await clock.sleep(delay)
            self._wake.clear()
            if not self._has_pending():
                continue  # dropped by abort() while we waited
            batch = self._take_batch()
            self._last_flush = clock.monotonic()
            try:
                written = await asyncio.to_thread(self._write_batch, batch)
            except TxlogWriteFailed as exc:
                self._latch(exc)
                return
            except Exception as exc:  # anything else from the thread is a write failure too
                self._latch(TxlogWriteFailed(str(self._dir), "write", exc))
                return
            self._apply_written(batch, written)
            self._queue_caches(batch)

    def _queue_caches(self, batch: _Batch) -> None:
        """Hand a committed batch's cache work to the cache task (started on demand).

        Index entries, sealed indexes, ``clients.ack`` and the preallocation of the next
        journal are not on the durability path: doing them in the flusher made every
        ack of a group commit that closed a journal wait for a sealed index to be built
        and written (several fsyncs), and the next group commit wait for a 64 MB
        preallocation. They run in their own task, in commit order.
        """
        self._cache_queue.append(batch)
        if self._cache_task is None or self._cache_task.done():
            self._cache_task = asyncio.get_running_loop().create_task(self._cache_loop())

    async def _cache_loop(self) -> None:
        while self._cache_queue:
            batch = self._cache_queue.popleft()
            out = _Written()
            try:
                await asyncio.to_thread(self._write_caches, batch, out)
            except Exception as exc:  # caches are rebuildable: report, never latch
                out.cache_errors.append(f"cache writer: {exc!r}")
            for j, sealed in out.sealed:
                j.index = sealed
            self._report_cache_errors(out)
            if self._state == _OPEN:
                await self._replenish()

    async def _wait_caches(self) -> None:
        """Until the cache task has done everything queued (close and abort)."""
        task = self._cache_task
        if task is not None and not task.done():
            await task

    def _has_pending(self) -> bool:
        return bool(self._pend_buf or self._pend_chunks or self._pend_index or self._pend_finished)

    def _take_batch(self) -> _Batch:
        chunks = self._pend_chunks
        if self._pend_buf:
            chunks.append((self._active, self._pend_off, self._pend_buf))
            self._pend_buf = bytearray()
            self._pend_off = self._active_len
        nbytes = sum(len(c[2]) for c in chunks)
        clients = (self._last_seq, dict(self._pubs)) if self._pend_finished else None
        batch = _Batch(
            chunks, self._pend_index, self._pend_finished, self._last_seq,
            self._last_seq - self._taken_seq, nbytes, clients,
        )  # fmt: skip
        self._pend_chunks = []
        self._pend_index = []
        self._pend_finished = []
        self._taken_seq = self._last_seq
        self._appended_bytes += nbytes
        if nbytes:
            self._tail_batches.append((self._last_seq, nbytes))
            self._tail_bytes += nbytes
        return batch

    def _write_batch(self, batch: _Batch) -> _Written:
        """Write and fsync one batch (flusher thread), then update the caches.

        Order matters for recovery: a finished journal is truncated and fsynced before
        any byte of the next one is written, so a durable record in journal N+1 implies
        journal N is complete; a new file's directory entry is fsynced before the batch
        counts as durable.
        """
        out = _Written()
        finished = {id(j) for j in batch.finished}
        dirty: dict[int, tuple[Journal, JournalHandle]] = {}
        new_files = False
        fsync_time = 0.0
        by_journal: dict[int, Journal] = {j.base: j for j in batch.finished}
        for j, _, _ in batch.chunks:
            by_journal[j.base] = j
        for base in sorted(by_journal):  # log order
            j = by_journal[base]
            handle = self._handles.get(base)
            if handle is None:
                handle = self._create_journal(j)
                self._handles[base] = handle
                try:
                    out.sources.append((j, PlainSource(j.path)))
                except OSError as exc:
                    raise TxlogWriteFailed(str(j.path), "open", exc) from exc
                new_files = True
                self._index_fds[base] = self._new_index_file(base, out)
            for cj, offset, data in batch.chunks:
                if cj is j:
                    try:
                        handle.write(offset, data)
                    except OSError as exc:
                        raise TxlogWriteFailed(str(j.path), "write", exc) from exc
            if id(j) not in finished:
                dirty[base] = (j, handle)
                continue
            t0 = time.perf_counter()
            try:
                handle.truncate(j.index.data_len)
                handle.fsync()
            except OSError as exc:
                raise TxlogWriteFailed(str(j.path), "fsync", exc) from exc
            fsync_time += time.perf_counter() - t0
            del self._handles[base]
            with contextlib.suppress(OSError):
                handle.close()
        t0 = time.perf_counter()
        for j, handle in dirty.values():
            try:
                handle.fsync()
            except OSError as exc:
                raise TxlogWriteFailed(str(j.path), "fsync", exc) from exc
        if new_files:
            try:
                fsync_dir(self._dir)
            except OSError as exc:
                raise TxlogWriteFailed(str(self._dir), "fsync", exc) from exc
        out.fsync_s = fsync_time + time.perf_counter() - t0
        return out

    def _write_caches(self, batch: _Batch, out: _Written) -> None:
        """After a group commit (cache thread): index entries, seals, ``clients.ack``.

        Failures are reported, not latched: every cache can be rebuilt from the journals.
        """
        self._write_index_entries(batch, out)
        for j in batch.finished:
            self._seal(j, out)
        if batch.clients is not None:
            covered, table = batch.clients
            try:
                write_atomic(
                    self._dir / clients_ack_name(self.instance), encode_clients_ack(covered, table)
                )
            except OSError as exc:
                out.cache_errors.append(f"{clients_ack_name(self.instance)}: {exc}")

    def _create_journal(self, j: Journal) -> JournalHandle:
        """Create ``j``'s file: rename a preallocated file, or create and allocate one."""
        try:
            if j.prealloc is not None:
                self._seam.rename(j.prealloc, j.path)
                return self._seam.open(j.path, create=False)
            handle = self._seam.open(j.path, create=True)
            handle.allocate(self._journal_size)
            return handle
        except OSError as exc:
            raise TxlogWriteFailed(str(j.path), "open", exc) from exc

    def _open_index_fd(self, base: int) -> int:
        try:
            return os.open(
                self._dir / index_name(self.instance, base),
                os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC,
            )
        except OSError as exc:
            log.warning("index of journal %d cannot be appended: %s", base, exc)
            return -1

    def _new_index_file(self, base: int, out: _Written) -> int:
        path = self._dir / index_name(self.instance, base)
        try:
            write_atomic(path, encode_open_header(base, self._block_bytes), durable=False)
        except OSError as exc:
            out.cache_errors.append(f"{path}: {exc}")
            return -1
        return self._open_index_fd(base)

    def _write_index_entries(self, batch: _Batch, out: _Written) -> None:
        for j, entry in batch.index_entries:
            fd = self._index_fds.get(j.base, -1)
            if fd < 0:
                continue
            try:
                os.write(fd, entry)
            except OSError as exc:
                out.cache_errors.append(f"index of journal {j.base}: {exc}")
                with contextlib.suppress(OSError):
                    os.close(fd)
                self._index_fds[j.base] = -1

    def _seal(self, j: Journal, out: _Written) -> None:
        fd = self._index_fds.pop(j.base, -1)
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)
        builder = j.index
        if not isinstance(builder, IndexBuilder):
            return
        path = self._dir / index_name(self.instance, j.base)
        try:
            write_atomic(path, builder.seal())
        except OSError as exc:
            out.cache_errors.append(f"{path}: {exc}")
            return
        sealed = SealedIndex.load(path, j.base)
        if sealed is None:
            out.cache_errors.append(f"{path}: sealed index does not read back")
            return
        out.sealed.append((j, sealed))

    def _apply_written(self, batch: _Batch, written: _Written) -> None:
        """Back on the loop after a group commit: advance, notify, account."""
        for j, source in written.sources:
            j.source = source
            j.created = True
        for j, offset, data in batch.chunks:
            j.durable_len = max(j.durable_len, offset + len(data))
        for j in batch.finished:
            j.durable_len = j.index.data_len
            j.rolling = False
            self._disk_bytes += j.index.data_len - j.disk_size
            j.disk_size = j.index.data_len
        self._durable_seq = batch.last_seq
        self._flushes += 1
        self._flush_lat.append(written.fsync_s)
        self._last_batch = batch.records
        for j in batch.finished:
            nxt = (
                self._bases[bisect.bisect_right(self._bases, j.base)]
                if j is not self._active
                else 0
            )
            self._emit(
                "journal_rolled",
                {"journal": j.base, "path": str(j.path), "records": j.count,
                 "bytes": j.index.data_len, "next": nxt},
            )  # fmt: skip
        self._report_cache_errors(written)
        self._evict_tail()
        durable = self._durable_seq
        for cb in list(self._listeners):
            try:
                cb(durable)
            except Exception:
                log.exception("durable listener failed")
        _release(self._waiters, durable)

    def _report_cache_errors(self, written: _Written) -> None:
        for problem in written.cache_errors:
            log.warning("transaction log cache not written: %s", problem)
            self._emit("cache_write_failed", {"problem": problem})

    def _latch(self, exc: TxlogWriteFailed) -> None:
        self._werr = exc
        log.error("transaction log write failed, refusing appends until reopened: %s", exc)
        self._emit(
            "flush_failed",
            {"path": exc.path, "operation": exc.operation, "error": str(exc.cause),
             "durable_seq": self._durable_seq, "last_seq": self._last_seq},
        )  # fmt: skip
        self._fail_waiters(exc)

    def _fail_waiters(self, exc: Exception) -> None:
        waiters = self._waiters + self._append_waiters  # no append can come any more
        self._waiters, self._append_waiters = [], []
        for _, _, fut in waiters:
            if not fut.done():
                fut.set_exception(exc)

    async def _replenish(self) -> None:
        """Bring preallocated files back to PreallocatedJournalFiles after rolls."""
        want = self.config.preallocated_files
        while len(self._prealloc) < want and self._fits(self._disk_bytes + self._journal_size):
            path = self._dir / prealloc_name(self.instance, self._prealloc_next)
            self._prealloc_next += 1
            self._disk_bytes += self._journal_size
            self._prealloc_busy += 1
            try:
                await asyncio.to_thread(self._allocate_file, path)
            except OSError as exc:
                if self._prealloc_void:
                    self._prealloc_void -= 1  # its room already went to a journal
                else:
                    self._disk_bytes -= self._journal_size
                log.warning("could not preallocate %s: %s", path, exc)
                self._emit("cache_write_failed", {"problem": f"{path}: {exc}"})
                with contextlib.suppress(OSError):
                    path.unlink()
                return
            finally:
                self._prealloc_busy -= 1
            if self._prealloc_void:
                # a roll took this file's room while it was being made (see _roll)
                self._prealloc_void -= 1
                with contextlib.suppress(OSError):
                    await asyncio.to_thread(path.unlink)
                continue
            self._prealloc.append(path)

    def _emit(self, name: str, fields: dict[str, object]) -> None:
        if self._on_event is not None:
            try:
                self._on_event(name, fields)
            except Exception:
                log.exception("transaction log event callback failed")

    # -- tail cache ---------------------------------------------------------------------

    def _evict_tail(self) -> None:
        """Drop the oldest durable batches of records beyond the tail budget."""
        budget = self._tail_budget
        durable = self._durable_seq
        batches = self._tail_batches
        head = self._tail_head
        first = self._tail_first
        while self._tail_bytes > budget and batches and batches[0][0] <= durable:
            last, nbytes = batches.popleft()
            self._tail_bytes -= nbytes
            head += last - first + 1
            first = last + 1
        if head > 4096 and head * 2 > len(self._tail):
            del self._tail[:head]
            head = 0
        self._tail_head = head
        self._tail_first = first

    def _tail_read(
        self, from_seq: int, upto: int, max_count: int, max_bytes: int, as_batch: bool
    ) -> list[Record] | RecordBatch:
        """Decode records ``from_seq..upto`` from the tail cache (no I/O)."""
        i = self._tail_head + from_seq - self._tail_first
        j = min(i + max_count, self._tail_head + upto - self._tail_first + 1)
        parts = self._tail[i:j]
        buf = b"".join(parts)
        if as_batch:
            # encoded here and never written back: the bytes need no CRC check
            batch, _ = decode_batch(
                buf, 0, len(buf), from_seq, max_count=len(parts), max_bytes=max_bytes,
                trusted=(0, len(buf)),
            )  # fmt: skip
            return batch
        records, _ = decode_records(
            buf, 0, len(buf), from_seq, max_count=len(parts), max_bytes=max_bytes
        )
        return records

    # -- reading ------------------------------------------------------------------------

    async def read_batch(
        self,
        from_seq: int,
        *,
        max_count: int = 1000,
        max_bytes: int = 1 << 20,
        upto_seq: int | None = None,
    ) -> list[Record]:
        """Durable records from ``from_seq`` (clamped to :attr:`first_seq`), in order.

        Returns at most ``max_count`` records and stops once about ``max_bytes`` were
        taken (at least one record when any is available), at ``upto_seq`` and at the end
        of a journal (call again to continue). Empty when nothing durable is there yet.

        Raises:
            CorruptRecord: a journal's bytes are damaged at the position read.
        """
        records, _ = await self._read(from_seq, max_count, max_bytes, upto_seq, False, None)
        assert isinstance(records, list)
        return records

    async def read_appended(
        self,
        from_seq: int,
        *,
        max_count: int = 1000,
        max_bytes: int = 1 << 20,
        upto_seq: int | None = None,
    ) -> list[Record]:
        """Like :meth:`read_batch`, but past the durable point too (``live`` subscriptions).

        Records not yet fsynced are always in the in-memory tail (eviction drops only
        durable ones), so this never reads a file for them.
        """
        if from_seq <= self._durable_seq:
            return await self.read_batch(
                from_seq, max_count=max_count, max_bytes=max_bytes, upto_seq=upto_seq
            )
        if self._state == _NEW or self._state == _CLOSED:
            raise TxlogClosed("the transaction log is not open")
        limit = self._last_seq if upto_seq is None else min(upto_seq, self._last_seq)
        if from_seq > limit or max_count <= 0:
            return []
        records = self._tail_read(from_seq, limit, max_count, max_bytes, False)
        assert isinstance(records, list)
        return records

    async def read_view(
        self,
        from_seq: int,
        *,
        max_count: int = 1000,
        max_bytes: int = 1 << 20,
        upto_seq: int | None = None,
    ) -> RecordBatch:
        """Like :meth:`read_batch`, as a :class:`RecordBatch` (columns; fastest to replay)."""
        batch, _ = await self._read(from_seq, max_count, max_bytes, upto_seq, True, None)
        assert isinstance(batch, RecordBatch)
        return batch

    async def _read(
        self,
        from_seq: int,
        max_count: int,
        max_bytes: int,
        upto_seq: int | None,
        as_batch: bool,
        hint: tuple[Journal, int, int] | None,
    ) -> tuple[list[Record] | RecordBatch, tuple[Journal, int, int] | None]:
        """Read; ``hint`` and the returned position are ``(journal, offset, seq)``."""
        if self._state == _NEW or self._state == _CLOSED:
            raise TxlogClosed("the transaction log is not open")
        limit = self._durable_seq if upto_seq is None else min(upto_seq, self._durable_seq)
        from_seq = max(from_seq, self.first_seq)
        if from_seq > limit or max_count <= 0:
            return (RecordBatch.empty() if as_batch else []), hint
        if from_seq >= self._tail_first:
            return self._tail_read(from_seq, limit, max_count, max_bytes, as_batch), None
        for _attempt in range(3):
            j = self._journal_for(from_seq)
            if hint is not None and hint[0] is j and hint[2] == from_seq:
                offset, seq = hint[1], hint[2]
            else:
                span = j.index.span_for_seq(from_seq)
                assert span is not None
                offset, seq = span.offset, span.seq
            source = j.source
            assert source is not None
            end = j.durable_len
            upto = min(limit, j.last_seq, self._tail_first - 1)
            source.acquire()
            try:
                result, next_off, next_seq = await asyncio.to_thread(
                    read_span, source, offset, seq, end, from_seq, max_count=max_count,
                    max_bytes=max_bytes, upto_seq=upto, as_batch=as_batch, index=j.index,
                )  # fmt: skip
            except FileNotFoundError:
                hint = None  # archived or compressed meanwhile: look it up again
                continue
            finally:
                source.release()
            return result, (j, next_off, next_seq)
        raise TxlogError(f"journal holding seq {from_seq} keeps moving")

    def _journal_for(self, seq: int) -> Journal:
        i = bisect.bisect_right(self._bases, seq) - 1
        return self._journals[max(i, 0)]

    def cursor(
        self,
        from_seq: int,
        *,
        upto_seq: int | None = None,
        follow: bool = False,
        max_count: int = 1000,
        max_bytes: int = 1 << 20,
        owner: str | None = None,
    ) -> LogCursor:
        """An async iterator of :class:`RecordBatch` from ``from_seq``.

        The cursor pins the log at its position (releases on :meth:`LogCursor.close`).

        Args:
            from_seq: first seq wanted (clamped to :attr:`first_seq`).
            upto_seq: stop after this seq.
            follow: at the durable end, wait for more instead of stopping.
            max_count: records per batch at most.
            max_bytes: about this many bytes per batch at most.
            owner: name of the pin holder (shown by :meth:`pins`).
        """
        return LogCursor(
            self, from_seq, upto_seq=upto_seq, follow=follow, max_count=max_count,
            max_bytes=max_bytes, owner=owner,
        )  # fmt: skip

    # -- lookups ------------------------------------------------------------------------

    @property
    def last_timestamp_us(self) -> int:
        """Timestamp of the last appended record (0 before the first append here)."""
        return self._last_ts

    def publisher_last(self, pub_hash: int) -> int:
        """Highest ``pub_seq`` appended by that publisher (0 if none); survives restarts."""
        last = self._pubs.get(pub_hash)
        return last[0] if last is not None else 0

    def publisher_last_bookmark(self, pub_hash: int) -> str | None:
        """Bookmark ``PUBHASH|PUBSEQ|`` of that publisher's last message, if any."""
        last = self._pubs.get(pub_hash)
        return f"{pub_hash}|{last[0]}|" if last is not None else None

    def lookups_need_io(self, bookmarks: list[tuple[int, int]], times: list[int]) -> bool:
        """Whether any of these lookups would read a file (else memory answers them all)."""
        for h, s in bookmarks:
            plan = self._plan_bookmark(h, s)
            if isinstance(plan, SpanQuery) and plan.span.seq < self._tail_first:
                return True
        for t in times:
            tplan = self._plan_time(t)
            if isinstance(tplan, SpanQuery) and tplan.span.seq < self._tail_first:
                return True
        return False

    async def locate_all(self, bookmarks: list[tuple[int, int]], times: list[int]) -> Located:
        """Resolve lookups with any file read in a worker thread, for :meth:`using`."""
        found = Located()
        for h, s in bookmarks:
            found.bookmarks[(h, s)] = await self.locate_bookmark(h, s)
        for t in times:
            found.times[t] = await self.locate_time(t)
        return found

    @contextlib.contextmanager
    def using(self, located: Located | None) -> Iterator[None]:
        """Within the block, the lookups in ``located`` answer from it (no file read).

        Planning a replay is synchronous; the broker resolves its lookups first with
        :meth:`locate_all` (off the loop) and plans inside this block. Nothing awaits
        inside it, so the answers cannot go stale.
        """
        self._located = located
        try:
            yield
        finally:
            self._located = None

    def seq_for_bookmark(self, pub_hash: int, pub_seq: int) -> int | None:
        """Local seq of the message with that bookmark; None if unknown or removed.

        A binary search to one index block, then that block's records: from memory when
        recent, else one read of at most a few KB (a chunk decompression for compressed
        journals). :meth:`locate_bookmark` does the read in a thread.
        """
        located = self._located
        if located is not None and (pub_hash, pub_seq) in located.bookmarks:
            return located.bookmarks[(pub_hash, pub_seq)]
        plan = self._plan_bookmark(pub_hash, pub_seq)
        if not isinstance(plan, SpanQuery):
            return plan
        return self._resolve(plan, self._span_bytes(plan))

    async def locate_bookmark(self, pub_hash: int, pub_seq: int) -> int | None:
        """:meth:`seq_for_bookmark` with any file read done in a worker thread."""
        plan = self._plan_bookmark(pub_hash, pub_seq)
        if not isinstance(plan, SpanQuery):
            return plan
        return self._resolve(plan, await self._span_bytes_async(plan))

    def seq_for_time(self, timestamp_us: int) -> int:
        """First seq recorded at or after ``timestamp_us``; ``last_seq + 1`` if none.

        A time before the log's start gives :attr:`first_seq`. Exact even if recorded
        times went backwards (lookups use each journal's running maximum).
        """
        located = self._located
        if located is not None and timestamp_us in located.times:
            return located.times[timestamp_us]
        plan = self._plan_time(timestamp_us)
        if not isinstance(plan, SpanQuery):
            return plan
        found = self._resolve(plan, self._span_bytes(plan))
        return found if found is not None else self._last_seq + 1

    async def locate_time(self, timestamp_us: int) -> int:
        """:meth:`seq_for_time` with any file read done in a worker thread."""
        plan = self._plan_time(timestamp_us)
        if not isinstance(plan, SpanQuery):
            return plan
        found = self._resolve(plan, await self._span_bytes_async(plan))
        return found if found is not None else self._last_seq + 1

    def _plan_bookmark(self, pub_hash: int, pub_seq: int) -> int | SpanQuery | None:
        last = self._pubs.get(pub_hash)
        if not pub_hash or last is None or pub_seq > last[0]:
            return None
        if pub_seq == last[0]:
            return last[1] if last[1] >= self.first_seq else None
        return plan_bookmark(self._journals, pub_hash, pub_seq)

    def _plan_time(self, ts: int) -> int | SpanQuery:
        plan = plan_time(self._journals, ts)
        return self._last_seq + 1 if plan is None else plan

    def _span_bytes(self, q: SpanQuery) -> bytes:
        if q.span.seq >= self._tail_first:
            return b""
        source = q.journal.source
        assert source is not None
        return source.read(q.span.offset, min(q.span.length, q.journal.durable_len - q.span.offset))

    async def _span_bytes_async(self, q: SpanQuery) -> bytes:
        if q.span.seq >= self._tail_first:
            return b""
        source = q.journal.source
        assert source is not None
        length = min(q.span.length, q.journal.durable_len - q.span.offset)
        source.acquire()
        try:
            return await asyncio.to_thread(source.read, q.span.offset, length)
        finally:
            source.release()

    def _resolve(self, q: SpanQuery, buf: bytes) -> int | None:
        """The matching seq within the span: file bytes first, then the tail cache."""
        match, seq = search_span(q, buf, self._tail_first)
        if match is not None:
            return match.seq
        seq = max(seq, self._tail_first)
        stop = q.span.seq + q.span.count
        while seq < stop:
            h = HEADER.unpack_from(self._tail[self._tail_head + seq - self._tail_first])
            if q.matches(h[5], h[6], h[7]):
                return seq
            seq += 1
        return None

    # -- retention ----------------------------------------------------------------------

    def pin(self, owner: str, seq: int) -> Pin:
        """Hold every record from ``seq`` on (replays, queues, replication destinations)."""
        return self._pins.pin(owner, seq)

    def pins(self) -> list[PinInfo]:
        """The live pins, oldest first."""
        return self._pins.list()

    def journals(self) -> list[JournalInfo]:
        """Every journal, oldest first, then the preallocated files."""
        low = self._pins.lowest()
        out: list[JournalInfo] = []
        for j in self._journals:
            state: JournalState
            if j is self._active:
                state = "active"
            elif j.archived:
                state = "archived"
            elif j.compression:
                state = "compressed"
            else:
                state = "closed"
            pinned = low.owner if low is not None and low.seq <= j.last_seq and j.count else None
            out.append(j.info(state, pinned))
        for path in self._prealloc:
            out.append(
                JournalInfo(0, str(path), "preallocated", self._journal_size, 0, None, 0, 0, -1,
                            None, None, None, None)
            )  # fmt: skip
        return out

    def _targets(self, journal_id: int) -> list[Journal]:
        """That journal and every older one, checked for the active journal and pins."""
        self._check_open()
        if journal_id not in self._bases:
            raise JournalNotFound(journal_id)
        targets = [j for j in self._journals if j.base <= journal_id]
        if any(j is self._active for j in targets):
            raise JournalActive(journal_id)
        newest = max(j.last_seq for j in targets)
        holder = self._pins.holder_at_or_below(newest)
        if holder is not None:
            raise JournalPinned(journal_id, holder.owner, holder.seq)
        return targets

    def _check_open(self) -> None:
        if self._state != _OPEN:
            raise TxlogClosed("the transaction log is not open")

    async def _settled_targets(self, journal_id: int) -> list[Journal]:
        """:meth:`_targets`, once the group commit finishing a just-rolled one is done.

        The checks are made again after waiting: a pin may have been taken meanwhile.
        """
        targets = self._targets(journal_id)
        if any(j.rolling for j in targets):
            await self.wait_durable(self._last_seq)
            targets = self._targets(journal_id)
        return targets

    async def archive(self, journal_id: int) -> list[JournalInfo]:
        """Move that journal and all older ones to the archive directory (still readable).

        Raises:
            JournalNotFound, JournalActive, JournalPinned.
        """
        async with self._maint_lock:
            targets = [j for j in await self._settled_targets(journal_id) if not j.archived]
            for j in targets:
                moved = await asyncio.to_thread(self._move_to_archive, j)
                old = j.source
                j.path, j.source, j.archived = moved
                if old is not None:
                    old.retire()
                self._emit("journal_archived", {"journal": j.base, "path": str(j.path)})
            return [j.info("archived", None) for j in targets]

    def _move_to_archive(self, j: Journal) -> tuple[Path, JournalSource, bool]:
        dest = self._archive_dir / j.path.name
        shutil.move(j.path, dest)
        index = j.path.parent / index_name(self.instance, j.base)
        if index.exists():
            shutil.move(index, self._archive_dir / index.name)
        fsync_dir(self._archive_dir)
        fsync_dir(self._dir)
        return dest, open_source(dest, j.compression), True

    async def compress(self, journal_id: int, method: Compression = "zstd") -> list[JournalInfo]:
        """Compress that journal and all older ones (zstd by default); still readable.

        Raises:
            JournalNotFound, JournalActive, JournalPinned.
        """
        async with self._maint_lock:
            targets = [j for j in await self._settled_targets(journal_id) if j.compression is None]
            done: list[JournalInfo] = []
            for j in targets:
                old_path = j.path
                dest = old_path.with_name(journal_name(self.instance, j.base, method))
                size = await asyncio.to_thread(
                    compress_journal, old_path, dest, method, data_len=j.index.data_len
                )
                old = j.source
                j.path, j.compression, j.source = dest, method, open_source(dest, method)
                self._disk_bytes += size - j.disk_size
                j.disk_size = size
                if old is not None:
                    old.retire()
                await asyncio.to_thread(self._unlink_and_sync, [old_path])
                self._emit(
                    "journal_compressed", {"journal": j.base, "path": str(dest), "bytes": size}
                )
                done.append(j.info("archived" if j.archived else "compressed", None))
            return done

    async def remove(self, journal_id: int) -> list[JournalInfo]:
        """Delete that journal and all older ones.

        Raises:
            JournalNotFound, JournalActive, JournalPinned: nothing is removed.
        """
        async with self._maint_lock:
            targets = await self._settled_targets(journal_id)
            infos = [j.info("closed", None) for j in targets]
            n = len(targets)
            del self._journals[:n]
            del self._bases[:n]
            paths: list[Path] = []
            for j in targets:
                self._disk_bytes -= j.disk_size
                if j.source is not None:
                    j.source.retire()
                if isinstance(j.index, SealedIndex):
                    j.index.close()
                paths.append(j.path)
                paths.append(j.path.parent / index_name(self.instance, j.base))
                self._emit("journal_removed", {"journal": j.base, "path": str(j.path)})
            await asyncio.to_thread(self._unlink_and_sync, paths)
            return infos

    def _unlink_and_sync(self, paths: list[Path]) -> None:
        dirs = set()
        for p in paths:
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
                dirs.add(p.parent)
        for d in dirs:
            fsync_dir(d)

    # -- statistics ---------------------------------------------------------------------

    def stats(self) -> dict[str, float]:
        """Counters and gauges for the dashboard and /metrics."""
        lat = sorted(self._flush_lat)

        def pct(q: float) -> float:
            return lat[min(len(lat) - 1, int(q * len(lat)))] * 1000.0 if lat else 0.0

        report = self._report
        return {
            "appended": float(self._last_seq - self._open_seq),
            "appended_bytes": float(self._appended_bytes),
            "last_seq": float(self._last_seq),
            "durable_seq": float(self._durable_seq),
            "first_seq": float(self.first_seq) if self._journals else 0.0,
            "pending_records": float(self._last_seq - self._durable_seq),
            "flushes": float(self._flushes),
            "fsync_p50_ms": pct(0.5),
            "fsync_p99_ms": pct(0.99),
            "last_flush_records": float(self._last_batch),
            "journals": float(len(self._journals)),
            "preallocated": float(len(self._prealloc)),
            "rolls": float(self._rolls),
            "disk_bytes": float(self._disk_bytes),
            "publishers": float(len(self._pubs)),
            "pins": float(len(self._pins.list())),
            "tail_cache_bytes": float(self._tail_bytes),
            "write_failed": 1.0 if self._werr is not None else 0.0,
            "recovery_seconds": report.duration_s if report else 0.0,
            "recovery_truncated_bytes": float(report.bytes_truncated) if report else 0.0,
            "recovery_records": float(report.records_recovered) if report else 0.0,
        }


def _release(waiters: list[tuple[int, int, asyncio.Future[None]]], upto: int) -> None:
    """Wake every waiter (a heap by seq) whose seq is at or below ``upto``."""
    while waiters and waiters[0][0] <= upto:
        _, _, fut = heapq.heappop(waiters)
        if not fut.done():
            fut.set_result(None)
