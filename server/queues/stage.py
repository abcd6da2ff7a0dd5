"""Queues on the publish path: a stage of server/publishing.py, and each queue's runtime.

- ``appended`` (after the append): messages of a queue's underlying topic that pass its
  ``Filter`` enter the queue's state machine (server/queues/machine.py) with their
  priority and barrier flag; the service is told, and delivers at the end of the loop
  turn (one dispatch for every run of the turn, not one per run).
- ``recover`` (start-up): the log in order rebuilds each queue: publishes of its
  underlying topics enter it, its ``QUEUE_ACK`` records take out what left it.
- ``refold`` (while running): records a repair wrote back where the start-up rebuild
  went past a fence are taken in as that rebuild would have (:class:`QueueRefold`).
- ``reaches``: never: deliveries leave after the run, so a publisher's acks always come
  first.

Only recorded messages (with a bookmark: the consumer's handle for its ack) enter a
queue; the configuration requires the log to record the underlying topics.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from spool.server.bookmarks import format_bookmark, format_bookmarks
from spool.server.clock import Clock
from spool.server.config.model import QueueConfig
from spool.server.expr import Filter, MessageView, ValueExpr, compile_filter, compile_value
from spool.server.ports import AppendedRun, Outbound, PublishRun
from spool.server.protocol.errors import InvalidOptions, InvalidTopic
from spool.server.queues import deadletter
from spool.server.queues.deadletter import DeadLetter
from spool.server.queues.machine import ELSEWHERE, QueuedMessage, QueueMachine, QueuePolicy
from spool.server.queues.ownership import Grant, Ownership, Wire
from spool.server.queues.records import (
    decode_ack,
    decode_transfers,
    encode_ack_bookmarks,
    encode_ack_seqs,
)
from spool.server.queues.window import Window
from spool.server.txlog.format.batch import RecordBatch
from spool.server.txlog.format.record import MESSAGE_KINDS, Record, RecordKind
from spool.server.txlog.retention.pins import Pin
from spool.server.wire import topic_json

__all__ = ["QueueRuntime", "QueueStage", "published_on"]

_QUEUE_ACK: Final = int(RecordKind.QUEUE_ACK)
_QUEUE_TRANSFER: Final = int(RecordKind.QUEUE_TRANSFER)
#: the record kinds of a queue's own events (logged on the queue's name)
_EVENT_KINDS: Final = frozenset({RecordKind.QUEUE_ACK, RecordKind.QUEUE_TRANSFER})


def published_on(path: Sequence[str], here: str) -> str:
    """The instance a message was published on: the first hop of its replication path
    (``name`` or ``name@group``, server/replication/hops.py), or this instance for a
    message published here."""
    return path[0].partition("@")[0] if path else here


def policy_of(cfg: QueueConfig) -> QueuePolicy:
    """The state machine's policy of a configured queue."""
    return QueuePolicy(
        semantics="at-most-once" if cfg.semantics == "at-most-once" else "at-least-once",
        lease_period_us=int(cfg.lease_period * 1_000_000),
        max_backlog=cfg.max_backlog,
        max_deliveries=cfg.max_deliveries,
        max_cancels=cfg.max_cancels,
        fairness="fast" if cfg.fairness == "fast" else (
            "round-robin" if cfg.fairness == "round-robin" else "proportional"),
        leasing="strict" if cfg.leasing == "strict" else "sublet",
        expiration_us=int(cfg.expiration * 1_000_000),
    )  # fmt: skip


@dataclass(eq=False)
class QueueRuntime:
    """One configured queue: its configuration, compiled expressions, state machine and
    the log pin that keeps its oldest message's journal.

    Attributes:
        config: as configured.
        machine: its messages and leases.
        literal: its name as a JSON literal (the ``t`` of its deliveries).
        pin: holds the log from its oldest message on (None without a log).
        ownership: a replicated queue's message owners (None: every message is owned
            here: a ``LocalQueue``, or an instance that does not replicate).
        outgoing: ownership changes to log (and so replicate) at the end of the turn.
        window: the active window of a queue with a ``TargetQueueDepth`` (None: every
            message active), server/queues/window.py.
    """

    config: QueueConfig
    machine: QueueMachine
    literal: bytes
    filter: Filter | None = None
    barrier: Filter | None = None
    priority: ValueExpr | None = None
    pin: Pin | None = None
    ownership: Ownership | None = None
    outgoing: list[Wire] = field(default_factory=list)
    instance: str = ""
    window: Window | None = None
    #: a moving average of the publish-to-ack time (microseconds; 0: none measured)
    typical_us: int = 0
    #: recovery takes this queue's records from this seq on (its checkpoint,
    #: server/queues/checkpoint.py; 0: the whole log)
    start_seq: int = 0
    #: replicated: the log seq of an ownership change received before its message, by
    #: bookmark, with (once the message came and went) the log's end then, which the
    #: message's seq cannot be past (0: not yet): a checkpoint must not pass the change
    #: while a replay could still meet the message (:meth:`checkpoint_seq`)
    early_records: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: the smallest seq of :attr:`early_records` (0: none): the queue's log pin holds
    #: from it too, so retention never takes a change a restart still needs
    early_floor: int = 0
    #: the oldest message that left the queue here without its ``QUEUE_ACK`` in the log
    #: (the log refused it; 0: none): a restart delivers it again, so neither the pin nor
    #: the checkpoint may pass it
    unlogged_floor: int = 0
    #: ownership transfers, counted from the grants of this copy's ``QUEUE_TRANSFER``
    #: records as each is logged or read back (:meth:`_count`), so they are a function
    #: of the log and a restart from the checkpoint keeps them exactly (:meth:`resume`)
    transferred_in: int = 0
    transferred_out: int = 0
    #: a replay counts the grants of the records after this seq only: the counters
    #: restored from the checkpoint count those up to it (0: every record)
    counted_through: int = 0
    #: the checkpoint's publisher positions, until the replay is done (:meth:`recovered`)
    seen_at_checkpoint: dict[int, int] = field(default_factory=dict)
    #: the first record of a range the start-up rebuild went past (fenced) that no
    #: repair gave back yet (0: none): its messages may still be the queue's, so neither
    #: the pin nor the checkpoint may pass it (:meth:`QueueStage.unfolded`)
    unfolded_floor: int = 0
    #: a resync hold (server/queues/hold.py): messages that arrive by replication with a
    #: time before this are held too (0: none)
    held_before_us: int = 0
    #: messages published to the dead-letter topic by this instance since it started
    dead_lettered_count: int = 0

    def acked_after(self, waits_us: Iterable[int]) -> None:
        """Messages were acked ``waits_us`` after they were published, in that order
        (the average the transfer requests wait for)."""
        t = self.typical_us
        for waited_us in waits_us:
            if waited_us >= 0:
                t = waited_us if not t else (t * 7 + waited_us) // 8
        self.typical_us = t

    @classmethod
    def build(cls, cfg: QueueConfig, clock: Clock, instance: str = "",
              replicated: bool = False) -> QueueRuntime:  # fmt: skip
        """``replicated``: the instance replicates and the queue is not a ``LocalQueue``."""
        q = cls(
            config=cfg,
            machine=QueueMachine(cfg.name, policy_of(cfg)),
            literal=topic_json(cfg.name),
            filter=compile_filter(cfg.filter, clock=clock) if cfg.filter else None,
            barrier=compile_filter(cfg.barrier, clock=clock) if cfg.barrier else None,
            priority=compile_value(cfg.priority, clock=clock) if cfg.priority else None,
            instance=instance,
        )
        if cfg.target_queue_depth:
            q.window = window = Window(cfg.target_queue_depth)
        if replicated:
            machine = q.machine
            own = q.ownership = Ownership(instance, cfg.initial_owner)
            machine.gate = lambda m: own.can_deliver(m.bookmark)
            own.on_gained = machine.unpark
            own.busy = lambda bm: (m := machine.get(bm)) is not None and m.holder is not None
            if q.window is not None:
                own.extra_early = lambda: window.inactive
        return q

    def counted(self) -> int:
        """The active messages a window counts against its target: those this instance
        can deliver — owned here, or owned by an online instance it can ask for them.
        Messages of an offline owner are not counted (docs/queues.md "TargetQueueDepth"):
        a window full of them would starve the messages behind them for the whole
        outage."""
        own = self.ownership
        depth = self.machine.depth
        return depth - own.unreachable() if own is not None else depth

    def take_pending(self) -> None:
        """Proxied takeovers made as messages entered: to the log with the rest."""
        own = self.ownership
        if own is not None and own.pending:
            self.outgoing.extend(own.pending)
            own.pending.clear()

    def resume(
        self,
        start_seq: int,
        counted_through: int,
        transferred: tuple[int, int],
        seen: Mapping[int, int],
    ) -> None:
        """Start-up from a checkpoint (server/queues/checkpoint.py): recovery takes this
        queue's records from ``start_seq`` on, and the transfer counters are
        ``transferred`` (in, out) as counted through record ``counted_through`` (the
        checkpoint's last record); the replay counts the grants after it. ``seen``: a
        replicated queue's publisher positions through that record
        (:meth:`Ownership.seen`), applied once the replay is done
        (:meth:`recovered`)."""
        self.start_seq = start_seq
        self.counted_through = counted_through
        self.transferred_in, self.transferred_out = transferred
        self.seen_at_checkpoint = dict(seen)

    def recovered(self) -> None:
        """The replay is done: what the checkpoint knew of messages before its seq is
        applied. A change read after the checkpoint's seq for a message that left before
        it (a request or ack that crossed the message's ack) would otherwise be kept as
        waiting for a message that can never come again here, and a bounded queue would
        grant it once its publisher's later messages reach the log. Applied after the
        replay, not before: a change replayed before its message must wait for it."""
        own = self.ownership
        if own is not None:
            for pub_hash, seq in self.seen_at_checkpoint.items():
                own.passed(pub_hash, seq)
        self.seen_at_checkpoint = {}

    def logged(self, changes: Iterable[Wire]) -> None:
        """This instance logged ownership changes it made (one ``QUEUE_TRANSFER``
        record): counted."""
        for change in changes:
            if type(change) is Grant:
                self._count(change, mine=True)

    def _count(self, grant: Grant, mine: bool) -> None:
        """Count one grant of a record of this copy's log, before it is applied.
        ``mine``: logged by this instance (a grant it made or a hand-back: out; a proxied
        takeover: in). Else received: a grant to this instance is in; a proxied takeover
        of a message this copy has owned by this instance is out (the instance taken
        from learns of it). So every grant counts out where it was made and in where it
        goes (a takeover: in where it was made, out where it was taken from), once per
        record, whenever the record is logged or read back."""
        if not grant.epoch:
            return  # a first-owner claim (Ownership.claim): nothing was transferred
        me = self.instance
        if mine:
            if grant.proxied:
                self.transferred_in += 1
            else:
                self.transferred_out += 1
        elif grant.owner == me:
            if not grant.proxied:  # (a takeover naming this instance is its own record)
                self.transferred_in += 1
        elif grant.proxied and self.ownership is not None:
            view = self.ownership.view(grant.bookmark)
            if view is not None and view.owner == me and (grant.epoch, grant.owner) > (
                view.epoch, view.owner
            ):  # fmt: skip
                self.transferred_out += 1

    def duplicated(
        self, bookmark: str, published_on: str, held_on: str | None = None
    ) -> list[Wire]:
        """The log dropped another instance's copy of a message it held, published on
        ``published_on`` (the held copy on ``held_on``, None: not known): the claim to
        log, at once (:meth:`Ownership.claim`, :meth:`QueueStage.duplicated`)."""
        own = self.ownership
        return own.claim(bookmark, published_on, held_on) if own is not None else []

    def owned(self) -> int:
        """Messages this instance owns (every one of a local queue)."""
        return self.ownership.owned() if self.ownership is not None else self.machine.depth

    def receive(
        self,
        kind: int,
        body: bytes,
        now_us: int = 0,
        replay: bool = False,
        seq: int = 0,
        mine: bool = False,
    ) -> bool:
        """A replicated ``QUEUE_ACK`` / ``QUEUE_TRANSFER`` record of this queue (from
        another instance, or, ``replay``, read back at start-up: ``mine`` if this
        instance logged it), recorded at ``seq``: the ownership applies it, the state
        machine follows. Answers (grants) go to :attr:`outgoing`; a replay answers
        nothing (requests read back are answered once the instance runs:
        :meth:`Ownership.receive`). Returns whether the queue may have something new to
        deliver here."""
        own = self.ownership
        if kind == _QUEUE_ACK:
            seqs, bookmarks = decode_ack(body)
            if seqs:
                self.machine.forget(seqs)
                if self.window is not None:
                    self.window.defer(seqs)
            if own is not None:
                if seq:
                    self._note_early(bookmarks, seq)
                own.receive_acks(bookmarks)
            self.machine.drop(bookmarks, ELSEWHERE)
            return False
        if own is None:
            return False
        changes = decode_transfers(body)
        if seq:
            self._note_early([c.bookmark for c in changes], seq)
        count = not replay or seq > self.counted_through
        for change in changes:
            if count and type(change) is Grant:
                self._count(change, mine)
            self.outgoing.extend(own.receive(change, now_us, replay))
        return True

    def dead_lettered(self, letter: DeadLetter, mine: bool, replay: bool) -> bool:
        """A dead letter of this queue's (:mod:`~spool.server.queues.deadletter`),
        published here (``mine``) or on another instance, read back at start-up
        (``replay``) or arriving by replication: its message left the queue, as the
        ``QUEUE_ACK`` logged after it says. Taken as that ack (the same message leaves
        the same way; the ack that follows changes nothing more), so a crash between the
        two, or an instance that never sends the ack, cannot leave the message in the
        queue as well. A local queue takes only its own (local seqs); no early note is
        kept (the ack after it keeps one). Returns whether it applied."""
        if self.ownership is None:
            if not mine:
                return False
            self.receive(_QUEUE_ACK, encode_ack_seqs([letter.seq]), replay=replay)
        else:
            self.receive(_QUEUE_ACK, encode_ack_bookmarks([letter.bookmark]), replay=replay)
        return True

    def _note_early(self, bookmarks: Sequence[str], seq: int) -> None:
        """Changes of messages not in the queue here (yet): where their record is, for
        the checkpoint (:meth:`checkpoint_seq`). One lookup per bookmark."""
        get = self.machine.get
        early = self.early_records
        for bm in bookmarks:
            if get(bm) is None and bm not in early:
                early[bm] = (seq, 0)
                if not self.early_floor or seq < self.early_floor:
                    self.early_floor = seq

    def hold_from(self, log_end: int) -> int:
        """The first log seq this queue's messages need: its oldest message, or a bounded
        queue's cursor if older (inactive messages live in the log only), or past
        ``log_end`` (the log's last seq) when it is empty."""
        oldest = self.machine.oldest_seq()
        window = self.window
        if window is not None and window.cursor:
            return min(oldest, window.cursor) if oldest else window.cursor
        return oldest or log_end + 1

    def unlogged(self, seqs: Iterable[int]) -> None:
        """Messages left the queue but the log refused their ack: a restart delivers them
        again (at least once), so the log is kept from the oldest of them."""
        oldest = min(seqs, default=0)
        if oldest and (not self.unlogged_floor or oldest < self.unlogged_floor):
            self.unlogged_floor = oldest

    def pin_from(self, log_end: int) -> int:
        """Where the queue's log pin holds: :meth:`hold_from`, or earlier, at an ownership
        change received before its message that a restart still needs, or at a message
        whose ack the log refused."""
        hold = self.hold_from(log_end)
        for floor in (self.early_floor, self.unlogged_floor, self.unfolded_floor):
            if floor and floor < hold:
                hold = floor
        return hold

    def checkpoint_seq(self, hold_from: int, log_end: int) -> int:
        """Where a replay of this queue may start (server/queues/checkpoint.py):
        ``hold_from`` (:meth:`hold_from`: its oldest message or a bounded queue's
        cursor), or earlier, at the record of an ownership change received before its
        message while a replay could meet that message. ``log_end``: the log's last seq
        now (a message that came and went is at or before it). Drops what no longer
        holds the checkpoint back, and sets :attr:`early_floor` (the pin) to what is
        left."""
        if self.unlogged_floor and self.unlogged_floor < hold_from:
            hold_from = self.unlogged_floor  # a message a restart must deliver again
        if self.unfolded_floor and self.unfolded_floor < hold_from:
            hold_from = self.unfolded_floor  # records a restart must read once repaired
        early = self.early_records
        if not early:
            return hold_from
        own = self.ownership
        get = self.machine.get
        waiting = own.is_early if own is not None else (lambda bm: False)
        start = hold_from
        #: changes whose message came and went: (message at or before, change's seq, bm)
        gone: list[tuple[int, int, str]] = []
        for bm, (seq, gone_by) in list(early.items()):
            if get(bm) is not None or waiting(bm):
                start = min(start, seq)  # the change waits, or its message is here
            elif not gone_by:
                early[bm] = (seq, log_end)  # came and went since: at or before log_end
                start = min(start, seq)
            else:
                gone.append((gone_by, seq, bm))
        # a change whose message a replay from ``start`` may still meet (the message is
        # at or before ``gone_by``) must be replayed too, which may move ``start`` back
        # and keep more: the latest messages first
        gone.sort(reverse=True)
        for gone_by, seq, bm in gone:
            if gone_by >= start:
                start = min(start, seq)
            else:
                del early[bm]  # a replay starts past its message: never meets it
        self.early_floor = min((seq for seq, _ in early.values()), default=0)
        return start

    def admit(
        self,
        topic: str,
        bodies: Sequence[bytes],
        first_seq: int,
        timestamps_us: Sequence[int],
        pub_hash: Sequence[int],
        pub_seqs: Sequence[int],
        origin: str = "",
        corr_ids: Sequence[str] | None = None,
    ) -> int:
        """Messages of ``topic`` (consecutive seqs from ``first_seq``, published on
        instance ``origin``, with ``corr_ids`` when any has one) enter the queue if its
        filter takes them (and its window has room: the others are inactive); returns
        how many did."""
        flt, barrier, priority = self.filter, self.barrier, self.priority
        own = self.ownership
        window = self.window
        if flt is None and barrier is None and priority is None and window is None:
            # the usual queue takes every message of its topics as it comes: one pass
            bms = format_bookmarks(pub_hash, pub_seqs)
            seqs = range(first_seq, first_seq + len(bodies))
            # a replicated one may have been acked on another instance before it came
            entered = (
                own.messages(bms, origin or self.instance, timestamps_us)
                if own is not None
                else None
            )
            messages = [
                QueuedMessage(seq, bm, topic, body, ts)
                for seq, bm, body, ts in zip(seqs, bms, bodies, timestamps_us, strict=True)
            ]
            if corr_ids is not None:
                for m, corr_id in zip(messages, corr_ids, strict=True):
                    m.corr_id = corr_id
            if entered is not None:  # some were acked elsewhere before they came (rare)
                messages = [m for m, ok in zip(messages, entered, strict=True) if ok]
            # another instance's messages are parked as they enter (their owner
            # delivers them): not pushed through the ready heap to be parked there
            gated = own is not None and own.first_owner(origin or self.instance) != own.instance
            self.machine.add_many(messages, gated=gated)
            if own is not None and bodies:
                own.passed(pub_hash[-1], max(pub_seqs))
                self.take_pending()
            return len(messages)
        add = self.machine.add
        n = 0
        cut = len(bodies)  # the first message left inactive (bounded): not passed yet
        for i, body in enumerate(bodies):
            if window is not None and window.cursor and cut > i:
                cut = i  # from here on after the cursor, filtered out or not
            bm = format_bookmark(pub_hash[i], pub_seqs[i])
            view: MessageView | None = None
            if flt is not None or barrier is not None or priority is not None:
                view = MessageView(topic, body, bookmark=bm)
                if flt is not None and not flt.matches(view):
                    continue
            if window is not None and not window.admits(first_seq + i, self.counted()):
                cut = min(cut, i)
                continue
            if own is not None and not own.message(bm, origin or self.instance,
                                                   timestamps_us[i]):  # fmt: skip
                continue  # acked on another instance before it arrived here
            add(self._message(first_seq + i, bm, topic, body, timestamps_us[i], view,
                              corr_ids[i] if corr_ids is not None else ""))  # fmt: skip
            n += 1
        if own is not None and window is not None and pub_seqs:
            own.arrived(pub_hash[-1], max(pub_seqs))
        if own is not None and cut:
            # a bounded queue's inactive messages are passed when activated (activate)
            own.passed(pub_hash[-1], max(pub_seqs) if cut == len(bodies) else max(pub_seqs[:cut]))
            self.take_pending()
        return n

    def _message(
        self,
        seq: int,
        bm: str,
        topic: str,
        body: bytes,
        ts_us: int,
        view: MessageView | None,
        corr_id: str,
    ) -> QueuedMessage:
        """A queue message, its priority and barrier read from ``view`` (None when the
        queue has neither)."""
        prio = 0
        priority, barrier = self.priority, self.barrier
        if priority is not None and view is not None:
            value = priority.evaluate(view)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                prio = int(value)
        is_barrier = barrier is not None and view is not None and barrier.matches(view)
        return QueuedMessage(
            seq, bm, topic, body, ts_us, priority=prio, barrier=is_barrier, corr_id=corr_id
        )

    def activate(self, records: Sequence[Record], last_seq: int) -> int:
        """A refill of the window: ``records`` read from the log at its cursor, in order
        (the log ends at ``last_seq``). The queue's messages among them are activated
        until the window is full (the cursor then stops at the next one); a message
        whose ack was deferred is skipped. Returns how many were activated."""
        window = self.window
        assert window is not None
        flt, barrier, priority = self.filter, self.barrier, self.priority
        takes = self.config.takes
        own = self.ownership
        cursor = window.cursor
        room = window.target - self.counted()
        n = 0
        try:
            for rec in records:
                seq = rec.seq
                if seq < cursor or rec.kind not in MESSAGE_KINDS or not takes(rec.topic):
                    continue
                view: MessageView | None = None
                if flt is not None or barrier is not None or priority is not None:
                    view = MessageView(rec.topic, rec.body, bookmark=rec.bookmark)
                    if flt is not None and not flt.matches(view):
                        if own is not None:
                            own.passed(rec.pub_hash, rec.pub_seq)
                        continue
                if room <= 0:
                    window.moved(seq, last_seq)
                    return n
                if window.passes(seq) and self._enter(rec, view):
                    n += 1
                    if own is None or own.reachable(rec.bookmark):
                        room -= 1
                if own is not None:
                    # after the message entered: an ownership change kept for it applies
                    own.passed(rec.pub_hash, rec.pub_seq)
            if records:
                window.moved(records[-1].seq + 1, last_seq)
            return n
        finally:
            self.take_pending()

    def restore(self, rec: Record) -> bool:
        """A message of the queue's topics that a repair wrote back, not acked after it
        (:class:`QueueRefold`): it enters if the filter takes it, as the start-up rebuild
        would have let it in; one a bounded queue has at or after its cursor is left to
        the refill. Returns whether it entered."""
        window = self.window
        if window is not None and window.cursor and rec.seq >= window.cursor:
            return False  # inactive: the refill activates it in log order
        view: MessageView | None = None
        if self.filter is not None or self.barrier is not None or self.priority is not None:
            view = MessageView(rec.topic, rec.body, bookmark=rec.bookmark)
            if self.filter is not None and not self.filter.matches(view):
                return False
        return self._enter(rec, view)

    def _enter(self, rec: Record, view: MessageView | None) -> bool:
        """One message a refill activates (its ack was not deferred): False when it left
        the queue on another instance while inactive (an ack kept for it)."""
        bm = rec.bookmark
        own = self.ownership
        if own is not None and not own.message(
            bm, published_on(rec.path, self.instance), rec.timestamp_us
        ):
            return False
        self.machine.add(self._message(rec.seq, bm, rec.topic, rec.body, rec.timestamp_us,
                                       view, rec.corr_id))  # fmt: skip
        return True

    def inactive_matches(self, records: Sequence[Record], matches: Callable[[QueuedMessage], bool]
                         ) -> list[tuple[int, str]]:  # fmt: skip
        """A removal by filter reaching inactive messages: the seqs and bookmarks of the
        queue's messages among ``records`` (read from the log at the cursor) that
        ``matches`` takes (their acks are deferred here; a replicated queue logs the
        bookmarks, which the other instances apply)."""
        window = self.window
        assert window is not None
        flt = self.filter
        config = self.config
        out: list[tuple[int, str]] = []
        for rec in records:
            if rec.seq < window.cursor or rec.seq in window.deferred:
                continue
            if rec.kind not in MESSAGE_KINDS or not config.takes(rec.topic):
                continue
            bm = rec.bookmark
            if flt is not None and not flt.matches(MessageView(rec.topic, rec.body, bookmark=bm)):
                continue
            if matches(QueuedMessage(rec.seq, bm, rec.topic, rec.body, rec.timestamp_us)):
                out.append((rec.seq, bm))
        return out


class QueueStage:
    """The queues' publish stage (appended, recovering).

    Args:
        queues: the runtimes, in configuration order.
        on_enqueued: told of each queue that took messages (the service delivers).
        log_now: logs a queue's ownership changes at once (the service's transfers);
            None: they go to the queue's :attr:`QueueRuntime.outgoing` (the end of the
            turn).
    """

    def __init__(
        self,
        queues: Sequence[QueueRuntime],
        on_enqueued: Callable[[QueueRuntime], None],
        log_now: Callable[[QueueRuntime, Sequence[Wire]], None] | None = None,
    ) -> None:
        self._queues = list(queues)
        self._by_name = {q.config.name: q for q in queues}
        self._on_enqueued = on_enqueued
        self._log_now = log_now
        self._taken: dict[str, list[QueueRuntime]] = {}
        #: the queues that publish dead letters to each topic
        self._dead: dict[str, list[QueueRuntime]] = {}
        for q in queues:
            if q.config.dead_letter is not None:
                self._dead.setdefault(q.config.dead_letter.topic, []).append(q)
        #: this instance's publisher identity (the only one that may publish to a
        #: dead-letter topic here: :meth:`prepare`)
        self.own_pub_hash: Callable[[], int] = lambda: 0
        #: start-up: per queue, its dead letters published here that no ``QUEUE_ACK``
        #: followed in the log yet (a crash between the two): local seqs, bookmarks. The
        #: service logs the missing acks once recovery is done (:meth:`unacked_dead`)
        self._dead_unacked: dict[QueueRuntime, tuple[set[int], set[str]]] = {}
        self.recovered_messages = 0
        self.recovered_acks = 0
        #: told of each queue a refold changed (the service moves its pin and delivers)
        self.on_refolded: Callable[[QueueRuntime], None] = on_enqueued
        #: the current time (µs) for ownership changes a refold applies
        self.now_us: Callable[[], int] = lambda: 0

    def takers(self, topic: str) -> list[QueueRuntime]:
        """The queues whose underlying topics include ``topic`` (memoised per topic)."""
        found = self._taken.get(topic)
        if found is None:
            found = [q for q in self._queues if q.config.takes(topic)]
            if len(self._taken) < 100_000:
                self._taken[topic] = found
        return found

    def applies_to(self, topic: str) -> bool:
        return self.takes_events(topic) or bool(self.takers(topic)) or topic in self._dead

    def takes_events(self, topic: str) -> bool:
        """Whether ``topic`` is a replicated queue's name (its acks and transfers arrive
        by replication as runs of that topic)."""
        queue = self._by_name.get(topic)
        return queue is not None and queue.ownership is not None

    def prepare(self, run: PublishRun) -> None:
        """Only a replication link brings a queue's own records (acks, transfers); no
        client can publish them (the pipeline refuses any other kind on a topic without
        a stage that prepares it: this stage takes a queue's name). Nor a dead letter:
        a delayed one is refused when it is published, as its due record, written
        without this check, would be read back as a dead letter.

        A delayed message to a topic a replicated queue takes is refused too: each
        instance enters it at its own due record, while the queue's ownership protocol
        takes a publisher's messages to arrive in its sequence order (acks and grants of
        a sequence below one already seen are dropped), so a copy could keep a message
        another instance acked."""
        if run.kind in _EVENT_KINDS and not run.path:
            raise InvalidTopic(f"{run.topic!r} is a queue: its acks come from consumers")
        if run.kind == RecordKind.SCHEDULED:
            replicated = [q.config.name for q in self.takers(run.topic) if q.ownership is not None]
            if replicated:
                raise InvalidOptions(
                    f"delayed delivery is not available on {run.topic!r}: replicated queue "
                    f"{replicated[0]!r} takes it (a replicated queue takes messages in "
                    "their publishers' order)"
                )
        if (
            run.topic in self._dead
            and (run.kind in MESSAGE_KINDS or run.kind == RecordKind.SCHEDULED)
            and not run.path
            and run.pub_hash != self.own_pub_hash()
        ):
            names = ", ".join(repr(q.config.name) for q in self._dead[run.topic])
            raise InvalidTopic(
                f"{run.topic!r} is the dead-letter topic of queue {names}: only the broker "
                "publishes there"
            )
        return None

    def reaches(self, topic: str, peer: Outbound) -> bool:
        return False  # deliveries leave after the run (QueueService.kick)

    def appended(self, run: AppendedRun) -> None:
        if not run.recorded:
            return
        if run.kind in _EVENT_KINDS:
            queue = self._by_name.get(run.topic)
            if queue is not None and queue.ownership is not None:
                for i, body in enumerate(run.bodies):
                    queue.receive(run.kind, body, run.timestamp_us or 0,
                                  seq=run.first_seq + i)  # fmt: skip
                self._on_enqueued(queue)
            return
        if run.kind not in MESSAGE_KINDS:
            return
        if run.path and run.topic in self._dead:
            # another instance's dead letters: the message left the queue there (ours
            # were taken out before they were published)
            self._dead_letters(run.topic, run.bodies, mine=False, replay=False)
        ts = run.timestamp_us or 0
        n = len(run.bodies)
        for queue in self.takers(run.topic):
            if queue.admit(
                run.topic, run.bodies, run.first_seq, [ts] * n, [run.pub_hash] * n,
                run.pub_seqs, published_on(run.path, queue.instance), run.corr_ids,
            ):  # fmt: skip
                if queue.held_before_us and run.path and ts < queue.held_before_us:
                    # back from a range this instance lost: its ack may still come
                    queue.machine.hold_seqs(range(run.first_seq, run.first_seq + n))
                self._on_enqueued(queue)

    def _dead_letters(
        self, topic: str, bodies: Iterable[bytes], mine: bool, replay: bool, seq: int = 0
    ) -> None:
        """Dead letters on ``topic``: each takes its message out of the queue it names,
        when that queue publishes its dead letters there (a body that is not a dead
        letter of one of them is left alone). ``seq``: where the first one is in the
        log (start-up: a queue reads only from its checkpoint on)."""
        queues = self._dead[topic]
        for i, body in enumerate(bodies):
            found = deadletter.decode(body)
            if found is None or found[0].redriven is not None:
                continue  # not a dead letter, or the mark of one sent back (no removal)
            letter = found[0]
            for queue in queues:
                if queue.config.name != letter.queue or (seq and seq + i < queue.start_seq):
                    continue
                if queue.dead_lettered(letter, mine, replay) and replay and mine:
                    seqs, bookmarks = self._dead_unacked.setdefault(queue, (set(), set()))
                    if queue.ownership is None:
                        seqs.add(letter.seq)
                    else:
                        bookmarks.add(letter.bookmark)
                if not replay:
                    self._on_enqueued(queue)

    def unacked_dead(self) -> dict[QueueRuntime, tuple[list[int], list[str]]]:
        """Start-up, once the log is read: per queue, the dead letters published here
        whose ``QUEUE_ACK`` is not in the log (local seqs, bookmarks); forgotten here."""
        out = {
            q: (sorted(seqs), sorted(bookmarks))
            for q, (seqs, bookmarks) in self._dead_unacked.items()
            if seqs or bookmarks
        }
        self._dead_unacked.clear()
        return out

    def _acked_dead(self, queue: QueueRuntime, body: bytes) -> None:
        """Start-up: a ``QUEUE_ACK`` of ``queue`` read back: the dead letters it names
        have their ack."""
        pending = self._dead_unacked.get(queue)
        if pending is None:
            return
        seqs, bookmarks = decode_ack(body)
        pending[0].difference_update(seqs)
        pending[1].difference_update(bookmarks)

    def duplicated(self, run: PublishRun, i: int, pub_seq: int, held: str | None) -> None:
        """Another instance's copy of a message the log held (the pipeline dropped it):
        each replicated queue that has the message learns where else it was published
        (:meth:`QueueRuntime.duplicated`). A winning claim is logged at once, before the
        rest of the run: the dropped copy will not come again (the link's position
        passes it with the next record logged from there), so a crash must not keep the
        records after it and lose the claim (the log loses only a suffix)."""
        if run.kind not in MESSAGE_KINDS:
            return
        bm = format_bookmark(run.pub_hash, pub_seq)
        for queue in self.takers(run.topic):
            here = queue.instance
            held_on = None if held is None else published_on((held,), here) if held else here
            claims = queue.duplicated(bm, published_on(run.path, here), held_on)
            if not claims:
                continue
            if self._log_now is not None:
                self._log_now(queue, claims)
            else:
                queue.outgoing.extend(claims)
                self._on_enqueued(queue)

    def recover(self, batch: RecordBatch) -> None:
        by_name = self._by_name
        dead = self._dead
        dead_unacked = self._dead_unacked
        corr_ids = batch.has_corr_ids()
        kinds = batch.kinds()
        plain = kinds <= {int(RecordKind.PUBLISH)}
        first = batch.first_seq
        topics = batch.topics
        for i in range(len(batch)):
            topic = topics[i]
            kind = int(RecordKind.PUBLISH) if plain else batch.kind(i)
            if kind in (_QUEUE_ACK, _QUEUE_TRANSFER):
                queue = by_name.get(topic)
                if queue is not None and first + i >= queue.start_seq:
                    queue.receive(kind, batch.bodies[i], batch.timestamps_us[i], replay=True,
                                  seq=first + i, mine=not batch.path(i))  # fmt: skip
                    self.recovered_acks += kind == _QUEUE_ACK
                    if dead_unacked and kind == _QUEUE_ACK:
                        self._acked_dead(queue, batch.bodies[i])
                continue
            if kind not in MESSAGE_KINDS:
                continue
            if dead and topic in dead:
                self._dead_letters(topic, (batch.bodies[i],), mine=not batch.path(i),
                                   replay=True, seq=first + i)  # fmt: skip
            takers = self.takers(topic)
            if not takers:
                continue
            for queue in takers:
                if first + i < queue.start_seq:
                    continue  # before its checkpoint: every such message has left it
                self.recovered_messages += queue.admit(
                    topic, [batch.bodies[i]], first + i, [batch.timestamps_us[i]],
                    [batch.pub_hashes[i]], [batch.pub_seqs[i]],
                    published_on(batch.path(i), queue.instance),
                    [batch.corr_id(i)] if corr_ids else None,
                )  # fmt: skip

    def refold(self) -> QueueRefold:
        return QueueRefold(self, self._by_name)

    def unfolded(self, ranges: Sequence[tuple[int, int]]) -> None:
        """The ranges the start-up rebuild went past that no refold took back yet: each
        queue's :attr:`~QueueRuntime.unfolded_floor` (those at or after its checkpoint)."""
        for q in self._queues:
            q.unfolded_floor = min(
                (max(first, q.start_seq) for first, last in ranges if last >= q.start_seq),
                default=0,
            )

    def recovered(self) -> None:
        """The start-up replay is done (:meth:`QueueRuntime.recovered`)."""
        for q in self._queues:
            q.recovered()

    def recover_from(self) -> int:
        """The earliest queue checkpoint (server/queues/checkpoint.py): each queue takes
        the records from its own on; a queue without one reads the whole log (its state
        is its messages minus its acks, and nothing else keeps it)."""
        return min((q.start_seq or 1 for q in self._queues), default=1 << 62)


class QueueRefold:
    """The queues' catch-up for one repaired range (:class:`~spool.server.ports.Refold`): its
    records are taken in as the start-up rebuild would have taken them, with what came
    after them in the log (already folded) deciding what still applies.

    - A message of the range enters its queue unless a ``QUEUE_ACK`` of the queue after
      it names it (by seq, or by bookmark for a replicated queue): that message left
      the queue, and must never be delivered again. One already in the queue stays as
      it is. A bounded queue's message at or after its cursor is left to the refill,
      which reads the log in order and meets it; one before the cursor enters directly
      (the window may then hold more than its target until enough leave).
    - The range's own ``QUEUE_ACK`` and ``QUEUE_TRANSFER`` records are applied as the
      rebuild applies them (an ack takes its message out, wherever it is; a grant moves
      ownership by the epoch rule, and counts in the transfer counters; a request is
      held and answered once the queue runs).
    - Grants after the range that name a message of it entered ownership when the
      message was not known here (and were dropped, its publisher's position being past
      it): they are applied to it now, by the same epoch rule.
    """

    def __init__(self, stage: QueueStage, by_name: dict[str, QueueRuntime]) -> None:
        self._stage = stage
        self._by_name = by_name
        #: the range's records that concern a queue, in log order
        self._records: list[Record] = []
        #: per queue, the range's messages that may enter it: seq -> bookmark
        self._candidates: dict[QueueRuntime, dict[int, str]] = {}
        #: per queue, the same by bookmark (a replicated ack names the bookmark)
        self._by_bookmark: dict[QueueRuntime, dict[str, int]] = {}
        #: per queue, the latest grant after the range naming one of its messages
        self._grants: dict[QueueRuntime, dict[str, Grant]] = {}
        #: how many of :attr:`_records` were applied, and whether the grants were
        self._applied = 0
        self._granted = False

    def repaired(self, records: Sequence[Record]) -> None:
        by_name = self._by_name
        takers = self._stage.takers
        keep = self._records.append
        for rec in records:
            kind = rec.kind
            if kind in _EVENT_KINDS:
                if rec.topic in by_name:
                    keep(rec)
                continue
            if kind not in MESSAGE_KINDS:
                continue
            kept = False
            for queue in takers(rec.topic):
                if rec.seq < queue.start_seq:
                    continue  # before its checkpoint: every such message has left it
                self._candidates.setdefault(queue, {})[rec.seq] = rec.bookmark
                self._by_bookmark.setdefault(queue, {})[rec.bookmark] = rec.seq
                if not kept:
                    keep(rec)
                    kept = True

    def later(self, records: Sequence[Record]) -> None:
        if not self._candidates:
            return
        by_name = self._by_name
        for rec in records:
            kind = rec.kind
            if kind not in _EVENT_KINDS:
                continue
            queue = by_name.get(rec.topic)
            if queue is None:
                continue
            candidates = self._candidates.get(queue)
            if not candidates:
                continue
            by_bm = self._by_bookmark[queue]
            if kind == _QUEUE_ACK:
                seqs, bookmarks = decode_ack(rec.body)
                for seq in seqs:
                    bm = candidates.pop(seq, None)
                    if bm is not None:
                        by_bm.pop(bm, None)
                for bm in bookmarks:
                    seq = by_bm.pop(bm, 0)
                    if seq:
                        candidates.pop(seq, None)
                continue
            grants = self._grants.setdefault(queue, {})
            for change in decode_transfers(rec.body):
                if type(change) is Grant and change.bookmark in by_bm:
                    held = grants.get(change.bookmark)
                    if held is None or (change.epoch, change.owner) > (held.epoch, held.owner):
                        grants[change.bookmark] = change

    @property
    def done(self) -> bool:
        return self._granted

    def apply(self, limit: int) -> int:
        """The range's records in log order, ``limit`` at a time; once all are in, the
        grants after the range that name its messages."""
        stage = self._stage
        by_name = self._by_name
        changed: set[QueueRuntime] = set()
        made = 0
        part = self._records[self._applied : self._applied + max(1, limit)]
        self._applied += len(part)
        for rec in part:
            kind = rec.kind
            if kind in _EVENT_KINDS:
                queue = by_name[rec.topic]
                before = queue.machine.depth
                queue.receive(kind, rec.body, rec.timestamp_us, replay=True, seq=rec.seq,
                              mine=not rec.path)  # fmt: skip
                made += before - queue.machine.depth
                changed.add(queue)
                continue
            for queue in stage.takers(rec.topic):
                candidates = self._candidates.get(queue)
                if not candidates or rec.seq not in candidates:
                    continue  # not the queue's, or acked later
                if queue.machine.get(rec.bookmark) is not None:
                    continue
                if queue.restore(rec):
                    made += 1
                    changed.add(queue)
        if self._applied >= len(self._records):
            self._granted = True
            self._records.clear()
            now = stage.now_us()
            for queue, grants in self._grants.items():
                own = queue.ownership
                if own is None:
                    continue
                for grant in grants.values():
                    if queue.machine.get(grant.bookmark) is not None:
                        queue.outgoing.extend(own.receive(grant, now, replay=True))
                        changed.add(queue)
        for queue in changed:
            queue.take_pending()
            stage.on_refolded(queue)
        return made
