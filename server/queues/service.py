"""The queues of an instance: their commands, deliveries, lease timer, start-up and admin.

:class:`QueueService` is what the broker sees of the queues (docs/queues.md):

- its publish stage (:attr:`QueueService.stage`, server/queues/stage.py);
- its command handlers, which the command table (server/commandtable.py) routes a
  queue's commands to: ``subscribe`` to a queue by name is a queue subscription
  (:meth:`QueueService.subscribe`; ``max_backlog`` is taken here and refused anywhere
  else), ``unsubscribe`` ends it (:meth:`QueueService.end`: its leases return to the
  queue), as does a ``replace`` by another kind of subscription once that one is
  accepted (the subscription service calls :meth:`QueueService.end` then, through the
  ends the command table gives it), and ``sow_delete`` on a queue is the consumer's
  ack (:meth:`QueueService.ack`): ``bm`` a bookmark list (``cancel``: give them back;
  ``expire``: drop them unprocessed) or ``f`` a filter (remove every matching message);
- a connection that closes ends its queue subscriptions (leases return at once);
- deliveries at the end of each loop turn, one dispatch per queue that changed, one
  ``send_messages`` per consumer connection;
- the lease / expiration timer on the injected clock;
- every removal logged as a ``QUEUE_ACK`` record, so a restart rebuilds each queue from
  the log (a local queue's: local seqs, no publisher identity, never replicated; a
  replicated queue's: bookmarks with the broker's identity, so replication sends them:
  server/queues/records.py);
- replicated queues (a ``Queue`` or ``GroupLocalQueue`` on an instance that replicates):
  each message's owner (server/queues/ownership.py) gates its delivery (the state
  machine's gate); their ownership traffic (link state, transfer requests from the timer,
  proxied transfer, ``QUEUE_TRANSFER`` records) is server/queues/transfers.py's, which
  this service owns (:attr:`QueueService.transfers`);
- a queue with a ``TargetQueueDepth`` keeps its inactive messages in the log only
  (server/queues/window.py); :attr:`QueueService.refills` reads them back as active ones
  leave (server/queues/refill.py), and the queue's pin holds the log from its cursor;
- the admin reads (``/api/queues``) and the metrics.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Final

import orjson

from spool.server.alerts import Alert
from spool.server.clock import Clock, sleep_or_wake, time_us
from spool.server.config import Config
from spool.server.expr import Filter, MessageView, compile_filter
from spool.server.happenings import Happenings
from spool.server.ports import DeadLetterFact, DeadLetterHappening, Entitlements
from spool.server.protocol.commands import Command
from spool.server.protocol.errors import (
    BadFilter,
    InvalidMessage,
    InvalidOptions,
    InvalidTopic,
    NotEntitled,
    ProtocolFailure,
    SubIdInUse,
    TxlogFull,
)
from spool.server.queues import checkpoint, deadletter
from spool.server.queues.browse import BrowsePage, browse
from spool.server.queues.checkpoint import (
    CHECKPOINT_INTERVAL,
    Checkpoint,
    CheckpointError,
    LastRecord,
    checkpoint_name,
    fingerprint,
)
from spool.server.queues.deadletter import DeadLetter
from spool.server.queues.errors import QueueNotFound
from spool.server.queues.hold import QueueHold, ResyncHold
from spool.server.queues.info import QueueInfo, describe
from spool.server.queues.machine import (
    ACKED,
    DELIVERED,
    REJECTED,
    AckResult,
    Consumer,
    QueueDelivery,
    QueuedMessage,
    Removal,
)
from spool.server.queues.records import encode_ack_bookmarks, encode_ack_seqs
from spool.server.queues.refill import Refills
from spool.server.queues.stage import QueueRuntime, QueueStage
from spool.server.queues.stuck import StuckWatch
from spool.server.queues.transfers import Transfers
from spool.server.session import Session
from spool.server.stats.snapshot import QueueCounters
from spool.server.stats.source import EventSink
from spool.server.subscription import SessionSubscription
from spool.server.subscriptions import SubscriptionService
from spool.server.txlog import TransactionLog
from spool.server.txlog.errors import TxlogError
from spool.server.txlog.format.record import RecordKind
from spool.server.txlog.storage.files import write_durable
from spool.server.wire import encode_queued

__all__ = ["QueueInfo", "QueueService"]

#: the options a queue subscription takes (anything else is refused, never ignored)
_SUBSCRIBE_OPTIONS: Final = frozenset({"max_backlog", "replace"})
#: the options of ``sow_delete`` on a queue
_ACK_OPTIONS: Final = frozenset({"cancel", "expire", "reject"})
#: the longest ``reason`` a consumer may give with ``reject`` (characters)
MAX_REJECT_REASON: Final = 1024
#: how often the stuck-queue watch looks at every queue (seconds)
STUCK_CHECK_INTERVAL: Final = 1.0
#: how long a shutdown waits for the last checkpoint (the log durable to its end, the
#: file written): a log refusing writes would hold it for ever (seconds)
CLOSE_CHECKPOINT_TIMEOUT: Final = 10.0


@dataclass(eq=False, slots=True)
class _Tie:
    """What a consumer is tied to: its connection, subscription and queue."""

    session: Session
    sub: SessionSubscription
    queue: QueueRuntime


class QueueService:
    """Every queue of an instance. Owned by the event loop.

    Args:
        config: the ``SOW`` queues.
        txlog: the transaction log (queues need one: the configuration says so).
        subscriptions: the subscription service (its quotas).
        entitlements: read (subscribe, ack) and write (``sow_delete`` by filter).
        events: the event log.
        clock: lease and expiration times.
        happenings: told of the dead letters published (None: no one).
    """

    def __init__(
        self,
        config: Config,
        txlog: TransactionLog | None,
        subscriptions: SubscriptionService,
        entitlements: Entitlements,
        events: EventSink,
        clock: Clock,
        happenings: Happenings | None = None,
    ) -> None:
        self._txlog = txlog
        self._happenings = happenings
        self._subscriptions = subscriptions
        self._auth = entitlements
        self._events = events
        self._clock = clock
        self.queues: dict[str, QueueRuntime] = {
            q.name: QueueRuntime.build(
                q, clock, config.name, replicated=config.replicates and q.kind != "LocalQueue"
            )
            for q in config.queues
        }
        #: the replicated queues' ownership traffic (server/queues/transfers.py)
        self.transfers = Transfers(self.queues.values(), self._append, self.kick, events, clock)
        self.stage = QueueStage(list(self.queues.values()), self.kick, self.transfers.send)
        self.stage.on_refolded = self._refilled
        if txlog is not None:
            self.stage.own_pub_hash = lambda: txlog.own_pub_hash
        #: publishes a queue's dead letters to a topic, in the current turn, through the
        #: publish pipeline (set by the broker, which owns the pipeline): returns why it
        #: refused
        self.dead_letters: Callable[[str, Sequence[bytes]], ProtocolFailure | None] | None = None
        self.stage.now_us = lambda: time_us(clock)
        #: bounded queues' refills from the log (server/queues/refill.py)
        self.refills = Refills(txlog, self._refilled, events, clock)
        self._ties: dict[SessionSubscription, Consumer] = {}
        self._dirty: set[QueueRuntime] = set()
        self._scheduled = False
        self._wake = asyncio.Event()
        self._timer: asyncio.Task[None] | None = None
        self._target_us = 0
        self._waiting: set[Session] = set()
        self._log_failures = 0
        #: which queues are stuck (server/queues/stuck.py), looked at every second
        self.stuck = StuckWatch(events)
        self._watch: asyncio.Task[None] | None = None
        #: where each queue's recovery may start (server/queues/checkpoint.py)
        tl = config.transaction_log
        self._checkpoint_path = (
            tl.journal_directory / checkpoint_name(config.name) if tl is not None else None
        )
        self._prints = {
            name: fingerprint(q.config, q.ownership is not None) for name, q in self.queues.items()
        }
        self._saved: dict[str, int] = {}
        #: the last record the checkpoint on disk names (0: none): the queues' pins hold
        #: the log from it, so retention never makes that checkpoint unusable (a restart
        #: would read the whole log, and count the transfers from the log's start)
        self._saved_last = 0
        self._saver: asyncio.Task[None] | None = None
        #: what the queues hold back after a loss (server/queues/hold.py)
        self.hold = QueueHold()
        #: the queues with a hold on (their ``queue_held`` event was emitted)
        self._holding: set[str] = set()

    @property
    def peers(self) -> Callable[[], Iterable[str]] | None:
        """The instances with a live link into this one (set by the broker when it
        replicates): every other owner of a replicated queue's messages is offline."""
        return self.transfers.peers

    @peers.setter
    def peers(self, peers: Callable[[], Iterable[str]] | None) -> None:
        self.transfers.peers = peers

    @property
    def log_failures(self) -> int:
        """Queue records the log refused (acks, ownership changes)."""
        return self._log_failures + self.transfers.log_failures

    @property
    def enabled(self) -> bool:
        return bool(self.queues)

    # -- start and stop -----------------------------------------------------------------

    async def load_checkpoint(self) -> None:
        """Start-up, before the log is read: where each queue's recovery may start
        (server/queues/checkpoint.py). A file that is missing, unreadable, or names a
        record the log does not hold leaves every queue reading the whole log (an
        event says why); a queue whose definition changed reads the whole log."""
        path, txlog = self._checkpoint_path, self._txlog
        if path is None or txlog is None or not self.queues:
            return
        why = ""
        loaded: Checkpoint | None = None
        try:
            data = await asyncio.to_thread(checkpoint.read, path)
            if data is not None:
                loaded = checkpoint.decode(data)
                last = loaded.last
                why = await txlog.not_holding(
                    last.seq,
                    last.pub_hash,
                    last.pub_seq,
                    last.timestamp_us,
                    "the checkpoint's last record",
                )
        except (OSError, CheckpointError, TxlogError) as exc:
            why = f"{type(exc).__name__}: {exc}"
        if loaded is None or why:
            if why:
                self._events.emit("warning", "queue", "queue_checkpoint_ignored",
                                  path=str(path), reason=why)  # fmt: skip
            return
        self._saved_last = loaded.last.seq
        for name, q in self.queues.items():
            start = loaded.start_of(name, self._prints[name])
            if start:
                q.resume(start, loaded.last.seq, loaded.transferred[name],
                         loaded.seen.get(name, {}))  # fmt: skip
                self._saved[name] = start

    async def save_checkpoint(self) -> bool:
        """Write the checkpoint if a queue's start moved: the seqs now, then the log made
        durable up to its end now, then the file (temp, fsync, rename, the directory
        fsynced; through the log's file seam) in a thread. Returns whether a file was
        written."""
        path, txlog = self._checkpoint_path, self._txlog
        if path is None or txlog is None or not self.queues:
            return False
        end = txlog.last_seq
        seqs = {name: q.checkpoint_seq(q.hold_from(end), end) for name, q in self.queues.items()}
        if seqs == self._saved or end < 1:
            return False  # the file written stands: a replay from it counts what followed
        # taken with ``end`` (no await between): the counters and publisher positions
        # through record ``end``
        transferred = {
            name: (q.transferred_in, q.transferred_out) for name, q in self.queues.items()
        }
        seen = {
            name: q.ownership.seen() for name, q in self.queues.items() if q.ownership is not None
        }
        await txlog.wait_durable(end)
        batch = await txlog.read_view(end, max_count=1, upto_seq=end)
        if len(batch) != 1:
            return False  # retention took it meanwhile: the next pass names a newer one
        last = LastRecord(end, batch.pub_hashes[0], batch.pub_seqs[0], batch.timestamps_us[0])
        data = checkpoint.encode(Checkpoint(last, seqs, self._prints, transferred, seen))
        await asyncio.to_thread(write_durable, txlog.seam, path, data)
        self._saved = seqs
        self._saved_last = end
        for q in self.queues.values():
            if q.pin is not None:
                q.pin.move(self._hold_from(q))  # the checkpoint's last record moved
        return True

    async def _run_saver(self) -> None:
        """The checkpoint, every :data:`CHECKPOINT_INTERVAL` when it moved."""
        while True:
            await self._clock.sleep(CHECKPOINT_INTERVAL)
            await self._save_or_report()

    async def _save_or_report(self) -> None:
        try:
            await self.save_checkpoint()
        except (OSError, TxlogError) as exc:
            # nothing is lost: the previous checkpoint is earlier, recovery reads more
            self._events.emit("warning", "queue", "queue_checkpoint_failed",
                              error=f"{type(exc).__name__}: {exc}")  # fmt: skip

    def recovered(self) -> None:
        """Start-up, after the log was read: apply what the checkpoint knew of the
        messages before it (:meth:`QueueRuntime.recovered`), log the acks of dead letters
        a crash kept out of the log, pin the log from each queue's oldest message,
        report, start the timer."""
        txlog = self._txlog
        self.stage.recovered()
        for q, (seqs, bookmarks) in self.stage.unacked_dead().items():
            body = encode_ack_bookmarks(bookmarks) if q.ownership is not None else (
                encode_ack_seqs(seqs))  # fmt: skip
            failure = self._append(q, RecordKind.QUEUE_ACK, body, "dead_letter")
            self._events.emit(
                "warning" if failure is None else "error", "queue", "dead_letter_acked",
                queue=q.config.name, messages=len(seqs) + len(bookmarks),
                reason=str(failure) if failure is not None else "the ack was not in the log",
            )  # fmt: skip
        for q in self.queues.values():
            if txlog is not None:
                q.pin = txlog.pin(f"queue:{q.config.name}", self._hold_from(q))
            m = q.machine
            self._events.emit(
                "info", "queue", "queue_recovered", queue=q.config.name, depth=m.depth,
                messages=self.stage.recovered_messages, acks=self.stage.recovered_acks,
                from_seq=q.start_seq or (txlog.first_seq if txlog is not None else 0),
            )  # fmt: skip
        if self.queues:
            loop = asyncio.get_running_loop()
            self._timer = loop.create_task(self._run_timer())
            self._watch = loop.create_task(self._run_watch())
            if self._checkpoint_path is not None:
                self._saver = loop.create_task(self._run_saver())
            self._wake.set()
        for q in self.queues.values():
            self.refills.wanted(q)  # recovery stopped at the target: top the window up

    async def close(self) -> None:
        """Shutdown: stop the timer and the watch, write the checkpoint (the log is still
        open), release the pins."""
        started = self._saver is not None
        for task in (self._timer, self._watch, self._saver):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._timer = self._watch = self._saver = None
        if started:
            try:
                await asyncio.wait_for(self._save_or_report(), CLOSE_CHECKPOINT_TIMEOUT)
            except TimeoutError:
                # the previous checkpoint stands (earlier: only more is read at start-up)
                self._events.emit("warning", "queue", "queue_checkpoint_failed",
                                  error="the log did not become durable in time at shutdown")  # fmt: skip
        await self.refills.close()
        for q in self.queues.values():
            if q.pin is not None:
                q.pin.release()
                q.pin = None

    def unfolded(
        self, ranges: Sequence[tuple[int, int]], released: Sequence[tuple[int, int]] = ()
    ) -> None:
        """Fenced ranges the start-up rebuild went past that no repair gave back yet
        (server/publishing.py ``PublishPipeline.unfolded``): the queues' pins and
        checkpoints hold from them, and the messages recorded up to them are held
        (server/queues/hold.py), until they are taken in. ``released``: ranges that
        left because an operator released their fence, not because a repair wrote them
        back: what they held goes again (at least once), and an event says so."""
        self.stage.unfolded(ranges)
        for q in self.queues.values():
            if q.pin is not None:
                q.pin.move(self._hold_from(q))
        hold = self.hold
        if ranges and not hold.fences:
            hold.fences_since_us = time_us(self._clock)
        hold.fences = list(ranges)
        for first, last in released:
            self._events.emit(
                "warning", "queue", "queue_hold_released", first_seq=first, last_seq=last,
                detail="an operator released these fenced records: queue messages held "
                "for them go to consumers again, and one whose ack was among them is "
                "delivered again (at least once)",
            )  # fmt: skip
        self._apply_hold("repaired" if not released else "released")

    def resync_wait(self, why: str, sources: Iterable[str]) -> None:
        """Start-up, after the log opened: it lost records it cannot name (``why``:
        ``lost tail``) or is empty (``empty log``), so acks of replicated queues may be
        missing until ``sources`` have resent what they hold (:meth:`resynced`): the
        messages recorded so far, and those that come back by replication with an
        earlier time, are held. No source: nothing can come back, nothing is held."""
        waiting = set(sources)
        if not waiting or not any(q.ownership is not None for q in self.queues.values()):
            return
        now = time_us(self._clock)
        self.hold.resync = ResyncHold(
            through=self._txlog.last_seq if self._txlog is not None else 0,
            before_us=now, why=why, waiting=waiting, since_us=now,
        )  # fmt: skip
        self._apply_hold("resynced")

    def resynced(self, source: str) -> None:
        """``source`` resent everything it held when its link's stream began: once every
        source has, the resync hold ends."""
        resync = self.hold.resync
        if resync is None or source not in resync.waiting:
            return
        resync.waiting.discard(source)
        if resync.waiting:
            self._apply_hold("resynced")  # the reasons changed
            return
        self.hold.resync = None
        self._apply_hold("resynced")

    def release_hold(self, by: str | None = None) -> int:
        """An operator ends the resync hold (``POST /api/queues/release_hold``, by user
        ``by``): the sources not heard from are given up on, and the messages held for
        them go to consumers; one whose ack only such a source holds is delivered again
        (at least once). Fenced ranges are released with their fences (the transaction
        log's fence release). Returns how many messages were freed."""
        resync = self.hold.resync
        if resync is None:
            return 0
        before = sum(q.machine.held() for q in self.queues.values())
        self.hold.resync = None
        self._apply_hold("released")
        freed = before - sum(q.machine.held() for q in self.queues.values())
        self._events.emit(
            "warning", "queue", "queue_hold_released", user=by, messages=freed,
            waiting=sorted(resync.waiting),
            detail="an operator ended the wait for these sources to resend: queue "
            "messages held for them go to consumers again, and one whose ack only they "
            "hold is delivered again (at least once)",
        )  # fmt: skip
        return freed

    def _apply_hold(self, ended: str) -> None:
        """Each queue's hold from :attr:`hold`; a queue whose hold narrowed or ended
        delivers again. ``ended``: why a hold that ends ended (its event)."""
        hold = self.hold
        for q in self.queues.values():
            replicated = q.ownership is not None
            m = q.machine
            before = m.hold_through
            through = hold.through(q.start_seq, replicated)
            was = q.config.name in self._holding
            q.held_before_us = hold.before_us(replicated)
            if not q.held_before_us:
                m.release_hold()  # no resync hold (any more): no message held by itself
            m.hold(through)
            name = q.config.name
            if through or q.held_before_us:
                if not was:
                    self._holding.add(name)
                    self._events.emit(
                        "warning", "queue", "queue_held", queue=name, through_seq=through,
                        held=m.held(), reasons=hold.reasons(replicated),
                    )  # fmt: skip
            elif was:
                self._holding.discard(name)
                self._events.emit("info", "queue", "queue_hold_ended", queue=name,
                                  reason=ended)  # fmt: skip
            if (was or before) and self._timer is not None:
                self.kick(q)  # what the hold freed goes now

    def _hold_from(self, q: QueueRuntime) -> int:
        """Where ``q``'s log pin holds: its messages, the changes a restart needs, and the
        last record the checkpoint on disk names."""
        hold = q.pin_from(self._txlog.last_seq if self._txlog is not None else 0)
        saved = self._saved_last
        return saved if saved and saved < hold else hold

    # -- subscriptions ------------------------------------------------------------------

    def subscribe(self, session: Session, cmd: Command) -> None:
        """``subscribe`` to a queue by name, without a bookmark (the command table routes
        it here): leases up to its backlog.

        Raises:
            InvalidOptions: an option a queue subscription cannot honour.
            NotEntitled, SubIdInUse, BadFilter, InvalidMessage: as any subscribe.
        """
        queue = self.queues[cmd.topic or ""]
        options = cmd.opts.subscribe()
        refused = sorted(cmd.opts.names - _SUBSCRIBE_OPTIONS)
        if refused:
            raise InvalidOptions(
                f"'{refused[0]}' is not available on a queue subscription (it takes "
                "max_backlog and replace)"
            )
        sub_id = cmd.sub_id or cmd.cid
        if not sub_id or "," in sub_id:
            raise InvalidMessage("subscribe needs one sub_id (or a cid to use as one)")
        name = queue.config.name
        auth = self._auth
        if auth.enabled and not auth.can_read(session.user, name):
            raise NotEntitled(f"user {session.user_name!r} may not read {name!r}")
        existing = session.subs.get(sub_id)
        if existing is not None and not (options.replace and existing in self._ties):
            raise SubIdInUse(
                f"sub_id {sub_id!r} is already in use on this connection"
                + (
                    " (replace takes a queue subscription only by another)"
                    if options.replace
                    else ""
                )
            )
        self._subscriptions.quotas.admit_subscription(session, existing)
        flt: Filter | None = None
        if cmd.filter:
            try:
                flt = compile_filter(cmd.filter, clock=self._clock)
            except BadFilter:
                raise
            except Exception as exc:
                raise BadFilter(f"cannot compile filter: {exc}") from exc
        if existing is not None:
            self.end(existing)
        assert session.name is not None
        sub = SessionSubscription(
            outbound=session, client=session.name, user=session.user, sub_id=sub_id,
            topic=name, pattern=None, filter=flt, filter_text=cmd.filter, options=options,
            cid=cmd.cid, acks=cmd.acks, sid_bytes=orjson.dumps(sub_id), kind="queue",
            command=cmd.name,
        )  # fmt: skip
        wanted = options.max_backlog or 1
        accepts = None
        if flt is not None:
            accepts = _accepts(flt)
        consumer = Consumer(
            f"{session.name}/{sub_id}", min(wanted, queue.config.max_backlog), accepts,
            token=_Tie(session, sub, queue),
        )  # fmt: skip
        queue.machine.subscribe(consumer)
        self._ties[sub] = consumer
        session.subs.add(sub)
        if "processed" in cmd.acks:
            session.ack("processed", cmd.cid, sub_id=sub_id, max_backlog=consumer.backlog)
        self.kick(queue)

    def end(self, sub: SessionSubscription) -> None:
        """A queue subscription ends (``unsubscribe``, an accepted replace): its leases
        return (or leave, past MaxDeliveries); any other subscription is left alone."""
        consumer = self._ties.pop(sub, None)
        if consumer is None:
            return
        tie = consumer.token
        assert isinstance(tie, _Tie)
        removed = tie.queue.machine.unsubscribe(consumer)
        self._log(tie.queue, removed)
        self.kick(tie.queue)

    def drop_all(self, session: Session) -> None:
        """The connection closed: its queue subscriptions end (before the subscription
        service forgets them)."""
        for sub in list(session.subs.values()):
            self.end(sub)
        self._waiting.discard(session)

    # -- acks (sow_delete) --------------------------------------------------------------

    def ack(self, session: Session, cmd: Command) -> Awaitable[None] | None:
        """``sow_delete`` on a queue (the command table routes it here): ``bm`` (acks of
        leased messages; ``cancel``, ``expire``) or ``f`` (remove every matching message;
        write entitlement; on a bounded queue its inactive ones too, read from the log:
        answered when done)."""
        queue = self.queues[cmd.topic or ""]
        opts = set(cmd.opts.items)
        bad = sorted(opts - _ACK_OPTIONS)
        if bad:
            raise InvalidOptions(f"'{bad[0]}' is not a sow_delete option of a queue "
                                 "(cancel, expire or reject)")  # fmt: skip
        if len(opts) > 1:
            raise InvalidOptions("cancel, expire and reject cannot be given together")
        detail = _reject_reason(cmd, "reject" in opts)
        name = queue.config.name
        machine = queue.machine
        auth = self._auth
        if bool(cmd.bookmark) == bool(cmd.filter):
            raise InvalidMessage(
                f"sow_delete on queue {name!r} takes exactly one of bm (bookmarks of "
                "delivered messages) or f (a filter)"
            )
        if cmd.filter:
            if opts:
                raise InvalidOptions("cancel, expire and reject take bookmarks (bm), not a filter")
            if auth.enabled and not auth.can_write(session.user, name):
                raise NotEntitled(f"user {session.user_name!r} may not delete from {name!r}")
            try:
                flt = compile_filter(cmd.filter, clock=self._clock)
            except BadFilter:
                raise
            except Exception as exc:
                raise BadFilter(f"cannot compile filter: {exc}") from exc
            if queue.window is not None:
                return self._remove_bounded(session, cmd, queue, flt)
            removed = machine.remove_where(_accepts(flt))
            self._finish(session, cmd, queue, AckResult(removed, [], []), len(removed))
            return None
        assert cmd.bookmark is not None
        bookmarks = [b.strip() for b in cmd.bookmark.split(",") if b.strip()]
        # the message names its holder; a bookmark is applied for the consumer of this
        # connection that holds (or, sublet, last held) it
        by_consumer: dict[Consumer, list[str]] = {}
        refused: list[str] = []
        for bm in _bookmarks(bookmarks):
            m = machine.get(bm)
            holder = None if m is None else (m.holder or m.last_holder)
            tie = holder.token if holder is not None else None
            if holder is None or not isinstance(tie, _Tie) or tie.session is not session:
                refused.append(bm)
                continue
            by_consumer.setdefault(holder, []).append(bm)
        total = AckResult([], [], refused)
        for consumer, bms in by_consumer.items():
            if "cancel" in opts:
                r = machine.cancel(consumer, bms)
            elif "expire" in opts:
                r = machine.expire(consumer, bms)
            elif "reject" in opts:
                r = machine.reject(consumer, bms)
            else:
                r = machine.ack(consumer, bms)
            total.removed.extend(r.removed)
            total.returned.extend(r.returned)
            total.refused.extend(r.refused)
        self._finish(session, cmd, queue, total, len(bookmarks), detail=detail)
        return None

    async def _remove_bounded(
        self, session: Session, cmd: Command, queue: QueueRuntime, flt: Filter
    ) -> None:
        """A removal by filter of a bounded queue: its active matches, and its inactive
        ones (logged as a ``QUEUE_ACK``: deferred acks, so a restart skips them too; a
        replicated queue's by bookmark, so the other instances drop them as well)."""
        removed, inactive = await self.refills.remove_where(queue, _accepts(flt))
        failure = None
        if inactive:
            body = (
                encode_ack_seqs([seq for seq, _ in inactive])
                if queue.ownership is None
                else encode_ack_bookmarks([bm for _, bm in inactive])
            )
            failure = self._append(queue, RecordKind.QUEUE_ACK, body, "acked")
            if failure is not None:
                self._log_failures += 1
        if failure is not None:
            session.fail(cmd.cid, failure)
            self._log(queue, removed)
            self.kick(queue)
            return
        queue.machine.count_removed(ACKED, len(inactive))
        n = len(removed) + len(inactive)
        self._finish(session, cmd, queue, AckResult(removed, [], []), n, extra=len(inactive))

    def _finish(
        self,
        session: Session,
        cmd: Command,
        queue: QueueRuntime,
        result: AckResult,
        matches: int,
        extra: int = 0,
        detail: str = "",
    ) -> None:
        if queue.ownership is not None and result.removed:
            now = time_us(self._clock)
            queue.acked_after(
                [now - r.message.enqueued_us for r in result.removed if r.reason == "acked"]
            )
        failure = self._log(queue, result.removed, detail)
        if failure is not None:
            session.fail(cmd.cid, failure)
        elif "processed" in cmd.acks:
            session.ack("processed", cmd.cid)
        if "stats" in cmd.acks:
            session.ack(
                "stats", cmd.cid, matches=matches, records_deleted=len(result.removed) + extra,
                returned=len(result.returned), refused=len(result.refused),
            )  # fmt: skip
        if "completed" in cmd.acks and failure is None:
            session.ack("completed", cmd.cid)
        self.kick(queue)

    # -- the log ------------------------------------------------------------------------

    def _log(
        self, queue: QueueRuntime, removed: list[Removal], detail: str = ""
    ) -> ProtocolFailure | None:
        """Record what left ``queue`` (its dead letters first, where it has a dead-letter
        topic; then one ``QUEUE_ACK`` record per reason), and move its pin. A refusal of
        the log is returned: those messages are gone here but the log still holds them,
        so a restart delivers them again (at least once, never lost). ``detail``: a
        consumer's reason for a ``reject``."""
        txlog = self._txlog
        if not removed or txlog is None:
            return None
        own = queue.ownership
        if own is not None:
            own.acked_many([r.message.bookmark for r in removed])
        failure: ProtocolFailure | None = None
        dead = queue.config.dead_letter
        acking = removed
        if dead is not None:
            letters = [r for r in removed if r.reason in dead.reasons]
            if letters:
                failure = self._dead_letter(queue, dead.topic, letters, detail)
                if failure is not None:
                    # no ack for them: a restart takes the ones that reached the
                    # dead-letter topic out of the queue, and delivers the others again
                    queue.unlogged(r.message.seq for r in letters)
                    acking = [r for r in removed if r.reason not in dead.reasons]
        by_reason: dict[str, list[Removal]] = {}
        for r in acking:
            by_reason.setdefault(r.reason, []).append(r)
        for reason, items in by_reason.items():
            if own is None:
                body = encode_ack_seqs([r.message.seq for r in items])
            else:
                body = encode_ack_bookmarks([r.message.bookmark for r in items])
            refused = self._append(queue, RecordKind.QUEUE_ACK, body, reason)
            if refused is not None:
                failure = refused
                queue.unlogged(r.message.seq for r in items)
        if failure is not None:
            self._log_failures += 1
            self._events.emit("error", "queue", "queue_ack_unlogged", queue=queue.config.name,
                              messages=len(removed), reason=str(failure))  # fmt: skip
        if queue.pin is not None:
            queue.pin.move(self._hold_from(queue))
        if queue.window is not None:
            self.refills.wanted(queue)
        return failure

    def _dead_letter(
        self, queue: QueueRuntime, topic: str, letters: list[Removal], detail: str
    ) -> ProtocolFailure | None:
        """Publish ``letters`` (messages that left ``queue``) to its dead-letter
        ``topic``, in this turn, before their ``QUEUE_ACK``; the pipeline's refusal is
        returned (and reported). Once published, the happenings bus is told of them when
        a sink wants dead letters."""
        publish = self.dead_letters
        if publish is None:  # pragma: no cover - the broker sets it before any queue runs
            return InvalidTopic("dead letters have no publisher")
        now = time_us(self._clock)
        name = queue.config.name
        bodies = []
        happenings = self._happenings
        facts: list[DeadLetterFact] | None = (
            [] if happenings is not None and happenings.dead_letters else None
        )
        for r in letters:
            m = r.message
            holder = m.last_holder
            letter = DeadLetter(
                queue=name, topic=m.topic, bookmark=m.bookmark, seq=m.seq,
                instance=queue.instance, reason=r.reason, deliveries=m.deliveries,
                cancels=m.cancels, consumer=holder.name if holder is not None else "",
                enqueued_us=m.enqueued_us, dead_lettered_us=now,
                detail=detail if r.reason == REJECTED else "",
            )  # fmt: skip
            envelope = deadletter.encode(letter, m.body)
            bodies.append(envelope)
            if facts is not None:
                facts.append(DeadLetterFact(
                    m.topic, m.bookmark, r.reason, letter.consumer, m.deliveries, m.body,
                    envelope,
                ))  # fmt: skip
        failure = publish(topic, bodies)
        if failure is not None:  # counted with the other refusals by the caller
            self._events.emit("error", "queue", "dead_letter_refused", queue=name, topic=topic,
                              messages=len(bodies), reason=str(failure))  # fmt: skip
        else:
            queue.dead_lettered_count += len(bodies)
            if facts and happenings is not None and happenings.dead_letters:
                happenings.emit(DeadLetterHappening(now, name, topic, tuple(facts)))
        return failure

    def _refilled(self, queue: QueueRuntime) -> None:
        """A refill activated messages (or moved the cursor): the pin follows, and the
        new active messages are delivered."""
        if queue.pin is not None:
            queue.pin.move(self._hold_from(queue))
        self.kick(queue)

    def _append(
        self, queue: QueueRuntime, kind: RecordKind, body: bytes, key: str = ""
    ) -> ProtocolFailure | None:
        """One record of ``queue``'s events: a replicated queue's with the broker's
        publisher identity and its next sequence (so replication sends it)."""
        txlog = self._txlog
        if txlog is None:
            return None  # no log, nothing to record (queues without one are refused at load)
        replicated = queue.ownership is not None
        pub = txlog.own_pub_hash if replicated else 0
        try:
            txlog.append(
                topic=queue.config.name, message_type="json", pub_hash=pub,
                pub_seq=txlog.publisher_last(pub) + 1 if replicated else 0, body=body,
                kind=kind, sow_key=key,
            )  # fmt: skip
        except ProtocolFailure as exc:
            return exc
        except Exception as exc:
            return TxlogFull(f"transaction log cannot accept writes: {exc}")
        return None

    # -- delivery -----------------------------------------------------------------------

    def kick(self, queue: QueueRuntime) -> None:
        """``queue`` changed: deliver at the end of this loop turn."""
        self._dirty.add(queue)
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._deliver)

    def _deliver(self) -> None:
        self._scheduled = False
        dirty, self._dirty = self._dirty, set()
        now = time_us(self._clock)
        for queue in dirty:
            if queue.window is not None:
                # room may have freed up without a removal here (acked on another
                # instance, an owner gone offline): top the window up
                self.refills.wanted(queue)
            if queue.outgoing:
                changes, queue.outgoing = queue.outgoing, []
                self.transfers.send(queue, changes)
            at_most_once = queue.config.semantics == "at-most-once"
            if at_most_once:
                self._hold_full(queue)
            deliveries = queue.machine.dispatch(now)
            if not deliveries:
                continue
            self._send(queue, deliveries)
            if at_most_once:
                self._log(queue, [Removal(d.message, DELIVERED) for d in deliveries])
        self._retime()

    def _hold_full(self, queue: QueueRuntime) -> None:
        """At-most-once takes no lease, so nothing bounds a consumer but its connection:
        a consumer whose buffer is full gets nothing until it has room again."""
        for consumer in queue.machine.consumers:
            tie = consumer.token
            assert isinstance(tie, _Tie)
            full = not tie.session.has_room()
            consumer.backlog = 0 if full else 1 << 30
            if full and tie.session not in self._waiting:
                self._waiting.add(tie.session)
                asyncio.get_running_loop().create_task(self._await_room(tie.session, queue))

    async def _await_room(self, session: Session, queue: QueueRuntime) -> None:
        await session.wait_room()
        self._waiting.discard(session)
        if not session.closed:
            self.kick(queue)

    def _send(self, queue: QueueRuntime, deliveries: list[QueueDelivery]) -> None:
        per_session: dict[Session, list[bytes]] = {}
        literal = queue.literal
        for d in deliveries:
            tie = d.consumer.token
            assert isinstance(tie, _Tie)
            m = d.message
            sub = tie.sub
            per_session.setdefault(tie.session, []).append(
                encode_queued(
                    literal,
                    sub.sid_bytes,
                    m.body,
                    m.bookmark,
                    d.lease_us // 1000,
                    d.number,
                    m.corr_id,
                )
            )
            # redeliveries count again: each is a message its consumer receives
            sub.progress.delivered += 1
        for session, parts in per_session.items():
            session.send_messages(b"".join(parts), len(parts))

    # -- time ---------------------------------------------------------------------------

    def _retime(self) -> None:
        soon = self._next_deadline()
        if soon and (not self._target_us or soon < self._target_us):
            self._wake.set()

    def _next_deadline(self) -> int:
        deadlines = [d for q in self.queues.values() if (d := q.machine.next_deadline_us())]
        return min(deadlines, default=0)

    async def _run_timer(self) -> None:
        """Lease ends and message expirations, on the injected clock."""
        clock = self._clock
        while True:
            self._wake.clear()
            now = time_us(clock)
            for queue in self.queues.values():
                removed = queue.machine.tick(now)
                if removed:
                    self._log(queue, removed)
                if removed or queue.machine.ready:
                    self.kick(queue)
            transfers = self.transfers
            if transfers:
                transfers.tick(now)
                for queue in transfers.queues:
                    if queue.window is not None:
                        self.refills.wanted(queue)  # an owner went offline: room
            soon = self._next_deadline()
            if transfers:
                step = now + transfers.interval_us
                soon = min(soon, step) if soon else step
            self._target_us = soon
            wait = max(0.0, (soon - now) / 1_000_000) if soon else None
            await sleep_or_wake(clock, wait, self._wake)

    async def _run_watch(self) -> None:
        """The stuck-queue watch: every queue once a second (its cost: finding each
        queue's oldest waiting message, past the leased ones ahead of it)."""
        while True:
            self.stuck.check(self.queues.values(), time_us(self._clock))
            await self._clock.sleep(STUCK_CHECK_INTERVAL)

    # -- admin --------------------------------------------------------------------------

    def alerts(self) -> list[Alert]:
        """The stuck queues' and the hold's alerts (every dashboard page's banner,
        ``/healthz``)."""
        held = [(name, q.machine.held()) for name, q in sorted(self.queues.items())]
        return self.hold.alerts(held) + self.stuck.alerts()

    def browse(self, name: str, after: int, limit: int) -> BrowsePage:
        """A page of a queue's messages after seq ``after``, with why each waits.

        Raises:
            QueueNotFound: no queue of that name.
        """
        q = self.queues.get(name)
        if q is None:
            raise QueueNotFound(name)
        return browse(q, after, limit, time_us(self._clock))

    def counters(self) -> dict[str, QueueCounters]:
        """Every queue's counters (metrics snapshot: Prometheus, stats history)."""
        out: dict[str, QueueCounters] = {}
        now = time_us(self._clock)
        for name, q in self.queues.items():
            i = describe(q, now, self.stuck.is_stuck(name), leases=False)
            out[name] = {
                "depth": i.depth, "backlog": i.backlog, "held": i.held, "leased": i.leased,
                "consumers": i.consumers, "oldest_lease_age": i.oldest_lease_age,
                "oldest_message_age": i.oldest_message_age,
                "oldest_undelivered_age": i.oldest_undelivered_age, "stuck": int(i.stuck),
                "enqueued": i.enqueued,
                "removed": dict(i.removed), "dead_lettered": i.dead_lettered,
                "inactive": i.inactive,
                "deferred_acks": i.deferred_acks,
            }  # fmt: skip
        return out

    def set_proxied_transfer(self, name: str, enabled: bool, by: str | None = None) -> int:
        """``enable_proxied_transfer`` / ``disable_proxied_transfer``
        (server/queues/transfers.py :meth:`Transfers.set_proxied`).

        Raises:
            QueueNotFound: no queue of that name.
            ProxiedTransferUnavailable: the queue is not replicated.
        """
        return self.transfers.set_proxied(name, enabled, by)

    def infos(self) -> list[QueueInfo]:
        """Every queue, in name order."""
        return [self.info(name) for name in sorted(self.queues)]

    def info(self, name: str) -> QueueInfo:
        """One queue.

        Raises:
            QueueNotFound: no queue of that name.
        """
        q = self.queues.get(name)
        if q is None:
            raise QueueNotFound(name)
        return describe(q, time_us(self._clock), self.stuck.is_stuck(name),
                        hold=self._reasons(q))  # fmt: skip

    def _reasons(self, q: QueueRuntime) -> list[str]:
        """Why ``q`` holds messages back now (empty: it does not)."""
        if q.config.name not in self._holding:
            return []
        return self.hold.reasons(q.ownership is not None)


def _reject_reason(cmd: Command, rejecting: bool) -> str:
    """The ``reason`` a consumer gave with ``reject`` ("" when none)."""
    reason = cmd.field("reason")
    if reason is None:
        return ""
    if not rejecting:
        raise InvalidMessage("a reason goes with o=reject only")
    if not isinstance(reason, str) or len(reason) > MAX_REJECT_REASON:
        raise InvalidMessage(f"reason must be a string of at most {MAX_REJECT_REASON} characters")
    return reason


def _accepts(flt: Filter) -> Callable[[QueuedMessage], bool]:
    def accepts(m: QueuedMessage) -> bool:
        return flt.matches(MessageView(m.topic, m.body, bookmark=m.bookmark))

    return accepts


def _bookmarks(items: list[str]) -> list[str]:
    """Bookmarks as the machine names them (``H|S|``; a trailing ``|`` may be left off)."""
    return [b if b.endswith("|") else b + "|" for b in items]
