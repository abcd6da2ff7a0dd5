"""Delayed delivery: stored now, delivered at the due time.

A publish with ``deliver_at`` or ``deliver_after`` is stored at once as a ``SCHEDULED``
record and acked like any publish (server/publishing.py); nothing receives it then. This
service keeps every pending one in a :class:`~spool.server.delayed.dueindex.DueIndex` and
delivers it when it falls due::

    publish -> SCHEDULED record -> scheduled() -> DueIndex
    timer: pop what is due -> read the SCHEDULED records -> PublishPipeline.deliver_due
           -> DUE record appended -> live subscribers, SOW, queues, actions

The due record is written by each instance from its own clock, so a replica that holds
the scheduled record (replication carries it) delivers the message on time too, and a
replay delivers it where the due record is: in the order subscribers received it.

Start-up rebuilds the index from the ``NAME.delayed.ack`` checkpoint
(server/delayed/checkpoint.py) and the log after it: a scheduled record adds an entry, a
due record removes its message's entry. The service is a recovering publish stage that
applies to no topic, so the pipeline feeds it the log with the SOW and the queues. A pin
keeps the log from the smallest seq pending.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from spool.server.clock import Clock, sleep_or_wake, time_us
from spool.server.delayed import checkpoint
from spool.server.delayed.checkpoint import Checkpoint, CheckpointError, Covered
from spool.server.delayed.dueindex import DueEntries, DueEntry, DueIndex
from spool.server.publishing import PublishPipeline
from spool.server.stats.snapshot import DelayedCounters
from spool.server.stats.source import EventSink
from spool.server.txlog import CorruptRecord, FencedRecords, TransactionLog
from spool.server.txlog.errors import TxlogError
from spool.server.txlog.format.batch import RecordBatch
from spool.server.txlog.format.record import Record, RecordKind, split_schedule_field
from spool.server.txlog.retention.pins import Pin
from spool.server.txlog.storage.files import write_durable

__all__ = ["CHECKPOINT_INTERVAL", "DelayedDelivery", "DelayedInfo", "PendingMessage"]

#: how often the checkpoint is written when something changed (seconds)
CHECKPOINT_INTERVAL: Final = 10.0
#: how long a shutdown waits for the log to make the checkpoint's record durable
CLOSE_CHECKPOINT_TIMEOUT: Final = 10.0
#: most messages delivered in one step of the timer (the loop runs between steps)
DELIVERY_BATCH: Final = 1024
#: the longest the timer sleeps before it reads the wall clock again (seconds)
MAX_NAP: Final = 1.0
#: how long the timer waits before it tries again messages it could not deliver (the
#: log refused the due records, or a scheduled record is fenced until a repair)
RETRY_INTERVAL: Final = 1.0

_SCHEDULED: Final = int(RecordKind.SCHEDULED)
_DUE: Final = int(RecordKind.DUE)
_KINDS: Final = frozenset({_SCHEDULED, _DUE})


@dataclass(frozen=True, slots=True)
class PendingMessage:
    """One pending delayed message, as the admin listing shows it (no body)."""

    due_us: int
    seq: int
    topic: str
    bookmark: str


@dataclass(frozen=True, slots=True)
class DelayedInfo:
    """The pending delayed messages, counted."""

    pending: int
    next_due_us: int | None
    by_topic: dict[str, int]
    delivered: int
    waiting: bool


class DelayedDelivery:
    """The pending delayed messages of an instance and the timer that delivers them.

    Owned by the event loop. A publish stage for start-up only: it applies to no topic
    (the pipeline hands it scheduled runs through :meth:`scheduled`, not as a stage) and
    recovers from the log.

    Args:
        txlog: the transaction log (delayed messages need one).
        name: the instance's name (the origin of due messages).
        clock: due times and the timer's sleeps.
        events: the event log.
        checkpoint_path: ``NAME.delayed.ack`` (None: no checkpoint, start-up reads the
            whole log).
    """

    def __init__(
        self,
        txlog: TransactionLog,
        name: str,
        clock: Clock,
        events: EventSink,
        checkpoint_path: Path | None,
    ) -> None:
        self._txlog = txlog
        self._pipeline: PublishPipeline | None = None
        self._name = name
        self._clock = clock
        self._events = events
        self._path = checkpoint_path
        self.index = DueIndex()
        #: pending messages per topic (an entry keeps no topic: its record has it)
        self.by_topic: Counter[str] = Counter()
        #: messages delivered (due records written) since start-up
        self.delivered = 0
        #: entries taken from the index whose due records are not written yet
        self._in_flight: list[DueEntry] = []
        #: until when delivery pauses after the log refused due records (0: not paused)
        self._paused_until_us = 0
        #: messages set aside while their scheduled records are fenced, and until when
        self._deferred: list[DueEntry] = []
        self._deferred_until_us = 0
        self._wake = asyncio.Event()
        self._timer: asyncio.Task[None] | None = None
        self._saver: asyncio.Task[None] | None = None
        self._pin: Pin | None = None
        #: the take-ins of repaired ranges in progress (:meth:`take_repaired`)
        self._repairs: set[asyncio.Task[int]] = set()
        #: fences whose lost due records were looked for (:meth:`audit_fences`)
        self._audited: set[tuple[int, int]] = set()
        #: the checkpoint's covered record (0: none) and whether entries changed since
        self._covered = 0
        self._changed = False
        #: start-up: the checkpoint's entries, the scheduled records read after it (by
        #: identity: due time, seq) and the due records read after it whose scheduled
        #: record is not among those (by identity: topic); None once recovered
        self._recovering: _Recovery | None = _Recovery()

    def attach(self, pipeline: PublishPipeline) -> None:
        """Deliver through ``pipeline``, and take the delayed messages it stores."""
        self._pipeline = pipeline
        pipeline.delayed = self

    # -- the publish path --------------------------------------------------------------

    def applies_to(self, topic: str) -> bool:
        """No topic's publishes go through this stage: it only recovers."""
        return False

    def scheduled(
        self,
        topic: str,
        pub_hash: int,
        pub_seqs: Sequence[int],
        first_seq: int,
        dues: Sequence[int],
    ) -> None:
        """Records ``first_seq`` onward were stored, due at ``dues``."""
        index = self.index
        head = index.peek()
        for i, due in enumerate(dues):
            index.add(due, first_seq + i, pub_hash, pub_seqs[i])
        self.by_topic[topic] += len(dues)
        self._changed = True
        if self._pin is None and self._recovering is None:
            self._pin = self._txlog.pin("delayed", first_seq)
        if head is None or min(dues) < head:
            self._wake.set()

    # -- start-up -----------------------------------------------------------------------

    async def load_checkpoint(self) -> None:
        """Start-up, before the log is read: the entries of the checkpoint, when it is
        one this log wrote; otherwise (missing, unreadable, or naming a record the log
        does not hold) recovery reads the whole log, and an event says why."""
        path = self._path
        if path is None:
            return
        why = ""
        loaded: Checkpoint | None = None
        try:
            data = await asyncio.to_thread(_read, path)
            if data is not None:
                loaded = checkpoint.decode(data)
                c = loaded.covered
                why = await self._txlog.not_holding(
                    c.seq, c.pub_hash, c.pub_seq, c.timestamp_us, "the checkpoint's covered record"
                )
        except (OSError, CheckpointError, TxlogError) as exc:
            why = f"{type(exc).__name__}: {exc}"
        if why:
            self._events.emit("warning", "delayed", "delayed_checkpoint_ignored",
                              path=str(path), reason=why)  # fmt: skip
        if loaded is None or why:
            return
        self._covered = loaded.covered.seq
        assert self._recovering is not None
        self._recovering.loaded = loaded.entries
        self.by_topic = Counter(loaded.by_topic)

    def recover_from(self) -> int:
        """The first record recovery must read: the one after the checkpoint's."""
        return self._covered + 1

    def recover(self, batch: RecordBatch) -> None:
        """A batch of the log at start-up: scheduled records add, due records remove."""
        rec = self._recovering
        assert rec is not None
        if batch.kinds().isdisjoint(_KINDS) or batch.last_seq <= self._covered:
            return
        first = batch.first_seq
        for i in range(len(batch)):
            kind = batch.kind(i)
            if first + i <= self._covered or (kind != _SCHEDULED and kind != _DUE):
                continue
            identity = (batch.pub_hashes[i], batch.pub_seqs[i])
            if kind == _SCHEDULED:
                due, _field = split_schedule_field(batch.sow_key(i))
                rec.scanned[identity] = (due, first + i)
                self.by_topic[batch.topics[i]] += 1
            elif rec.scanned.pop(identity, None) is not None:
                self._count_out(batch.topics[i])
            else:
                rec.delivered[identity] = batch.topics[i]

    def recovered(self) -> None:
        """Start-up, after the log was read: the index holds what is pending, the log is
        pinned, the timer and the checkpoint writer start."""
        rec = self._recovering
        assert rec is not None
        self._recovering = None
        index = self.index
        delivered = rec.delivered
        for due, seq, pub_hash, pub_seq in rec.loaded:
            topic = delivered.get((pub_hash, pub_seq))
            if topic is None:
                index.add(due, seq, pub_hash, pub_seq)
            else:
                self._count_out(topic)  # delivered after the checkpoint was written
        for (pub_hash, pub_seq), (due, seq) in rec.scanned.items():
            index.add(due, seq, pub_hash, pub_seq)
        self._move_pin()
        self._events.emit(
            "info", "delayed", "delayed_recovered", pending=len(self.index),
            from_seq=self._covered + 1,
        )  # fmt: skip
        self._txlog.add_fill_listener(self._filled)
        loop = asyncio.get_running_loop()
        self._timer = loop.create_task(self._run_timer(), name="spool-delayed-timer")
        if self._path is not None:
            self._saver = loop.create_task(self._run_saver(), name="spool-delayed-checkpoint")

    # -- repaired records ---------------------------------------------------------------

    def _filled(self, first_seq: int, last_seq: int) -> None:
        """A repair wrote fenced records back (or an operator released them): scheduled
        records among them that recovery could not read are taken in."""
        if self._timer is None:
            return  # stopping
        task = asyncio.get_running_loop().create_task(self.take_repaired(first_seq, last_seq))
        self._repairs.add(task)
        task.add_done_callback(self._repairs.discard)

    async def take_repaired(self, first_seq: int, last_seq: int) -> int:
        """Add the scheduled records of ``first_seq..last_seq`` that are not pending and
        whose message was not delivered here: no due record of its bookmark after it in
        the log (read to its end, so a due record written long after its due time is
        found too). Returns how many were added."""
        found = await self._undelivered(first_seq, last_seq, None)
        if found is None:
            return 0
        self._take_back(found)
        if found:
            self._events.emit("info", "delayed", "delayed_repaired", added=len(found),
                              first_seq=first_seq, last_seq=last_seq)  # fmt: skip
        return len(found)

    async def audit_fences(self) -> int:
        """Deliver again the messages whose due records a fence holds: a due record is
        local to this log, so no peer can repair it, and without it a replay here would
        never deliver its message. Each fence is audited once: the scheduled records
        before it that fell due by the end of its time window, are not pending, and have
        no due record anywhere the log can be read (before the fence or after it) are
        delivered again. Reads the whole log, in worker threads. Returns how many
        messages were taken back in.
        """
        txlog = self._txlog
        added = 0
        for fence in list(txlog.fences):
            key = (fence.first_seq, fence.last_seq)
            if key in self._audited:
                continue
            found = await self._undelivered(txlog.first_seq, fence.first_seq - 1, fence.window[1])
            if found is None:
                continue  # the log could not be read: the next pass tries again
            self._audited.add(key)
            self._take_back(found)
            if found:
                self._events.emit(
                    "warning", "delayed", "delayed_due_records_lost", messages=len(found),
                    first_seq=fence.first_seq, last_seq=fence.last_seq,
                    detail="due records in fenced records cannot be repaired from peers: "
                    "these messages are delivered again",
                )  # fmt: skip
            added += len(found)
        return added

    async def _undelivered(
        self, first_seq: int, last_seq: int, due_by: int | None
    ) -> list[tuple[str, int, int, int, int]] | None:
        """The scheduled records of ``first_seq..last_seq`` (due by ``due_by`` when given)
        that are not pending and have no due record in the readable log after them, as
        ``(topic, pub_hash, pub_seq, seq, due_us)``; None when the log could not be read.

        One pass from ``first_seq`` to the log's end as it is now: a scheduled record
        becomes a candidate where it is read, and a due record of its bookmark read later
        takes it out; fenced ranges are passed over (their due records are the lost ones).
        """
        txlog = self._txlog
        pending = set(self.index.entries().seq)
        pending.update(entry[1] for entry in (*self._in_flight, *self._deferred))
        candidates: dict[tuple[int, int], tuple[str, int, int]] = {}
        end = txlog.last_seq
        seq = first_seq
        while seq <= end:
            try:
                batch = await txlog.read_view(seq, max_count=4096, upto_seq=end)
            except FencedRecords as exc:
                seq = exc.last_seq + 1
                continue
            except TxlogError as exc:
                self._events.emit("warning", "delayed", "delayed_scan_unread",
                                  first_seq=seq, error=str(exc))  # fmt: skip
                return None
            if not len(batch):
                break
            kinds = batch.kinds()
            if _SCHEDULED in kinds or (_DUE in kinds and candidates):
                first = batch.first_seq
                for i in range(len(batch)):
                    kind = batch.kind(i)
                    at = first + i
                    if kind == _DUE:
                        candidates.pop((batch.pub_hashes[i], batch.pub_seqs[i]), None)
                    elif kind == _SCHEDULED and at <= last_seq and at not in pending:
                        due, _field = split_schedule_field(batch.sow_key(i))
                        if due_by is None or due <= due_by:
                            identity = (batch.pub_hashes[i], batch.pub_seqs[i])
                            candidates[identity] = (batch.topics[i], at, due)
            seq = batch.last_seq + 1
            await asyncio.sleep(0)
        return [(topic, h, s, at, due) for (h, s), (topic, at, due) in candidates.items()]

    def _take_back(self, found: list[tuple[str, int, int, int, int]]) -> None:
        """Make these messages pending again (delivered when due: at once, when past)."""
        for topic, pub_hash, pub_seq, seq, due in found:
            self.scheduled(topic, pub_hash, [pub_seq], seq, [due])
        if found:
            self._move_pin()

    # -- delivery -----------------------------------------------------------------------

    async def _run_timer(self) -> None:
        index = self.index
        while True:
            self._wake.clear()
            now = time_us(self._clock)
            if self._deferred and now >= self._deferred_until_us:
                for entry in self._deferred:
                    index.add(*entry)
                self._deferred = []
            head = index.peek()
            if head is not None:
                head = max(head, self._paused_until_us)
            target = min(
                (t for t in (head, self._deferred_until_us if self._deferred else None)
                 if t is not None),
                default=None,
            )  # fmt: skip
            if target is None or target > now:
                # due times are wall-clock times and the nap runs on the loop's clock:
                # it is cut to MAX_NAP, so a wall clock stepped back (NTP, an operator)
                # delays deliveries by at most that much, never by the size of the step
                wait = None if target is None else min((target - now) / 1_000_000, MAX_NAP)
                await sleep_or_wake(self._clock, wait, self._wake)
                continue
            await self.deliver_due(now)
            await asyncio.sleep(0)  # the loop runs between two steps

    async def deliver_due(self, now_us: int) -> int:
        """Deliver up to :data:`DELIVERY_BATCH` messages due by ``now_us`` (the timer's
        step; tests call it directly). Returns how many were delivered.

        Two failures wait and try again: a log that refuses the due records (a full or
        failing disk) pauses every delivery for :data:`RETRY_INTERVAL`, the messages
        staying pending in order; a scheduled record that is fenced (damaged, awaiting a
        repair) sets that message aside for as long, and the others go on.
        """
        pipeline = self._pipeline
        assert pipeline is not None
        entries = self.index.pop_due(now_us, DELIVERY_BATCH)
        if not entries:
            return 0
        self._in_flight = entries
        try:
            records, fenced = await self._read(entries)
        except TxlogError as exc:
            self._pause(entries, f"{type(exc).__name__}: {exc}")
            return 0
        if fenced:
            self._set_aside([e for e in entries if e[1] in fenced])
            keep = [i for i, e in enumerate(entries) if e[1] not in fenced]
            entries = [entries[i] for i in keep]
            records = [records[i] for i in keep]
        done = 0
        # runs of one topic, publisher and path, in due order
        i = 0
        n = len(entries)
        while i < n:
            record = records[i]
            if record is None:
                self._lost(entries[i])
                i += 1
                done += 1
                continue
            j = i + 1
            while j < n and _same_run(records[j], record):
                j += 1
            run = [r for r in records[i:j] if r is not None]
            k = pipeline.deliver_due(self._name, run)
            self.delivered += k
            self._count_out(record.topic, k)
            done += k
            if k < j - i:
                self._pause(entries[i + k :], "the transaction log refused the due records")
                return done
            i = j
        self._in_flight = []
        self._paused_until_us = 0
        self._changed = True
        self._move_pin()
        return done

    async def _read(self, entries: list[DueEntry]) -> tuple[list[Record | None], set[int]]:
        """The scheduled record of each entry (None: the log does not hold it as it was
        stored), reading runs of consecutive seqs at once; and the seqs that are fenced
        (unreadable until a repair writes them back).

        Raises:
            TxlogError: the log cannot be read (closed, or damage no check found yet).
        """
        seqs = sorted({entry[1] for entry in entries})
        found: dict[int, Record] = {}
        fenced: set[int] = set()
        checked: set[int] = set()  # reads whose damage was fenced after they failed
        i = 0
        txlog = self._txlog
        while i < len(seqs):
            j = i + 1
            while j < len(seqs) and seqs[j] == seqs[j - 1] + 1:
                j += 1
            lo, hi = seqs[i], seqs[j - 1]
            seq = lo
            while seq <= hi:
                try:
                    batch = await txlog.read_appended(seq, max_count=hi - seq + 1, upto_seq=hi)
                except FencedRecords as exc:
                    fenced.update(range(max(seq, exc.first_seq), min(hi, exc.last_seq) + 1))
                    seq = max(seq, exc.last_seq) + 1
                    continue
                except CorruptRecord:
                    # damage no check had found yet: fenced now (its peers repair it),
                    # then read again; when it cannot be fenced, the error stands
                    if seq not in checked and await txlog.fence_damage_at(seq):
                        checked.add(seq)
                        continue
                    raise
                if not batch:
                    break
                found.update((r.seq, r) for r in batch)
                seq = batch[-1].seq + 1
            i = j
        out: list[Record | None] = []
        for _due, seq, pub_hash, pub_seq in entries:
            got = found.get(seq)
            if (
                got is None
                or got.kind != RecordKind.SCHEDULED
                or (got.pub_hash, got.pub_seq) != (pub_hash, pub_seq)
            ):
                out.append(None)
            else:
                out.append(got)
        return out, fenced

    def _count_out(self, topic: str, n: int = 1) -> None:
        left = self.by_topic[topic] - n
        if left > 0:
            self.by_topic[topic] = left
        else:
            self.by_topic.pop(topic, None)

    def _lost(self, entry: DueEntry) -> None:
        """An entry whose scheduled record is not in the log as it was stored (retention
        or an operator removed it): nothing to deliver; reported. (Its topic is unknown
        without the record, so the count per topic keeps it.)"""
        due, seq, pub_hash, pub_seq = entry
        self._events.emit(
            "error", "delayed", "delayed_record_missing", seq=seq,
            bookmark=f"{pub_hash}|{pub_seq}|", due_us=due,
            detail="the scheduled record of this delayed message is not in the log: "
            "it cannot be delivered",
        )  # fmt: skip

    def _pause(self, entries: Sequence[DueEntry], why: str) -> None:
        """The log refused the due records: put the messages back and pause every
        delivery for :data:`RETRY_INTERVAL` (reported once per pause)."""
        for entry in entries:
            self.index.add(*entry)
        self._in_flight = []
        if not self._paused_until_us:
            self._events.emit("warning", "delayed", "delayed_delivery_waiting",
                              pending=len(self.index), reason=why)  # fmt: skip
        self._paused_until_us = time_us(self._clock) + int(RETRY_INTERVAL * 1_000_000)

    def _set_aside(self, entries: Sequence[DueEntry]) -> None:
        """Messages whose scheduled records are fenced: tried again after
        :data:`RETRY_INTERVAL` (a repair may have written them back by then)."""
        if not self._deferred:
            self._events.emit("warning", "delayed", "delayed_record_fenced",
                              messages=len(entries), first_seq=min(e[1] for e in entries))  # fmt: skip
        self._deferred.extend(entries)
        self._deferred_until_us = time_us(self._clock) + int(RETRY_INTERVAL * 1_000_000)

    # -- retention and the checkpoint ---------------------------------------------------

    def _hold_from(self) -> int | None:
        """The first seq the log must keep: the lowest pending record (None: nothing is
        pending, nothing is held).

        Nothing more is needed for recovery: a due record comes after its scheduled
        record, so retention never takes a due record and keeps its scheduled one, and a
        checkpoint whose covered record is gone is ignored (the whole log is read)."""
        bound = self.index.lowest_seq_bound()
        low = min((entry[1] for entry in (*self._in_flight, *self._deferred)), default=None)
        held = [b for b in (bound, low) if b is not None]
        return max(1, min(held)) if held else None

    def _move_pin(self) -> None:
        hold = self._hold_from()
        if hold is None:
            if self._pin is not None:
                self._pin.release()
                self._pin = None
        elif self._pin is None:
            self._pin = self._txlog.pin("delayed", hold)
        else:
            self._pin.move(hold)

    async def save_checkpoint(self) -> bool:
        """Write the checkpoint if anything changed since the last one, or the log moved
        on (start-up reads less): the entries now
        (those being delivered included: the due records written after the covered one
        remove them at start-up), the log made durable through its last record, then
        the file (temp, fsync, rename) in a thread. Returns whether a file was written."""
        path, txlog = self._path, self._txlog
        end = txlog.last_seq
        if path is None or end < 1 or (not self._changed and end == self._covered):
            return False
        entries = self.index.entries()
        if self._in_flight or self._deferred:
            entries = DueEntries.of([*entries, *self._in_flight, *self._deferred])
        by_topic = dict(self.by_topic)
        self._changed = False
        await txlog.wait_durable(end)
        batch = await txlog.read_view(end, max_count=1, upto_seq=end)
        if len(batch) != 1:
            self._changed = True
            return False  # retention took it meanwhile: the next pass names a newer one
        covered = Covered(end, batch.pub_hashes[0], batch.pub_seqs[0], batch.timestamps_us[0])
        data = checkpoint.encode(covered, entries, by_topic)
        await asyncio.to_thread(_write, txlog, path, data)
        self._covered = end
        self._move_pin()
        return True

    async def _run_saver(self) -> None:
        while True:
            if self._txlog.fences:
                try:
                    await self.audit_fences()
                except (OSError, TxlogError) as exc:  # tried again at the next pass
                    self._events.emit("warning", "delayed", "delayed_audit_failed",
                                      error=f"{type(exc).__name__}: {exc}")  # fmt: skip
            await self._clock.sleep(CHECKPOINT_INTERVAL)
            await self._save_or_report()

    async def _save_or_report(self) -> None:
        try:
            await self.save_checkpoint()
        except (OSError, TxlogError) as exc:
            self._changed = True
            # nothing is lost: the previous checkpoint is earlier, recovery reads more
            self._events.emit("warning", "delayed", "delayed_checkpoint_failed",
                              error=f"{type(exc).__name__}: {exc}")  # fmt: skip

    async def close(self) -> None:
        """Shutdown: stop the timer, write the checkpoint (the log is still open),
        release the pin."""
        started = self._saver is not None
        for task in (self._timer, self._saver):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._timer = self._saver = None
        for repair in list(self._repairs):  # a restart reads the repaired records again
            repair.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await repair
        if started:
            self._changed = True
            try:
                await asyncio.wait_for(self._save_or_report(), CLOSE_CHECKPOINT_TIMEOUT)
            except TimeoutError:
                self._events.emit("warning", "delayed", "delayed_checkpoint_failed",
                                  error="the log did not become durable in time at shutdown")  # fmt: skip
        if self._pin is not None:
            self._pin.release()
            self._pin = None

    # -- admin --------------------------------------------------------------------------

    def info(self) -> DelayedInfo:
        """The pending messages counted, per topic, and the next due time."""
        return DelayedInfo(
            pending=len(self.index) + len(self._in_flight) + len(self._deferred),
            next_due_us=self.index.peek(),
            by_topic=dict(sorted(self.by_topic.items())),
            delivered=self.delivered,
            waiting=bool(self._paused_until_us or self._deferred),
        )

    def counters(self) -> DelayedCounters:
        """What the metrics count of it (server/metrics.py)."""
        return {"pending": self.info().pending, "delivered": self.delivered}

    async def upcoming(self, after: tuple[int, int] | None, limit: int) -> list[PendingMessage]:
        """A page of pending messages in due order (no bodies), from the position
        ``after`` (a ``(due_us, seq)``); their topics are read from their records."""
        page = self.index.upcoming(after, limit)
        records = (await self._read(page))[0] if page else []
        return [
            PendingMessage(due, seq, record.topic if record is not None else "",
                           f"{pub_hash}|{pub_seq}|")
            for (due, seq, pub_hash, pub_seq), record in zip(page, records, strict=True)
        ]  # fmt: skip


@dataclass(slots=True)
class _Recovery:
    """What start-up gathers before the index is built (:meth:`DelayedDelivery.recovered`):
    the checkpoint's entries go into the index as they are, less those delivered since,
    so a million pending messages are never held twice."""

    loaded: DueEntries = field(default_factory=lambda: DueEntries.of(()))
    scanned: dict[tuple[int, int], tuple[int, int]] = field(default_factory=dict)
    delivered: dict[tuple[int, int], str] = field(default_factory=dict)


def _same_run(record: Record | None, first: Record) -> bool:
    """Whether ``record`` goes in one due run with ``first`` (one topic, publisher and
    path: the unit of :meth:`TransactionLog.append_due`)."""
    return (
        record is not None
        and record.topic == first.topic
        and record.pub_hash == first.pub_hash
        and record.path == first.path
    )


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _write(txlog: TransactionLog, path: Path, data: bytes) -> None:
    write_durable(txlog.seam, path, data)
