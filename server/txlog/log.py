"""The transaction log: append on the event loop, group commit in a thread, read anywhere.

:class:`TransactionLog` is a facade over parts that each own one kind of state:

:mod:`.append.groupcommit`  pending appends, the flusher, the durable position, write outages
:mod:`.append.cachewriter`  index entries, sealed indexes, ``clients.ack`` after each commit
:mod:`.append.placement`    appended bytes into the active journal, index and tail; rolls
:mod:`.append.space`        preallocated files and ``MaxSize`` accounting
:mod:`.append.tail`         the in-memory tail of recent records
:mod:`.read.recordreader`   records back by seq, from the tail or the journal files
:mod:`.read.locator`        lookups by bookmark and time, prefetched answers
:mod:`.retention.service`   pins; archive, compress, remove
:mod:`.startup`             the file work of ``open()``: recovery, the active journal
:mod:`.damage.scrub`        every journal read back and checked, paced; damage it finds

The log assigns ``seq`` and the timestamp on the event loop, with no I/O; the flusher
hands batches to a worker thread that writes and fsyncs them, at most once per
``FlushInterval``, then advances ``durable_seq``. Reads return durable records only. A
failed write starts a :class:`WriteOutage`: appends are refused with
:class:`TxlogWriteFailed` until a retry succeeds. Retention honours every :class:`Pin`.

Thread-safety: every public method is for the event loop that called :meth:`open`.
State is never shared with threads: a worker receives the data of one batch or one read
and reports back. See docs/transaction-log.md ("Group commit and durability", "A full
disk").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Final

from spool.server.bookmarks import broker_pub_hash
from spool.server.clock import SYSTEM_CLOCK, Clock, time_us
from spool.server.config import TransactionLogConfig
from spool.server.txlog.append.cachewriter import CacheWriter
from spool.server.txlog.append.groupcommit import Batch, GroupCommit, Pending, Written
from spool.server.txlog.append.outage import RetryPolicy, WriteOutage
from spool.server.txlog.append.placement import Placement
from spool.server.txlog.append.space import DiskSpace, PreallocationShortfall
from spool.server.txlog.append.tail import TailCache
from spool.server.txlog.damage.fenceplan import neighbours_of, unnamed_intervals
from spool.server.txlog.damage.fences import Fence, FenceTable
from spool.server.txlog.damage.ranges import DamagedRange, FoundBy
from spool.server.txlog.damage.scrub import Scrubber, ScrubStatus, block_hints
from spool.server.txlog.errors import (
    OwnFloorUnwritten,
    TxlogClosed,
    TxlogError,
    TxlogFull,
    TxlogWriteFailed,
)
from spool.server.txlog.events import Emitter, EventCallback
from spool.server.txlog.format.batch import RecordBatch
from spool.server.txlog.format.codec import HEADER_SIZE, encode, encode_run, make_record
from spool.server.txlog.format.record import FLAG_LATE, Record, RecordKind
from spool.server.txlog.index.answers import BLOCK_BYTES
from spool.server.txlog.index.builder import IndexBuilder
from spool.server.txlog.index.sealed import SealedIndex
from spool.server.txlog.publishers.ownfloor import RESERVE, write_floor
from spool.server.txlog.publishers.table import Holdings, Publishers
from spool.server.txlog.read.locator import Located, Locator, LookupView
from spool.server.txlog.read.recordreader import RecordReader
from spool.server.txlog.recovery.online import Mended, fence_journal, fill_journal
from spool.server.txlog.recovery.reindex import reindex
from spool.server.txlog.recovery.report import RecoveryReport, recovery_stats
from spool.server.txlog.retention.pins import Pin, PinInfo
from spool.server.txlog.retention.service import Retention
from spool.server.txlog.startup import open_files
from spool.server.txlog.storage.files import (
    Compression,
    FileSeam,
    OsFileSeam,
    validate_instance,
)
from spool.server.txlog.storage.journal import Journal, JournalInfo, JournalList

__all__ = ["EventCallback", "Located", "LookupView", "TransactionLog"]

log = logging.getLogger("spool.txlog")

#: default budget of the in-memory tail cache (encoded bytes of records kept)
TAIL_CACHE_BYTES: Final = 32 << 20
#: default pace of the scrub (Tuning/JournalScrubRate)
SCRUB_RATE: Final = 64 << 20
#: seconds between attempts to write the own identity's floor after one failed
FLOOR_RETRY: Final = 1.0
_NEW, _OPEN, _CLOSING, _CLOSED = range(4)


class TransactionLog:
    """The transaction log of one instance.

    Args:
        config: the TransactionLog section.
        instance: the instance name (prefixes every file; see :mod:`.storage.files`).
        clock: time source for timestamps and the group-commit interval.
        on_event: called on the loop with structured events (:mod:`.events`).
        files: the file seam for journal writes (tests inject failures through it).
        tail_cache_bytes: budget of recent records kept in memory for readers.
        block_bytes: index block size (tests use small blocks).
        track_gaps: keep each publisher's gaps, for late records (server/txlog/publishers/table.py).
        scrub_interval: seconds between scrubs of every journal (0: only on demand, with
            :meth:`scrub`); the first starts at :meth:`start_scrub` (server/txlog/damage/scrub.py).
        scrub_rate: bytes per second a scrub reads at most.
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
        track_gaps: bool = False,
        scrub_interval: float = 0.0,
        scrub_rate: int = SCRUB_RATE,
    ) -> None:
        self.config = config
        self.instance = validate_instance(instance)
        self._clock = clock
        self._emit = Emitter(on_event)
        self._seam: FileSeam = files if files is not None else OsFileSeam()
        self._block_bytes = block_bytes
        self._journal_size = config.journal_size
        self._dir = Path(config.journal_directory)
        self._archive_dir = Path(config.archive_directory)
        self._state = _NEW
        self._closed_event = asyncio.Event()
        self._journals = JournalList()
        self._publishers = Publishers(track_gaps)
        self._pubs = self._publishers.table  # pub_hash -> (last pub_seq, its seq)
        self._last_ts = 0  # timestamp of the last appended record
        self._tail = TailCache(tail_cache_bytes)
        self._pending = Pending(self._journals, self._pubs, block_bytes)
        self._space = DiskSpace(
            self._dir, self.instance, journal_size=self._journal_size,
            max_size=config.max_size, want=config.preallocated_files, seam=self._seam,
            emit=self._emit, clock=clock,
        )  # fmt: skip
        self._caches = CacheWriter(
            self._dir, self.instance, block_bytes, emit=self._emit, after=self._after_caches
        )
        self._commit = GroupCommit(
            self._pending, directory=self._dir, seam=self._seam,
            journal_size=self._journal_size, interval=config.flush_interval, clock=clock,
            retry=RetryPolicy(config.write_retry_interval), emit=self._emit,
            committed=self._committed, unallocated=self._space.allocation_failed,
        )  # fmt: skip
        self._placement = Placement(
            self._pending, self._tail, self._publishers, self._space, self._commit,
            directory=self._dir, instance=self.instance, journal_size=self._journal_size,
            block_bytes=block_bytes,
        )  # fmt: skip
        self._damage: list[DamagedRange] = []
        self._fences = FenceTable()
        self._lost_since: int | None = None
        self._scrubber = Scrubber(
            self._journals, clock=clock, rate=scrub_rate, interval=scrub_interval,
            found=self._damage_found,
        )  # fmt: skip
        self._reader = RecordReader(
            self._journals, self._tail, self._pending, self._commit,
            on_corrupt=self._scrubber.check_soon, fences=self._fences,
        )  # fmt: skip
        self._locator = Locator(self._journals, self._tail, self._pubs, self._last_appended)
        self._retention = Retention(
            self._journals, self._space, directory=self._dir,
            archive_directory=self._archive_dir, instance=self.instance, emit=self._emit,
            check_open=self._check_open, settle=self._settle,
            cover_publishers=self._caches.cover_publishers, seam=self._seam,
        )  # fmt: skip
        # statistics
        self._open_seq = 0
        self._report: RecoveryReport | None = None
        self._own_pub = 0
        self._incarnation = ""
        #: the own identity's floor as last written (server/txlog/publishers/ownfloor.py)
        self._own_floor = 0
        #: whether its records are numbered ahead against the floor (it replicates)
        self._own_ahead = False
        self._floor_lock = asyncio.Lock()
        self._floor_task: asyncio.Task[None] | None = None
        self._floor_failed_at: float | None = None
        self._fill_listeners: list[Callable[[int, int], None]] = []
        #: fenced ranges an operator released (:meth:`release_fence`), oldest first
        self._given_up: list[tuple[int, int]] = []

    # -- lifecycle ----------------------------------------------------------------------

    async def open(self, *, known_durable: int = 0) -> RecoveryReport:
        """Recover the journals, rebuild missing indexes, preallocate; start the flusher.

        All file work runs in a worker thread. Damage is fenced (server/txlog/damage/fences.py),
        a torn tail cut (server/txlog/recovery/recover.py).

        Args:
            known_durable: a seq known to have been durable from outside the log (a
                replication peer acknowledged it): records up to it that a torn tail lost
                are fenced, so their seqs are never given to other records.

        Raises:
            JournalSequenceGap: two journals overlap.
            OSError: the directories cannot be used.
        """
        if self._state != _NEW:
            raise TxlogError("the transaction log can be opened once")
        opened = await asyncio.to_thread(
            open_files, self.config, self.instance, seam=self._seam,
            block_bytes=self._block_bytes, commit=self._commit, caches=self._caches,
            space=self._space, known_durable=known_durable,
        )  # fmt: skip
        self._report = opened.report
        self._journals.reset(opened.journals)
        active = self._journals.active
        assert isinstance(active.index, IndexBuilder)
        self._pending.start(active, active.index)
        self._open_seq = active.last_seq
        self._tail.start(active.last_seq + 1)
        self._pubs.update(opened.publishers)
        self._incarnation = opened.incarnation
        self._own_floor = opened.own_floor
        own = self._own_pub = broker_pub_hash(self.instance, opened.incarnation)
        publishers = self._publishers
        await publishers.rebuild_gaps(self._journals.items, own=own)
        if opened.own_floor > publishers.last(own):
            # a skip of an earlier open that no record backs (server/txlog/publishers/ownfloor.py)
            publishers.skip(own, opened.own_floor - publishers.last(own))
        backed = publishers.last(own)
        taken = _records_lost(opened.report)
        if taken:
            # the instance's own records (queue acks and ownership changes, sow_deletes)
            # that a cut tail took may be held by its peers: its next ones must not take
            # their bookmarks, and those come back late into the gap (docs: "Recovery")
            publishers.skip(own, taken)
        for fence in opened.fences:
            self._fences.add(fence)
            self._name_publishers(fence, opened.in_fences)
        # an instance that replicates numbers its own records ahead against the floor:
        # whatever a tail lost, even whole records at a clean end, nothing reuses them
        self._own_ahead = publishers.tracks_gaps
        if self._own_ahead or publishers.last(own) > backed:
            await self._save_floor()  # before the first append: nothing reuses them
        self._state = _OPEN
        for t in opened.report.truncations:
            self._emit("recovery_truncated", t.to_dict())
        # the events describe each fence as the log holds it: with the publishers
        # naming added, which is what its repair asks for
        held = {fence.first_seq: fence.to_dict() for fence in opened.fences}
        kept = [t.last_kept_us or 0 for t in opened.report.truncations]
        for lost in opened.report.unnamed:
            self._emit("recovery_lost_unnamed", held.get(_first_seq(lost), lost))
            window = lost["window_us"]
            assert isinstance(window, list)
            kept.append(int(window[0] or 0))
        self._lost_since = min(kept) if kept else None
        for d in opened.report.damage:
            self._damage.append(d)
            self._emit("journal_damaged", d.to_dict())
        for made in opened.report.fenced:
            self._emit("journal_fenced", held.get(_first_seq(made), made))
        self._space.report()
        self._commit.start(active.last_seq, active, opened.handle)
        log.info(
            "transaction log %s open: seqs %d..%d in %d journals, recovery %.3fs",
            self.instance, self.first_seq, active.last_seq, len(self._journals),
            opened.report.duration_s,
        )  # fmt: skip
        return opened.report

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
        # 2. close the partial index block: the next open then has nothing to scan
        self._pending.close_block()
        await self._shut_down("the transaction log is closed", clients_ack=True)

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
        self._pending.drop()
        await self._shut_down("the transaction log was aborted", clients_ack=False)

    async def _shut_down(self, reason: str, *, clients_ack: bool) -> None:
        """The steps :meth:`close` and :meth:`abort` share, once appends are refused."""
        if self._floor_task is not None:
            # a floor write under way lands (the next open writes the same file)
            await asyncio.gather(self._floor_task, return_exceptions=True)
        await self._scrubber.stop()
        commit = self._commit
        # 3. final group commit; the flusher exits once nothing is pending (in a write
        #    outage: after one last attempt, and what it could not write is reported)
        await commit.stop()
        await self._caches.drain()
        commit.report_unwritten()
        # 4. clients.ack as of the durable position (close only), then close every file
        snapshot = dict(self._pubs) if clients_ack and commit.write_error is None else None
        await asyncio.to_thread(self._close_files, snapshot, commit.durable_seq)
        # 5. wake whoever still waits
        self._state = _CLOSED
        commit.fail_waiters(commit.write_error or TxlogClosed(reason))
        self._closed_event.set()

    def _close_files(self, publishers: dict[int, tuple[int, int]] | None, covered: int) -> None:
        if publishers is not None:
            self._caches.write_clients_ack(covered, publishers)
        self._commit.close_files()
        self._caches.close()
        for j in self._journals:
            j.close()

    def _check_open(self) -> None:
        if self._state != _OPEN:
            raise TxlogClosed("the transaction log is not open")

    # -- properties ---------------------------------------------------------------------

    @property
    def own_pub_hash(self) -> int:
        """The instance's own publisher identity in this log (server/txlog/publishers/incarnation.py):
        what its queue records, ``sow_delete`` removals and own messages carry.

        Raises:
            TxlogClosed: the log was never opened (the identity comes from its files).
        """
        if not self._own_pub:
            raise TxlogClosed("the transaction log is not open")
        return self._own_pub

    @property
    def last_seq(self) -> int:
        """Highest seq appended."""
        return self._pending.last_seq

    def _last_appended(self) -> int:
        return self._pending.last_seq

    @property
    def seam(self) -> FileSeam:
        """The file seam journal writes go through (other durable files of the log's
        directory use it too, so fault tests reach them)."""
        return self._seam

    @property
    def durable_seq(self) -> int:
        """Highest seq written and fsynced."""
        return self._commit.durable_seq

    @property
    def first_seq(self) -> int:
        """Oldest seq still available locally (``last_seq + 1`` when the log is empty)."""
        return self._reader.first_seq

    @property
    def write_error(self) -> TxlogWriteFailed | None:
        """Why appends are refused, while a write outage lasts (None otherwise)."""
        return self._commit.write_error

    @property
    def write_outage(self) -> WriteOutage | None:
        """The write outage under way, if any: cause, since when, next retry."""
        return self._commit.outage

    @property
    def preallocation_shortfall(self) -> PreallocationShortfall | None:
        """Fewer preallocated journal files than configured, and why (a disk short of room)."""
        return self._space.shortfall

    @property
    def damage(self) -> list[DamagedRange]:
        """Damaged ranges found since open and not fenced (yet): reads of them fail."""
        return list(self._damage)

    @property
    def lost_since_us(self) -> int | None:
        """When the log lost records it cannot name: the time of the last record kept
        before a torn tail cut at open, or before durable records lost from the end that
        nothing names (None: nothing was cut). Replication sources that
        hear it send again what they recorded from a little before then (their records
        this log lacks; docs/replication.md "Resync on connect")."""
        return self._lost_since

    @property
    def fences(self) -> list[Fence]:
        """The fenced ranges of the log, oldest first: damaged or missing records whose
        seqs are held in place until a repair writes them back (server/txlog/damage/fences.py)."""
        return list(self._fences)

    @property
    def recovery_report(self) -> RecoveryReport | None:
        """What :meth:`open` found."""
        return self._report

    @property
    def last_timestamp_us(self) -> int:
        """Timestamp of the last appended record (0 before the first append here)."""
        return self._last_ts

    def publisher_last(self, pub_hash: int) -> int:
        """Highest ``pub_seq`` appended by that publisher (0 if none); survives restarts."""
        return self._publishers.last(pub_hash)

    def publisher_last_bookmark(self, pub_hash: int) -> str | None:
        """Bookmark ``PUBHASH|PUBSEQ|`` of that publisher's last message, if any."""
        return self._publishers.last_bookmark(pub_hash)

    @property
    def publishers(self) -> Publishers:
        """The publisher table: highest sequences, gaps and holdings (publishers/table.py)."""
        return self._publishers

    def resync_start(self, holdings: Holdings) -> int:
        """Where to start sending another instance what ``holdings`` lack: the first seq of
        the oldest journal that may hold such a record (``last_seq + 1`` when none does)."""
        start = self._publishers.resync_start(self._journals, holdings)
        return max(start, self.first_seq) if start is not None else self.last_seq + 1

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
        late: bool = False,
    ) -> Record:
        """Append one record (event loop; no I/O). It becomes durable at a later flush.

        ``pub_hash`` 0 means "no publisher identity" (e.g. queue events): such records
        are not indexed by bookmark and do not count as a publisher's last message.

        ``late``: it fills a gap of its publisher (``publishers.missing``), below the
        highest, flagged ``FLAG_LATE``; the highest stays where it was.

        Raises:
            TxlogClosed: the log is not open.
            TxlogWriteFailed: the log refuses writes: a write failed and is being retried.
            TxlogFull: rolling to a new journal would exceed TransactionLog/MaxSize.
            PublisherSequenceRegression: ``pub_seq`` not above the publisher's last (or,
                for a late record, not in one of its gaps).
            RecordTooLarge, FieldOutOfRange: the record does not fit the format.
        """
        if self._state != _OPEN:
            raise TxlogClosed("the transaction log is not open")
        werr = self._commit.write_error
        if werr is not None:
            raise werr
        self._publishers.check(pub_hash, pub_seq, late=late)
        own = pub_hash == self._own_pub and self._own_ahead
        if own and not path and pub_seq > self._own_floor:
            self._number_ahead()
            raise OwnFloorUnwritten(pub_seq, self._own_floor)
        if late:
            flags |= FLAG_LATE
        if type(kind) is not RecordKind:
            kind = RecordKind(kind)
        seq = self._pending.last_seq + 1
        ts = self._last_ts = time_us(self._clock) if timestamp_us is None else timestamp_us
        fields = (
            seq, ts, pub_hash, pub_seq, topic, message_type, kind, path, flags, body, corr_id,
            sow_key,
        )  # fmt: skip
        data = encode(*fields)
        self._placement.place([data], ts, pub_hash, [pub_seq], late=late)
        if own:
            self._numbered()
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
        kind: RecordKind = RecordKind.PUBLISH,
        path: tuple[str, ...] = (),
    ) -> int:
        """Append a run of records of one publisher, kind and path to one topic (event loop).

        The publish hot path: a publisher's frame usually carries many messages to one
        topic, and doing the per-append bookkeeping (state checks, clock, flusher wake-up,
        waiter release, publisher table) once per run instead of once per record is what
        makes batching pay. Every record gets the same timestamp (they arrived together).
        No :class:`Record` objects are built; record ``i`` has seq
        ``last_seq - n + 1 + i`` and bookmark ``pub_hash|pub_seqs[i]|``. The record kind
        (``PUBLISH``, a SOW's ``DELTA_PUBLISH`` or ``SOW_DELETE``) and the replication
        path are the run's; ``pub_hash`` 0 (no publisher identity) skips the sequence
        checks, as in :meth:`append`.

        Returns:
            How many records were appended, from the first. Fewer than given when one
            cannot be (a sequence not above the previous one, a record too large, a roll
            that would exceed MaxSize, a closed or failed log): :meth:`append` of that
            record then raises the reason, so callers fall back to it.
        """
        n = len(bodies)
        if self._state != _OPEN or self._commit.write_error is not None or not n:
            return 0
        prev_seq = -1
        if pub_hash:
            prev = self._pubs.get(pub_hash)
            if prev is not None:
                prev_seq = prev[0]
        ts = self._last_ts = time_us(self._clock)
        seq = self._pending.last_seq
        # a sequence that does not increase ends the run there, and so does one of the
        # own identity past its floor (append() says why)
        own = pub_hash == self._own_pub and self._own_ahead
        ceiling = self._own_floor if own and not path else None
        if pub_hash:
            for i, ps in enumerate(pub_seqs):
                if ps <= prev_seq or (ceiling is not None and ps > ceiling):
                    n = i
                    break
                prev_seq = ps
            if not n:
                return 0
        encoded = encode_run(
            seq + 1, ts, pub_hash, pub_seqs[:n], topic, message_type, bodies[:n],
            corr_ids[:n] if corr_ids else None, sow_keys[:n] if sow_keys else None,
            kind=kind, path=path,
        )  # fmt: skip
        try:
            done = self._placement.place(encoded, ts, pub_hash, pub_seqs)
        except TxlogFull:
            # The one refusal place() raises: a roll past MaxSize before the first
            # record (a later record's ends the run quietly). The run stops and append()
            # of that record raises the same reason. Anything else is a fault that must
            # propagate: placing may have begun, and reporting 0 would make the caller
            # append those records again.
            return 0
        if own:
            self._numbered()
        return done

    def append_due(
        self,
        *,
        topic: str,
        message_type: str,
        pub_hash: int,
        pub_seqs: list[int],
        bodies: list[bytes],
        corr_ids: list[str] | None = None,
        sow_keys: list[str] | None = None,
        path: tuple[str, ...] = (),
    ) -> int:
        """Append a run of due records (kind ``DUE``): messages of one publisher, topic and
        path whose scheduled records the log holds, at their due time (event loop).

        A due record repeats its scheduled record's bookmark, topic, body, correlation id,
        path and SOW key field (without the due time: ``sow_keys`` are the fields as they
        would have been), with one timestamp for the run, now. It is no new message of its
        publisher: no sequence check, the publisher table stays as it is, and the index
        files the records under ``DUE_KEY`` with their own seqs.

        Returns:
            How many records were appended, from the first: fewer than given when one
            does not fit the format or a roll would exceed MaxSize; none when the log is
            closed or refuses writes (a write failed and is being retried).
        """
        n = len(bodies)
        if self._state != _OPEN or self._commit.write_error is not None or not n:
            return 0
        ts = self._last_ts = time_us(self._clock)
        encoded = encode_run(
            self._pending.last_seq + 1, ts, pub_hash, pub_seqs, topic, message_type, bodies,
            corr_ids, sow_keys, kind=RecordKind.DUE, path=path,
        )  # fmt: skip
        try:
            return self._placement.place(encoded, ts, pub_hash, pub_seqs, due=True)
        except TxlogFull:
            return 0  # a roll past MaxSize before the first record: nothing was placed

    # -- durability ---------------------------------------------------------------------

    def add_fill_listener(self, cb: Callable[[int, int], None]) -> None:
        """Call ``cb(first_seq, last_seq)`` on the loop after :meth:`fill_fence` wrote
        back (or released) the fence of those seqs."""
        self._fill_listeners.append(cb)

    def add_durable_listener(self, cb: Callable[[int], None]) -> None:
        """Call ``cb(durable_seq)`` on the loop after each group commit."""
        self._commit.add_listener(cb)

    def remove_durable_listener(self, cb: Callable[[int], None]) -> None:
        """Stop calling ``cb``."""
        self._commit.remove_listener(cb)

    def add_outage_listener(self, cb: Callable[[WriteOutage | None], None]) -> None:
        """Call ``cb(outage)`` on the loop when a write outage begins, ``cb(None)`` when
        writes resume (the durability horizon fails its waiters with it)."""
        self._commit.add_outage_listener(cb)

    async def wait_durable(self, seq: int) -> None:
        """Return once every record up to ``seq`` is fsynced.

        A write outage does not end the wait: the log retries, and the records are
        written once the disk takes them (a replay waits there and goes on). Who must not
        wait that long listens to :meth:`add_outage_listener` (persisted and flush acks).

        Raises:
            TxlogClosed: the log closed before ``seq`` became durable (during an outage:
                the :class:`TxlogWriteFailed` that kept it from being written).
        """
        commit = self._commit
        if seq <= commit.durable_seq:
            return
        if self._state != _OPEN and not (self._state == _CLOSING and seq <= self._pending.last_seq):
            raise TxlogClosed("the transaction log is closed")
        await commit.durable.wait(seq)

    async def wait_appended(self, seq: int) -> None:
        """Return once a record ``seq`` was appended (for ``live`` subscriptions).

        Raises:
            TxlogClosed: the log closed first.
        """
        if seq <= self._pending.last_seq:
            return
        if self._state != _OPEN:
            raise TxlogClosed("the transaction log is closed")
        await self._commit.appended.wait(seq)

    async def _settle(self) -> None:
        """Until everything appended is durable and its commits' caches are written; in
        a write outage (under way, or beginning meanwhile) only the caches of the commits
        made: durability would wait for the disk (retention says which journal waits)."""
        if self._state == _OPEN:
            await self._commit.settled(self._pending.last_seq)
        await self._caches.drain()

    def _committed(self, batch: Batch, written: Written) -> None:
        """After a group commit (on the loop, from the flusher): disk accounting, events,
        tail eviction, and the batch's caches."""
        journals = self._journals
        for j in batch.finished:
            self._space.resize(j.disk_size, j.index.data_len)
            j.disk_size = j.index.data_len
            self._emit(
                "journal_rolled",
                {"journal": j.base, "path": str(j.path), "records": j.count,
                 "bytes": j.index.data_len, "next": journals.after(j)},
            )  # fmt: skip
        self._tail.committed(batch.last_seq, batch.nbytes, self._commit.durable_seq)
        self._caches.queue(batch, [j for j, _ in written.created])

    async def _after_caches(self) -> None:
        """After each batch's caches (cache task): top up the preallocated files."""
        if self._state == _OPEN:
            await self._space.replenish()

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
        records = await self._read(from_seq, max_count, max_bytes, upto_seq, False)
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
        if from_seq <= self._commit.durable_seq:
            return await self.read_batch(
                from_seq, max_count=max_count, max_bytes=max_bytes, upto_seq=upto_seq
            )
        if self._state == _NEW or self._state == _CLOSED:
            raise TxlogClosed("the transaction log is not open")
        return self._reader.appended(from_seq, max_count, max_bytes, upto_seq)

    async def read_view(
        self,
        from_seq: int,
        *,
        max_count: int = 1000,
        max_bytes: int = 1 << 20,
        upto_seq: int | None = None,
    ) -> RecordBatch:
        """Like :meth:`read_batch`, as a :class:`RecordBatch` (columns; fastest to replay)."""
        batch = await self._read(from_seq, max_count, max_bytes, upto_seq, True)
        assert isinstance(batch, RecordBatch)
        return batch

    async def _read(
        self, from_seq: int, max_count: int, max_bytes: int, upto_seq: int | None, as_batch: bool
    ) -> list[Record] | RecordBatch:
        if self._state == _NEW or self._state == _CLOSED:
            raise TxlogClosed("the transaction log is not open")
        return await self._reader.durable(from_seq, max_count, max_bytes, upto_seq, as_batch)

    # -- lookups ------------------------------------------------------------------------

    def lookups_need_io(self, bookmarks: list[tuple[int, int]], times: list[int]) -> bool:
        """Whether any of these lookups would read a file (else memory answers them all);
        bookmarks as delivered, as a replay resumes after them."""
        return self._locator.needs_io(bookmarks, times, delivered=True)

    async def locate_all(self, bookmarks: list[tuple[int, int]], times: list[int]) -> Located:
        """Resolve lookups with any file read in a worker thread, for :meth:`with_lookups`
        (bookmarks as delivered, as :meth:`seq_for_bookmark` finds them)."""
        return await self._locator.locate_all(bookmarks, times, delivered=True)

    def with_lookups(self, located: Located) -> LookupView:
        """This log as a replay source whose lookups answer from ``located`` where memory
        cannot (no file read on the loop). Pass it to the replay planner as its source."""
        return LookupView(self, self._locator, located)

    def seq_for_bookmark(
        self, pub_hash: int, pub_seq: int, *, delivered: bool = True
    ) -> int | None:
        """Local seq of the message with that bookmark; None if unknown or removed.

        A binary search to one index block, then that block's records: from memory when
        recent, else one read of at most a few KB (a chunk decompression for compressed
        journals). :meth:`locate_bookmark` does the read in a thread.

        As delivered by default (the replay source's lookup: where a replay resumes after
        it): a delayed message's due record, or its scheduled record when the due record
        is not found (docs/transaction-log.md "Reading"). ``delivered=False``: the record
        it was published as.
        """
        return self._locator.seq_for_bookmark(pub_hash, pub_seq, delivered)

    async def locate_bookmark(
        self, pub_hash: int, pub_seq: int, *, delivered: bool = False
    ) -> int | None:
        """:meth:`seq_for_bookmark` with any file read done in a worker thread; as
        published by default (replication, repair: the record the bookmark was recorded
        as), as delivered with ``delivered=True``."""
        return await self._locator.locate_bookmark(pub_hash, pub_seq, delivered)

    def seq_for_later(self, pub_hash: int, pub_seq: int) -> int | None:
        """Seq of the first record of a message of that publisher with a higher sequence
        (None: the log holds none): where a resume after the bookmark starts at the
        latest (docs/transaction-log.md "Reading"; ``Locator.seq_for_later``)."""
        return self._locator.seq_for_later(pub_hash, pub_seq)

    def seq_for_time(self, timestamp_us: int) -> int:
        """First seq recorded at or after ``timestamp_us``; ``last_seq + 1`` if none.

        A time before the log's start gives :attr:`first_seq`. Exact even if recorded
        times went backwards (lookups use each journal's running maximum).
        """
        return self._locator.seq_for_time(timestamp_us)

    async def locate_time(self, timestamp_us: int) -> int:
        """:meth:`seq_for_time` with any file read done in a worker thread."""
        return await self._locator.locate_time(timestamp_us)

    async def not_holding(
        self, seq: int, pub_hash: int, pub_seq: int, timestamp_us: int, what: str
    ) -> str:
        """Why this log does not hold the durable record ``seq`` written by ``pub_hash``
        / ``pub_seq`` at ``timestamp_us`` ("" when it does): how a checkpoint that names
        the last record it covers (``what``) tells whether it was written for this log."""
        if not self.first_seq <= seq <= self.durable_seq:
            return f"the log holds records {self.first_seq}..{self.durable_seq}, not {what} {seq}"
        batch = await self.read_view(seq, max_count=1, upto_seq=seq)
        if len(batch) != 1 or (batch.pub_hashes[0], batch.pub_seqs[0], batch.timestamps_us[0]) != (
            pub_hash,
            pub_seq,
            timestamp_us,
        ):
            return f"record {seq} of the log is not the one the checkpoint names"
        return ""

    # -- retention ----------------------------------------------------------------------

    def pin(self, owner: str, seq: int) -> Pin:
        """Hold every record from ``seq`` on (replays, queues, replication destinations)."""
        return self._retention.pin(owner, seq)

    def pins(self) -> list[PinInfo]:
        """The live pins, oldest first."""
        return self._retention.pins()

    def journals(self) -> list[JournalInfo]:
        """Every journal, oldest first, then the preallocated files."""
        return self._retention.journals()

    async def archive(self, journal_id: int) -> list[JournalInfo]:
        """Move that journal and all older ones to the archive directory (still readable).

        Raises:
            JournalNotFound, JournalActive, JournalPinned, JournalUnfinished.
        """
        infos = await self._retention.archive(journal_id)
        self._room_made()
        return infos

    async def compress(self, journal_id: int, method: Compression = "zstd") -> list[JournalInfo]:
        """Compress that journal and all older ones (zstd by default); still readable.

        Raises:
            JournalNotFound, JournalActive, JournalPinned, JournalUnfinished.
        """
        infos = await self._retention.compress(journal_id, method)
        self._room_made()
        return infos

    async def remove(self, journal_id: int) -> list[JournalInfo]:
        """Delete that journal and all older ones.

        Raises:
            JournalNotFound, JournalActive, JournalPinned, JournalUnfinished: nothing is
                removed.
        """
        infos = await self._retention.remove(journal_id)
        self._room_made()
        return infos

    def _room_made(self) -> None:
        """Journals left the journal directory: a write outage retries now, and missing
        preallocated files are made again after the next commit."""
        self._space.retry()
        self._commit.retry_now()

    # -- checks -------------------------------------------------------------------------

    def start_scrub(self) -> None:
        """Start the scrub's schedule (the engine calls it once the instance is ready):
        a first pass now, then one every ``scrub_interval``; with an interval of 0 it only
        runs when asked (:meth:`scrub`) or when a read meets a bad record."""
        if self._state == _OPEN:
            self._scrubber.start(now=self._scrubber.status.interval > 0)

    async def fence_damage_at(self, seq: int) -> bool:
        """Check the journal a read from ``seq`` failed in, at once, and fence what is
        damaged in it: for a reader that met a bad record before the scrub did and cannot
        wait for the scrub (the start-up rebuild of SOW and queue state).

        Returns:
            Whether that journal has a fence at or after ``seq`` now: the same read then
            stops before it, and a read of the fence raises
            :class:`~spool.server.txlog.errors.FencedRecords`, which the caller can skip. False
            when the check fenced nothing there (the read's error stands).
        """
        if self._state != _OPEN or seq < self.first_seq:
            return False
        journal = self._journals.holding(seq)
        await self._scrubber.check(journal, "read")
        fence = self._fences.next_from(seq)
        return fence is not None and fence.journal == journal.base

    def scrub(self) -> bool:
        """Start a scrub of every journal now; False when one is under way already.

        Raises:
            TxlogClosed: the log is not open.
        """
        self._check_open()
        self._scrubber.start(now=False)
        return self._scrubber.request()

    @property
    def scrub_status(self) -> ScrubStatus:
        """Where the scrub is: its pace, schedule, progress and what it found."""
        return self._scrubber.status

    async def _damage_found(
        self, journal: Journal, ranges: list[DamagedRange], index_bad: bool
    ) -> None:
        """A check found damage: keep it, report it; a damaged index file is written again
        from its journal when the journal's records all check."""
        known = {(d.journal, d.first_seq, d.offset) for d in self._damage}
        for d in ranges:
            if (d.journal, d.first_seq, d.offset) in known:
                continue
            self._damage.append(d)
            log.error(
                "journal %s damaged at offset %d (%s): seqs %d..%s not readable",
                d.path, d.offset, d.reason, d.first_seq,
                d.last_seq if d.last_seq is not None else "?",
            )  # fmt: skip
            self._emit("journal_damaged", d.to_dict())
        if ranges and journal.finished and journal.sealed:
            await self._fence(journal, ranges[0].found_by)
        elif index_bad and not ranges:
            await self._rebuild_index(journal)

    async def _fence(self, journal: Journal, found_by: FoundBy) -> None:
        """Fence the damage of a finished journal: it is written anew with placeholders
        for its damaged records (server/txlog/recovery/online.py) and swapped in; the records after
        the damage stay readable."""
        async with self._retention.lock:
            if self._state != _OPEN or journal not in self._journals.items:
                return  # removed meanwhile
            index = journal.index
            source = journal.source
            assert isinstance(index, SealedIndex) and source is not None
            items = self._journals.items
            at = items.index(journal)
            neighbours = neighbours_of(
                [j.index for j in items[:at]], [j.index for j in items[at + 1 : at + 5]]
            )
            source.acquire()
            try:
                mended = await asyncio.to_thread(
                    fence_journal, path=journal.path, source=source, base=journal.base,
                    last_seq=journal.last_seq, hints=block_hints(index, index.data_len),
                    index=index, neighbours=neighbours, journal_dir=self._dir,
                    instance=self.instance, seam=self._seam, block_bytes=self._block_bytes,
                    found_by=found_by, found_us=time_us(self._clock),
                )  # fmt: skip
            except OSError as exc:
                log.error("journal %s not fenced: %s", journal.path, exc)
                self._emit("fence_failed", {"journal": journal.base, "error": str(exc)})
                return
            finally:
                source.release()
            if mended is None:
                return
            self._swap(journal, mended)
            source.retire()
            own_before = self._publishers.last(self._own_pub)
            for fence in mended.fences:
                self._fences.add(fence)
                self._name_publishers(fence)
                if fence.exact:
                    for pub, lo, hi in fence.identities:
                        self._publishers.lost(pub, lo, hi)
                self._emit("journal_fenced", fence.to_dict())
            if self._publishers.last(self._own_pub) > own_before:
                await self._save_floor()
            fenced = mended.fences
            self._damage = [
                d
                for d in self._damage
                if d.journal != journal.base
                or not any(f.first_seq <= d.first_seq <= f.last_seq for f in fenced)
            ]

    def _name_publishers(self, fence: Fence, in_fences: dict[int, int] | None = None) -> None:
        """Add to an inexact fence the publishers it does not name yet, the instance's
        own records among them (:func:`~spool.server.txlog.damage.fenceplan.unnamed_intervals`): they
        are what its repair asks for and its holdings claim, like any publisher's. With
        none of its own records after the fence, its next ones must not take the
        bookmarks of those in it: its highest sequence moves past the interval (the
        sequences passed over become a gap, so the repaired ones, or one sent back late
        after a release, fill it). A publisher with none of its records after the fence
        is named up to its highest: the publisher table's, or at open the one
        ``clients.ack`` names in a fence (``in_fences``), which the table leaves out."""
        highest = {key: last for key, (last, _seq) in self._publishers.table.items()}
        for key, top in (in_fences or {}).items():
            highest[key] = max(highest.get(key, 0), top)
        added = unnamed_intervals(
            fence, self._own_pub, self._journals.items, own_floor=self._own_floor,
            highest=highest,
        )  # fmt: skip
        if not added:
            return
        fence.identities = sorted([*fence.identities, *added])
        for key, _lo, hi in added:
            last = self._publishers.last(self._own_pub)
            if key == self._own_pub and last < hi:
                self._publishers.skip(self._own_pub, hi - last)

    def _numbered(self) -> None:
        """An own record was appended: past half of what the floor leaves ahead, the
        next floor is written, in the background, long before an append gets there."""
        if self._publishers.last(self._own_pub) > self._own_floor - RESERVE // 2:
            self._number_ahead()

    def _number_ahead(self) -> None:
        """Write the next floor in the background, unless a write is under way or the
        last one failed less than :data:`FLOOR_RETRY` seconds ago."""
        task = self._floor_task
        failed = self._floor_failed_at
        if failed is not None and self._clock.monotonic() - failed < FLOOR_RETRY:
            return
        if task is None or task.done():
            self._floor_task = asyncio.get_running_loop().create_task(
                self._save_floor(), name=f"spool-ownfloor-{self.instance}"
            )

    async def _save_floor(self) -> None:
        """Write the own identity's floor (server/txlog/publishers/ownfloor.py): its highest, and
        :data:`RESERVE` above it when it numbers ahead. A skip no record backs yet then
        survives a restart, and so does every number handed out below the floor. A
        failure is reported; the skip holds in memory (the next record of the identity
        backs it once durable), and numbering ahead stops at the last floor written
        until a later write succeeds."""
        async with self._floor_lock:
            floor = self._publishers.last(self._own_pub)
            if self._own_ahead:
                floor += RESERVE
            if floor <= self._own_floor:
                return
            await self._write_floor(floor)

    async def _write_floor(self, floor: int) -> None:
        try:
            await asyncio.to_thread(
                write_floor, self._seam, self._dir, self.instance, self._incarnation, floor
            )
        except OSError as exc:
            log.error(
                "transaction log %s: the floor %d of its own identity was not written (%s); "
                "a restart before its next own record is durable may reuse a bookmark",
                self.instance, floor, exc,
            )  # fmt: skip
            self._emit("own_floor_failed", {"floor": floor, "error": str(exc)})
            self._floor_failed_at = self._clock.monotonic()
            return
        self._floor_failed_at = None
        self._own_floor = floor

    def holds(self, pub_hash: int, pub_seq: int) -> bool:
        """Whether the log holds this bookmark outside its fences (as the publisher
        table knows it: up to the publisher's highest, not in one of its gaps)."""
        return self._publishers.holds(pub_hash, pub_seq)

    async def fill_fence(
        self, first_seq: int, records: list[Record], *, released: int = 0, kept: int = 0
    ) -> Fence:
        """Write ``records`` back in place of the placeholders of the fence that starts at
        ``first_seq``, under its seqs, in order (a repair found them: server/txlog/recovery/online.py).

        Args:
            first_seq: the fence.
            records: its records, in the order they take its seqs (their seqs and flags are
                not used; their time, bookmark, topic, kind, path and contents are).
            released: placeholders left after them, released: records of the fence that
                reached the log elsewhere meanwhile (nobody waits for them here).
            kept: placeholders left after them that stay fenced (a repair found part of an
                inexact fence's records): a fence of those seqs, with the same
                description, takes its place in :attr:`fences`.

        Returns:
            The fence, which is gone from :attr:`fences`.

        Raises:
            ValueError: no such fence, or the records and released placeholders do not
                make up its seqs.
            OSError: the journal could not be written (the fence stays).
        """
        async with self._retention.lock:
            self._check_open()
            fence = self._fences.covering(first_seq)
            if fence is None or fence.first_seq != first_seq:
                raise ValueError(f"no fence starts at seq {first_seq}")
            journal = self._journals.holding(first_seq)
            source = journal.source
            assert source is not None
            items = self._journals.items
            highest: dict[int, int] = {}
            for j in items[: items.index(journal)]:
                for p in j.index.publishers():
                    if p.max_pub_seq > highest.get(p.pub_hash, 0):
                        highest[p.pub_hash] = p.max_pub_seq
            source.acquire()
            try:
                mended = await asyncio.to_thread(
                    fill_journal, path=journal.path, source=source, base=journal.base,
                    fence=fence, records=records, released=released, highest_before=highest,
                    instance=self.instance, seam=self._seam, block_bytes=self._block_bytes,
                    kept=kept,
                )  # fmt: skip
            finally:
                source.release()
            self._swap(journal, mended)
            source.retire()
            self._fences.remove(first_seq)
            for rest in mended.fences:
                rest.repair = fence.repair
                self._fences.add(rest)
            seq = first_seq
            for rec in records:
                self._publishers.restored(rec.pub_hash, rec.pub_seq, seq)
                seq += 1
            event = "fence_repaired" if records else "fence_released"
            self._emit(event, {
                **fence.to_dict(), "written": len(records), "released": released, "kept": kept,
            })  # fmt: skip
        for cb in self._fill_listeners:
            cb(fence.first_seq, fence.last_seq)
        return fence

    async def release_fence(self, first_seq: int) -> Fence:
        """Stop waiting for the records of the fence that starts at ``first_seq``: an
        operator accepts their loss (no peer holds them). Its placeholders stay, marked
        released; readers pass over them from now on, and their seqs stay taken.

        Raises:
            ValueError: no fence starts there.
            OSError: the journal could not be written (the fence stays).
        """
        fence = self._fences.covering(first_seq)
        if fence is None or fence.first_seq != first_seq:
            raise ValueError(f"no fence starts at seq {first_seq}")
        self._given_up.append((fence.first_seq, fence.last_seq))
        try:
            return await self.fill_fence(first_seq, [], released=fence.records)
        except BaseException:
            self._given_up.remove((fence.first_seq, fence.last_seq))
            raise

    def released_in(self, first_seq: int, last_seq: int) -> list[tuple[int, int]]:
        """The seqs of ``first_seq..last_seq`` an operator released since the log opened
        (:meth:`release_fence`), as ranges: what they held is lost here, unlike seqs a
        repair wrote back. A range repaired in part and released in part has both."""
        return [
            (max(lo, first_seq), min(hi, last_seq))
            for lo, hi in self._given_up
            if lo <= last_seq and hi >= first_seq
        ]

    def _swap(self, journal: Journal, mended: Mended) -> None:
        """A journal written anew replaces the old one (readers in flight keep the old
        file and mapping open until they are done)."""
        self._space.resize(journal.disk_size, mended.size)
        journal.path = mended.path
        journal.source = mended.source
        journal.index = mended.index
        journal.durable_len = mended.index.data_len
        journal.compression = None
        journal.disk_size = mended.size

    async def _rebuild_index(self, journal: Journal) -> None:
        index = journal.index
        if not isinstance(index, SealedIndex) or index.path is None:
            return
        path = index.path
        self._emit("index_damaged", {"journal": journal.base, "path": str(path)})
        try:
            fresh = await asyncio.to_thread(
                reindex, journal.path, journal.compression, journal.base, path,
                block_bytes=self._block_bytes, data_len=index.data_len,
            )  # fmt: skip
        except OSError as exc:  # moved meanwhile, or a disk that refuses the write
            log.warning("index %s not rebuilt: %s", path, exc)
            return
        if fresh is not None:
            # readers in flight may still use the old mapping: it closes when they drop it
            journal.index = fresh
            self._emit("index_rebuilt", {"journal": journal.base, "path": str(path)})

    # -- statistics ---------------------------------------------------------------------

    def stats(self) -> dict[str, float]:
        """Counters and gauges for the dashboard and /metrics."""
        last = self._pending.last_seq
        return {
            "appended": float(last - self._open_seq),
            "last_seq": float(last),
            "first_seq": float(self.first_seq) if len(self._journals) else 0.0,
            "pending_records": float(last - self._commit.durable_seq),
            "journals": float(len(self._journals)),
            "rolls": float(self._placement.rolls),
            "publishers": float(len(self._pubs)),
            "pins": float(len(self._retention.pins())),
            "tail_cache_bytes": float(self._tail.nbytes),
            "damaged_ranges": float(len(self._damage)),
            "fenced_ranges": float(len(self._fences)),
            "fenced_records": float(sum(f.records for f in self._fences)),
            "scrub_passes": float(self._scrubber.status.passes),
            "scrub_bytes": float(self._scrubber.bytes_read),
            **self._commit.stats(),
            **self._space.stats(),
            **recovery_stats(self._report),
        }


def _records_lost(report: RecoveryReport) -> int:
    """At most how many records recovery took from the end of the log: the seqs of
    durable records nothing names, and what the bytes cut could have held."""
    unnamed = 0
    for lost in report.unnamed:
        first, last = lost["first_seq"], lost["last_seq"]
        assert isinstance(first, int) and isinstance(last, int)
        unnamed += last - first + 1
    return unnamed + sum(t.bytes_cut // HEADER_SIZE + 1 for t in report.truncations if t.bytes_cut)


def _first_seq(fence: dict[str, object]) -> int:
    """The first seq of a fence as the recovery report describes it."""
    first = fence["first_seq"]
    assert isinstance(first, int)
    return first
