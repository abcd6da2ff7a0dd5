"""Group commit: appends gathered on the loop, written and fsynced together in a thread.

The log's append path adds encoded records to :class:`Pending` and wakes the flusher. The
flusher (:class:`GroupCommit`) waits out ``FlushInterval`` since the previous commit (or not,
when a lot is pending or the log is closing), takes everything pending as one
:class:`Batch`, and hands it whole to a worker thread that writes and fsyncs it. Back on
the loop the durable position advances, then durable listeners (persisted acks) run and
the callers waiting for a seq to be durable wake, in seq order (:class:`Waiters`).

**A failed write is an outage, not the end.** When a write, fsync, truncate or file
creation fails (a full disk, ``EIO``), nothing of the batch counts as durable and the
batch goes back in front of what is pending (:meth:`Pending.restore`): every record the
log accepted stays in memory, byte for byte. The log refuses appends
(:attr:`GroupCommit.write_error`) and the flusher retries after ``WriteRetryInterval``,
doubling up to 16 times it (:class:`~spool.server.txlog.append.outage.RetryPolicy`), until one attempt
writes and fsyncs everything; then the durable position moves, the waiting acks go out and
appends are taken again.

Why a retry rewrites rather than fsyncs again (the "fsyncgate" lesson, PostgreSQL 2018):
after a failed fsync Linux may have dropped the dirty pages, or marked them clean, and
reports the error once; an fsync after that can succeed although the data never reached
the disk. So a failure closes every journal descriptor, and each retry opens the files
again and writes every byte not known durable (each journal from its durable length), from
memory, before its fsync counts. A record is acknowledged only after an fsync that covered
bytes written *after* the last failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import heapq
import itertools
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from spool.server.clock import Clock, sleep_or_wake
from spool.server.txlog.append.filethread import FileThread
from spool.server.txlog.append.outage import RetryPolicy, WriteOutage
from spool.server.txlog.errors import TxlogWriteFailed
from spool.server.txlog.events import EventCallback
from spool.server.txlog.index.builder import IndexBuilder
from spool.server.txlog.storage.files import FileSeam, JournalHandle, fsync_dir
from spool.server.txlog.storage.journal import Journal, JournalList
from spool.server.txlog.storage.source import JournalSource, PlainSource

__all__ = ["FLUSH_HIGH_WATER", "Batch", "GroupCommit", "Pending", "Waiters", "Written"]

log = logging.getLogger("spool.txlog")

#: flush at once, without waiting for the interval, past this many pending bytes
FLUSH_HIGH_WATER: Final = 4 << 20
_LATENCY_SAMPLES: Final = 2048


@dataclass(slots=True)
class Batch:
    """What one group commit writes: handed whole to the flusher thread.

    Attributes:
        chunks: ``(journal, offset, bytes)`` to write, in log order.
        index_entries: ``(journal, entry)`` index entries of closed blocks (for the caches).
        finished: journals rolled since the previous batch: truncated to their data and
            fsynced, then sealed by the caches.
        last_seq: the last seq in the batch; durable once the batch is applied.
        records: how many records the batch holds.
        nbytes: bytes of records written.
        clients: ``(covered seq, publisher table)`` for ``clients.ack`` when a journal was
            finished, else None.
    """

    chunks: list[tuple[Journal, int, bytearray]]
    index_entries: list[tuple[Journal, bytes]]
    finished: list[Journal]
    last_seq: int
    records: int
    nbytes: int
    clients: tuple[int, dict[int, tuple[int, int]]] | None = None


@dataclass(slots=True)
class Written:
    """What the flusher thread reports back to the loop (made on the loop, filled by the
    thread, read on the loop once the thread is done, whether the batch failed or not).

    Attributes:
        created: journals whose file this batch created, with a reader of it.
        unallocated: journals created without their ``JournalSize`` allocation, and why
            (a disk short of room: the writes extend the file instead).
        fsync_s: seconds spent in fsyncs.
    """

    created: list[tuple[Journal, JournalSource]] = field(default_factory=list)
    unallocated: list[tuple[Path, OSError]] = field(default_factory=list)
    fsync_s: float = 0.0


class Waiters:
    """Futures waiting for a seq to be reached, a heap by seq (event loop only)."""

    __slots__ = ("_heap", "_ids")

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, asyncio.Future[None]]] = []
        self._ids = itertools.count()  # ties broken by arrival

    def due(self, seq: int) -> bool:
        """Whether anyone waits for ``seq`` or an earlier one."""
        heap = self._heap
        return bool(heap) and heap[0][0] <= seq

    def wait(self, seq: int) -> asyncio.Future[None]:
        """A future that resolves once :meth:`release` reaches ``seq``."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._heap, (seq, next(self._ids), fut))
        return fut

    def release(self, upto: int) -> None:
        """Wake every waiter whose seq is at or below ``upto``."""
        heap = self._heap
        while heap and heap[0][0] <= upto:
            _, _, fut = heapq.heappop(heap)
            if not fut.done():
                fut.set_result(None)

    def fail(self, exc: BaseException) -> None:
        """Fail every waiter with ``exc``."""
        heap, self._heap = self._heap, []
        for _, _, fut in heap:
            if not fut.done():
                fut.set_exception(exc)


class Pending:
    """What the loop appended since the flusher last took a batch (event loop only).

    The log's append path adds records a run at a time (:meth:`add`) and rolls journals
    (:meth:`roll`); the flusher takes everything whole (:meth:`take`) and puts back a
    batch it failed to write (:meth:`restore`). Only these methods change the fields;
    other modules read them.

    Invariants (every method keeps them; tests/unit/txlog/test_pending_machine.py checks
    them):

    - ``length == offset + len(buf)``: ``buf`` is the active journal's data bytes
      ``[offset, length)`` not yet taken, and ``length`` is where its data ends.
    - Per journal, the bytes not yet durable are ``chunks`` (in order, each starting
      where the one before it ends) followed, for the active journal, by ``buf``; a
      chunk of a rolled journal always comes before any byte of a later journal.
    - ``taken_seq <= last_seq``, and ``last_seq - taken_seq`` records are pending (their
      bytes are in ``buf``, or in ``chunks`` after a take put them there).
    - ``builder`` is the active journal's index: the entries of its closed blocks that
      are not yet taken are in ``index``, in block order.
    - Each journal in ``finished`` is finished and rolling, and older than the active one.

    :meth:`drop` (a simulated crash) forgets what was not taken and leaves ``taken_seq``
    behind ``last_seq``: the log is not used after it.

    Attributes:
        journals: the log's journals (the newest is the active one).
        publishers: the log's publisher table ``pub_hash -> (pub_seq, seq)`` (shared, not
            copied): a batch that finishes a journal carries a snapshot of it.
        builder: the active journal's index.
        length: data bytes of the active journal appended so far.
        buf: appended bytes of the active journal not yet taken.
        offset: where ``buf`` starts in the active journal.
        chunks: ``(journal, offset, bytes)`` of rolled journals not yet taken.
        index: ``(journal, entry)`` index entries not yet taken.
        finished: journals rolled since the last take.
        last_seq: the last seq appended.
        taken_seq: the last seq handed to the flusher.
    """

    __slots__ = (
        "buf",
        "builder",
        "chunks",
        "finished",
        "index",
        "journals",
        "last_seq",
        "length",
        "offset",
        "publishers",
        "taken_seq",
    )

    def __init__(
        self, journals: JournalList, publishers: dict[int, tuple[int, int]], block_bytes: int
    ) -> None:
        self.journals = journals
        self.publishers = publishers
        self.builder = IndexBuilder(1, block_bytes)  # replaced at open
        self.length = 0
        self.buf = bytearray()
        self.offset = 0
        self.chunks: list[tuple[Journal, int, bytearray]] = []
        self.index: list[tuple[Journal, bytes]] = []
        self.finished: list[Journal] = []
        self.last_seq = 0
        self.taken_seq = 0

    def start(self, active: Journal, builder: IndexBuilder) -> None:
        """Continue appending to ``active`` after its last record (at open)."""
        self.builder = builder
        self.length = self.offset = builder.data_len
        self.last_seq = self.taken_seq = active.last_seq

    @property
    def empty(self) -> bool:
        """Nothing for the flusher to write."""
        return not (self.buf or self.chunks or self.index or self.finished)

    def add(
        self,
        offsets: list[int],
        datas: list[bytes],
        sizes: list[int],
        ts: int,
        key: int,
        pub_seqs: list[int],
    ) -> None:
        """Append a run of encoded records to the active journal, from seq ``last_seq + 1``.

        ``offsets`` are where each record starts in the journal and, last, where the run
        ends (``offsets[0] == length``); ``sizes`` are the records' lengths; ``key`` is the
        index key of all of them (a publisher's, or its late key) and ``pub_seqs`` their
        publisher sequences. The caller checked that the run fits the journal. Index
        entries of the blocks the run closes go into :attr:`index`.
        """
        active = self.journals.active
        index = self.index
        for entry in self.builder.add_run(
            self.last_seq + 1, offsets, datas, sizes, ts, key, pub_seqs
        ):
            index.append((active, entry))
        self.buf += b"".join(datas)
        self.length = offsets[-1]
        self.last_seq += len(datas)

    def take(self) -> Batch:
        """Everything pending, as one batch; pending starts over after it."""
        chunks = self.chunks
        if self.buf:
            chunks.append((self.journals.active, self.offset, self.buf))
            self.buf = bytearray()
            self.offset = self.length
        nbytes = sum(len(c[2]) for c in chunks)
        clients = (self.last_seq, dict(self.publishers)) if self.finished else None
        batch = Batch(
            chunks, self.index, self.finished, self.last_seq, self.last_seq - self.taken_seq,
            nbytes, clients,
        )  # fmt: skip
        self.chunks = []
        self.index = []
        self.finished = []
        self.taken_seq = self.last_seq
        return batch

    def restore(self, batch: Batch) -> None:
        """Put back a batch whose write failed, in front of what was appended since.

        Its chunks keep their offsets and come before any later chunk of the same journal,
        so the next take writes every byte from where the disk's durable data ends.
        """
        self.chunks = batch.chunks + self.chunks
        self.index = batch.index_entries + self.index
        self.finished = batch.finished + self.finished
        self.taken_seq -= batch.records

    def close_block(self) -> None:
        """Close the active journal's partial index block; its entry goes in the next batch."""
        entry = self.builder.close_block()
        if entry:
            self.index.append((self.journals.active, entry))

    def roll(self, new: Journal, builder: IndexBuilder) -> None:
        """Finish the active journal and continue in ``new``, whose index is ``builder``.

        Bookkeeping only: the finished journal's last block and bytes go in the next
        batch, whose commit truncates and fsyncs it before any byte of ``new`` is written
        (the flusher thread switches the files).
        """
        old = self.journals.active
        self.close_block()
        if self.buf:
            self.chunks.append((old, self.offset, self.buf))
            self.buf = bytearray()
        old.finished = True
        old.rolling = True
        self.finished.append(old)
        self.journals.add(new)
        self.builder = builder
        self.length = self.offset = 0

    def drop(self) -> None:
        """Forget what was not taken yet (a crash at a group-commit boundary)."""
        self.chunks, self.index, self.finished = [], [], []
        self.buf = bytearray()


class GroupCommit:
    """The flusher of one log and its durable position (see the module docstring).

    Thread contract: :meth:`_write_batch` runs in a worker thread, one batch at a time
    (the flusher awaits each), and is the only user of the open journal handles while the
    flusher runs; it reads ``Journal.created``, which the loop changes only between two
    batches. :meth:`create_journal` and :meth:`close_files` run in worker threads at open
    and after the flusher ended. Everything else is for the event loop.

    Invariants (the flusher and the methods here keep them; other modules only read the
    fields and tell it about appends through :meth:`placed`):

    - ``durable_seq <= pending.taken_seq <= pending.last_seq``, and ``durable_seq`` only
      moves forward, to the last seq of a batch whose write and fsync succeeded.
    - Nobody waits in ``durable`` for a seq at or below ``durable_seq``, nor in
      ``appended`` for one at or below ``pending.last_seq`` once :meth:`placed` returned.
    - While records are pending and no outage is under way, the flusher is awake or will
      wake (:meth:`placed` sets its event after every append).
    - ``outage`` is set exactly while the last commit attempt failed; ``write_error`` is
      its error, and the log refuses appends meanwhile.

    Args:
        pending: what the append path accumulates.
        directory: the journal directory (fsynced when a batch creates a file).
        seam: the file seam journal writes go through.
        journal_size: ``JournalSize`` (a journal created without a preallocated file is
            allocated to it).
        interval: ``FlushInterval``: at most one commit starts per interval, unless more
            than :data:`FLUSH_HIGH_WATER` bytes are pending.
        clock: time source of the interval and of the retries.
        retry: when to retry after a failed write (``WriteRetryInterval``).
        emit: the log's event callback (``flush_failed``, ``writes_resumed``).
        committed: called on the loop once a batch is durable, before durable listeners
            and waiters run (the log's own accounting: disk, tail, caches, events).
        unallocated: called on the loop for each journal a commit attempt created without
            its allocation (a disk short of room), whether the attempt succeeded or not.
    """

    def __init__(
        self,
        pending: Pending,
        *,
        directory: Path,
        seam: FileSeam,
        journal_size: int,
        interval: float,
        clock: Clock,
        retry: RetryPolicy,
        emit: EventCallback,
        committed: Callable[[Batch, Written], None],
        unallocated: Callable[[Path, OSError], None],
    ) -> None:
        self._pending = pending
        self._dir = directory
        self._seam = seam
        self._journal_size = journal_size
        self._interval = interval
        self._clock = clock
        self._retry = retry
        self._emit = emit
        self._committed = committed
        self._unallocated = unallocated
        #: highest seq written and fsynced (written here only)
        self.durable_seq = 0
        #: set by :meth:`placed` (and :meth:`stop`) to start a commit
        self._wake = asyncio.Event()
        #: callers of wait_durable, released as batches become durable
        self.durable = Waiters()
        #: callers of wait_appended, released by the append path
        self.appended = Waiters()
        #: callers of :meth:`settled`: released by durability or by an outage beginning
        self.settling = Waiters()
        self._listeners: list[Callable[[int], None]] = []
        self._outage_listeners: list[Callable[[WriteOutage | None], None]] = []
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._last_flush = float("-inf")
        #: set to cut a retry wait short (stop, or room made by the log itself)
        self._poke = asyncio.Event()
        #: why the log refuses writes now (set and cleared only by the flusher), if it does
        self.outage: WriteOutage | None = None
        self._handles: dict[int, JournalHandle] = {}  # flusher-thread-owned
        #: where commits are written and fsynced (one long-lived thread, not a pool
        #: submit per commit: server/txlog/append/filethread.py)
        self._thread = FileThread("spool-txlog-flush")
        # statistics
        self.flushes = 0
        self.appended_bytes = 0
        self.last_batch_records = 0
        self.outages = 0
        self.retries = 0
        self._latencies: deque[float] = deque(maxlen=_LATENCY_SAMPLES)

    @property
    def write_error(self) -> TxlogWriteFailed | None:
        """The failure the log refuses appends for, while a write outage lasts."""
        outage = self.outage
        return outage.error if outage is not None else None

    def fsync_ms(self, quantile: float) -> float:
        """That quantile of the recent fsync times of a commit, in ms (0 before any)."""
        lat = sorted(self._latencies)
        return lat[min(len(lat) - 1, int(quantile * len(lat)))] * 1000.0 if lat else 0.0

    def stats(self) -> dict[str, float]:
        """The group-commit entries of the log's ``stats()``."""
        return {
            "appended_bytes": float(self.appended_bytes),
            "durable_seq": float(self.durable_seq),
            "flushes": float(self.flushes),
            "fsync_p50_ms": self.fsync_ms(0.5),
            "fsync_p99_ms": self.fsync_ms(0.99),
            "last_flush_records": float(self.last_batch_records),
            "write_failed": 1.0 if self.write_error is not None else 0.0,
            "write_outages": float(self.outages),
            "write_retries": float(self.retries),
        }

    # -- lifecycle (event loop) ---------------------------------------------------------

    def start(self, durable_seq: int, active: Journal, handle: JournalHandle) -> None:
        """Start the flusher; ``handle`` is the active journal's file, opened at open."""
        self.durable_seq = durable_seq
        self._handles[active.base] = handle
        self._task = asyncio.get_running_loop().create_task(self._run(), name="txlog-flusher")

    async def stop(self) -> None:
        """Commit what is pending without waiting for the interval; end the flusher.

        During a write outage the pending records get one last attempt at once; if it
        fails too they are never written (none of them was acknowledged as persisted).
        """
        self._stopping = True
        self._wake.set()
        self._poke.set()
        if self._task is not None:
            await self._task
        self._thread.close()

    def report_unwritten(self) -> None:
        """After :meth:`stop` during a write outage: the records never written are lost
        (none was acknowledged as persisted); say so (event ``unwritten_at_close``)."""
        outage = self.outage
        if outage is None:
            return
        first, last = self.durable_seq + 1, self._pending.last_seq
        log.error(
            "transaction log closed during a write outage: seqs %d..%d were never written "
            "(%s)", first, last, outage.error,
        )  # fmt: skip
        self._emit(
            "unwritten_at_close",
            {"records": last - first + 1, "first_seq": first, "last_seq": last,
             "error": str(outage.error)},
        )  # fmt: skip

    def retry_now(self) -> None:
        """During an outage, retry at once instead of at the scheduled time (the log made
        room itself, e.g. by removing journals)."""
        if self.outage is not None:
            self._poke.set()

    def add_outage_listener(self, cb: Callable[[WriteOutage | None], None]) -> None:
        """Call ``cb(outage)`` when a write outage begins and ``cb(None)`` when it ends (on
        the loop; not at every failed retry)."""
        self._outage_listeners.append(cb)

    def add_listener(self, cb: Callable[[int], None]) -> None:
        """Call ``cb(durable_seq)`` after each commit."""
        self._listeners.append(cb)

    def remove_listener(self, cb: Callable[[int], None]) -> None:
        """Stop calling ``cb``."""
        with contextlib.suppress(ValueError):
            self._listeners.remove(cb)

    def placed(self, seq: int) -> None:
        """The append path placed records up to ``seq`` in :class:`Pending`: release the
        callers of ``wait_appended`` up to it and wake the flusher to commit them."""
        appended = self.appended
        if appended.due(seq):
            appended.release(seq)
        self._wake.set()

    def fail_waiters(self, exc: BaseException) -> None:
        """Fail everyone waiting for durability or for appends (no append can come)."""
        self.durable.fail(exc)
        self.appended.fail(exc)
        self.settling.fail(exc)

    async def settled(self, seq: int) -> None:
        """Return once ``seq`` is durable, or a write outage is under way (whichever comes
        first): for waits that must not last as long as an outage may."""
        if seq <= self.durable_seq or self.outage is not None:
            return
        await self.settling.wait(seq)

    # -- the flusher (event loop) -------------------------------------------------------

    async def _run(self) -> None:
        pending = self._pending
        interval = self._interval
        clock = self._clock
        while True:
            if pending.empty:
                if self._stopping:
                    return
                self._wake.clear()
                await self._wake.wait()
                continue
            if self.outage is not None:
                if not self._stopping:
                    await self._until_retry()
            else:
                # at most one fsync per FlushInterval, unless a lot is pending
                delay = self._last_flush + interval - clock.monotonic()
                if delay > 0 and not self._stopping and len(pending.buf) < FLUSH_HIGH_WATER:
                    await clock.sleep(delay)
            self._wake.clear()
            if pending.empty:
                continue  # dropped by abort() while we waited
            batch = pending.take()
            self._last_flush = clock.monotonic()
            written = Written()
            try:
                await self._thread.run(functools.partial(self._write_batch, batch, written))
            except Exception as exc:
                # anything the thread raised is a write failure; nothing of it is durable
                error = (
                    exc if isinstance(exc, TxlogWriteFailed)
                    else TxlogWriteFailed(str(self._dir), "write", exc)
                )  # fmt: skip
                pending.restore(batch)
                self._report_unallocated(written)
                self._failed(error)
                if self._stopping:
                    return  # that was the last attempt: close() gives up on the rest
                continue
            self._report_unallocated(written)
            self._apply(batch, written)

    def _report_unallocated(self, written: Written) -> None:
        for path, exc in written.unallocated:
            self._unallocated(path, exc)

    async def _until_retry(self) -> None:
        """Wait out the back-off of the current outage, or until poked (stop, room made)."""
        outage = self.outage
        assert outage is not None
        delay = self._retry.delay(outage.attempts)
        self.outage = outage.scheduled(self._clock.time() + delay)
        if self._poke.is_set():
            self._poke.clear()
            return
        try:
            await sleep_or_wake(self._clock, delay, self._poke)
        finally:
            self._poke.clear()
        self.retries += 1

    def _apply(self, batch: Batch, written: Written) -> None:
        """Back on the loop after a commit: advance, account, notify."""
        for j, source in written.created:
            j.source = source
            j.created = True
        for j, offset, data in batch.chunks:
            j.durable_len = max(j.durable_len, offset + len(data))
        for j in batch.finished:
            j.durable_len = j.index.data_len
            j.rolling = False
        self.durable_seq = durable = batch.last_seq
        self.flushes += 1
        self.appended_bytes += batch.nbytes
        self._latencies.append(written.fsync_s)
        self.last_batch_records = batch.records
        outage, self.outage = self.outage, None
        if outage is not None:
            self._resumed(outage, batch)
        self._committed(batch, written)
        for cb in list(self._listeners):
            try:
                cb(durable)
            except Exception:
                log.exception("durable listener failed")
        self.durable.release(durable)
        self.settling.release(durable)

    def _failed(self, error: TxlogWriteFailed) -> None:
        """A commit failed: begin an outage, or count one more failed retry."""
        pending_records = self._pending.last_seq - self.durable_seq
        outage = self.outage
        if outage is not None:
            self.outage = outage.failed_again(error, pending_records)
            log.debug("transaction log write retry failed: %s", error)
            return
        self.outage = outage = WriteOutage(
            error, self._clock.time(), pending_records=pending_records
        )
        self.outages += 1
        self.settling.release(self._pending.last_seq)  # nobody settles on an outage
        log.error("transaction log write failed, refusing appends and retrying: %s", error)
        self._emit(
            "flush_failed",
            {"path": error.path, "operation": error.operation, "error": str(error.cause),
             "durable_seq": self.durable_seq, "last_seq": self._pending.last_seq,
             "retry_in_s": self._retry.delay(0)},
        )  # fmt: skip
        self._notify_outage(outage)

    def _resumed(self, outage: WriteOutage, batch: Batch) -> None:
        down = self._clock.time() - outage.since
        log.warning("transaction log writes resumed after %.1f s: %s", down, outage.error)
        self._emit(
            "writes_resumed",
            {"down_s": round(down, 3), "retries": outage.attempts + 1,
             "records": batch.records, "durable_seq": batch.last_seq,
             "error": str(outage.error)},
        )  # fmt: skip
        self._notify_outage(None)

    def _notify_outage(self, outage: WriteOutage | None) -> None:
        for cb in list(self._outage_listeners):
            try:
                cb(outage)
            except Exception:
                log.exception("write outage listener failed")

    # -- files (worker threads) ---------------------------------------------------------

    def _write_batch(self, batch: Batch, out: Written) -> None:
        """Write and fsync one batch, reporting in ``out`` (flusher thread); on failure
        close every journal descriptor (see the module docstring: a retry reopens and
        rewrites)."""
        try:
            self._write(batch, out)
        except BaseException:
            self.close_files()
            raise

    def _write(self, batch: Batch, out: Written) -> None:
        """Write and fsync one batch (flusher thread).

        Order matters for recovery: a finished journal is truncated and fsynced before
        any byte of the next one is written, so a durable record in journal N+1 implies
        journal N is complete; a new file's directory entry is fsynced before the batch
        counts as durable. Every step is safe to repeat, so a batch that failed half-way
        is simply written again.
        """
        finished = {id(j) for j in batch.finished}
        dirty: dict[int, tuple[Journal, JournalHandle]] = {}
        created: list[Journal] = []
        fsync_time = 0.0
        by_journal: dict[int, Journal] = {j.base: j for j in batch.finished}
        for j, _, _ in batch.chunks:
            by_journal[j.base] = j
        for base in sorted(by_journal):  # log order
            j = by_journal[base]
            handle = self._handles.get(base)
            if handle is None:
                if j.created:
                    handle = self._reopen(j)
                else:
                    handle, problem = self.create_journal(j)
                    created.append(j)
                    if problem is not None:
                        out.unallocated.append((j.path, problem))
                self._handles[base] = handle
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
            except OSError as exc:
                raise TxlogWriteFailed(str(j.path), "truncate", exc) from exc
            try:
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
        if created:
            try:
                fsync_dir(self._dir)
            except OSError as exc:
                raise TxlogWriteFailed(str(self._dir), "fsync", exc) from exc
        out.fsync_s = fsync_time + time.perf_counter() - t0
        for j in created:  # readers of the new files, once the batch cannot fail any more
            try:
                out.created.append((j, PlainSource(j.path)))
            except OSError as exc:
                for _, source in out.created:
                    source.retire()
                out.created.clear()
                raise TxlogWriteFailed(str(j.path), "open", exc) from exc

    def _reopen(self, j: Journal) -> JournalHandle:
        """Open an existing journal again (after a failure closed every descriptor)."""
        try:
            return self._seam.open(j.path, create=False)
        except OSError as exc:
            raise TxlogWriteFailed(str(j.path), "open", exc) from exc

    def create_journal(self, j: Journal) -> tuple[JournalHandle, OSError | None]:
        """Create ``j``'s file: rename a preallocated file, or create one and allocate it.

        Safe to repeat (a retry after a failed commit): a file an earlier attempt renamed
        or created is opened as it is. Allocation is an optimisation (a full disk shows up
        early, a roll costs a rename): when it fails the file is used unallocated and the
        writes extend it, so a disk short of room refuses writes only when one really
        fails. The allocation's failure is returned for the caller to report.

        Raises:
            TxlogWriteFailed: the file cannot be created or opened (``open``).
        """
        try:
            if j.prealloc is not None:
                with contextlib.suppress(FileNotFoundError):  # renamed by an earlier attempt
                    self._seam.rename(j.prealloc, j.path)
            try:
                handle = self._seam.open(j.path, create=True)
            except FileExistsError:  # renamed from a preallocated file, or made before
                return self._seam.open(j.path, create=False), None
        except OSError as exc:
            raise TxlogWriteFailed(str(j.path), "open", exc) from exc
        try:
            handle.allocate(self._journal_size)
        except OSError as exc:
            return handle, exc
        return handle, None

    def close_files(self) -> None:
        """Close every journal handle (a worker thread: after a failed batch, or once the
        flusher ended)."""
        for handle in self._handles.values():
            with contextlib.suppress(OSError):
                handle.close()
        self._handles.clear()
