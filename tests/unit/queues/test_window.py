"""``TargetQueueDepth``: the window (server/queues/window.py) and a bounded queue's runtime
(server/queues/stage.py) against an unbounded one, over a log kept in a list.

The oracle state machine drives a bounded and an unbounded queue with the same traffic
(publishes, some outside the queue's filter; acks of delivered messages; removals by
filter; refills of the bounded window in steps of any size; restarts that replay the log
into a fresh bounded queue). The unbounded queue is the truth: at every step the bounded
queue's active messages plus the inactive ones it would still activate are exactly the
unbounded queue's messages, the active ones are the oldest of them (log order), never
more than the target are active, and nothing acked — active or inactive, before or after
a restart — is ever activated again."""

from __future__ import annotations

import orjson
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from spool.server.clock import VirtualClock
from spool.server.config.model import QueueConfig
from spool.server.queues.machine import Consumer, QueuedMessage
from spool.server.queues.records import encode_ack_seqs
from spool.server.queues.stage import QueueRuntime, QueueStage
from spool.server.queues.window import Window
from spool.server.txlog.format.batch import RecordBatch
from spool.server.txlog.format.record import Record, RecordKind

_PUB = 7


def _config(target: int) -> QueueConfig:
    return QueueConfig(
        name="work", kind="LocalQueue", underlying="work-in", filter="/k = 1",
        max_backlog=1000, target_queue_depth=target,
    )  # fmt: skip


def test_the_window_counts_inactive_messages_and_defers_their_acks() -> None:
    w = Window(2)
    assert [w.admits(s, d) for s, d in ((1, 0), (2, 1), (3, 2), (5, 0))] == [
        True, True, False, False,
    ]  # fmt: skip
    assert (w.cursor, w.inactive) == (3, 2)  # once a message waits, later ones wait too
    assert w.defer([1, 5, 5]) == 1 and (w.inactive, w.deferred) == (1, {5})
    assert w.room(1) == 1 and w.passes(3) and not w.passes(5)
    w.moved(6, 5)  # read past the log's end: nothing inactive any more
    assert (w.cursor, w.inactive, w.deferred, w.room(0)) == (0, 0, set(), 0)


class BoundedVersusUnbounded(RuleBasedStateMachine):
    """See the module docstring."""

    @initialize(depth=st.integers(1, 4))
    def start(self, depth: int) -> None:
        self.target = depth
        self.log: list[Record] = []
        self.clock = VirtualClock()
        self.truth = QueueRuntime.build(_config(0), self.clock)
        self.truth_consumer = Consumer("t", 1 << 30)
        self.truth.machine.subscribe(self.truth_consumer)
        self.members: set[int] = set()  # seqs of the queue's messages (filter passed)
        self.gone: set[int] = set()  # seqs that left the queue (acked or removed)
        self._open()

    def _open(self) -> None:
        """A fresh bounded queue: the log replayed into it (a restart)."""
        self.bounded = QueueRuntime.build(_config(self.target), self.clock)
        stage = QueueStage([self.bounded], lambda q: None)
        if self.log:
            stage.recover(RecordBatch.from_records(self.log))
        self.consumer = Consumer("b", 1 << 30)
        self.bounded.machine.subscribe(self.consumer)

    def _append(self, topic: str, kind: RecordKind, body: bytes) -> Record:
        seq = len(self.log) + 1
        rec = Record(seq, seq, _PUB, seq, topic, "json", kind, (), 0, body)
        self.log.append(rec)
        return rec

    def _remove(self, seqs: list[int]) -> None:
        assert not (set(seqs) & self.gone), "a message left the queue twice"
        self.gone.update(seqs)
        if seqs:
            self._append("work", RecordKind.QUEUE_ACK, encode_ack_seqs(seqs))

    @property
    def window(self) -> Window:
        assert self.bounded.window is not None
        return self.bounded.window

    @rule(ks=st.lists(st.integers(0, 1), min_size=1, max_size=6))
    def publish(self, ks: list[int]) -> None:
        for k in ks:
            rec = self._append("work-in", RecordKind.PUBLISH, orjson.dumps({"k": k}))
            if k == 1:
                self.members.add(rec.seq)
            for q in (self.bounded, self.truth):
                q.admit(rec.topic, [rec.body], rec.seq, [rec.seq], [_PUB], [rec.seq])

    @rule(data=st.data())
    def ack(self, data: st.DataObject) -> None:
        self.bounded.machine.dispatch(0)
        self.truth.machine.dispatch(0)
        held = sorted(self.consumer.leased)
        if not held:
            return
        seqs = data.draw(st.lists(st.sampled_from(held), min_size=1, unique=True))
        bms = [self.consumer.leased[s].bookmark for s in seqs]
        removed = self.bounded.machine.ack(self.consumer, bms).removed
        assert sorted(r.message.seq for r in removed) == sorted(seqs)
        truth = self.truth.machine.ack(self.truth_consumer, bms).removed
        assert sorted(r.message.seq for r in truth) == sorted(seqs)
        self._remove(seqs)

    @rule(mod=st.integers(2, 4), rem=st.integers(0, 3))
    def remove_by_filter(self, mod: int, rem: int) -> None:
        def matches(m: QueuedMessage) -> bool:
            return m.seq % mod == rem

        active = [r.message.seq for r in self.bounded.machine.remove_where(matches)]
        inactive: list[int] = []
        if self.window.cursor:
            hits = self.bounded.inactive_matches(self.log[self.window.cursor - 1 :], matches)
            inactive = [seq for seq, _ in hits]
            self.window.defer(inactive)
        truth = [r.message.seq for r in self.truth.machine.remove_where(matches)]
        assert sorted(active + inactive) == sorted(truth)
        self._remove(active + inactive)

    @rule(step=st.integers(1, 8))
    def refill(self, step: int) -> None:
        w = self.window
        if not w.room(self.bounded.machine.depth):
            return
        self.bounded.activate(self.log[w.cursor - 1 : w.cursor - 1 + step], len(self.log))
        for m in self.bounded.machine.messages():
            assert m.seq not in self.gone, f"message {m.seq} was activated after it left"

    @rule()
    def restart(self) -> None:
        self._open()
        self.truth.machine.unsubscribe(self.truth_consumer)
        self.truth_consumer = Consumer("t", 1 << 30)
        self.truth.machine.subscribe(self.truth_consumer)

    @invariant()
    def same_messages(self) -> None:
        if not hasattr(self, "bounded"):
            return
        truth = {m.seq for m in self.truth.machine.messages()}
        assert truth == self.members - self.gone
        active = {m.seq for m in self.bounded.machine.messages()}
        w = self.window
        assert len(active) <= self.target
        inactive = {s for s in truth if w.cursor and s >= w.cursor}
        assert w.inactive == len(inactive)
        assert active | inactive == truth and not active & inactive
        # the active ones are the oldest: the window's rule
        assert all(s < w.cursor for s in active) if w.cursor else active == truth
        assert w.deferred <= self.gone and all(s >= w.cursor for s in w.deferred)

    @rule()
    def drain(self) -> None:
        """Refill and ack until both queues are empty: the same messages came out."""
        for _ in range(len(self.log) + 2):
            w = self.window
            if w.room(self.bounded.machine.depth):
                self.bounded.activate(self.log[w.cursor - 1 :], len(self.log))
            self.bounded.machine.dispatch(0)
            held = sorted(self.consumer.leased)
            if not held:
                break
            assert len(held) <= self.target
            bms = [self.consumer.leased[s].bookmark for s in held]
            self.bounded.machine.ack(self.consumer, bms)
            self.truth.machine.dispatch(0)
            self.truth.machine.ack(self.truth_consumer, bms)
            self._remove(held)
        assert self.bounded.machine.depth == 0 and self.truth.machine.depth == 0
        assert self.gone >= self.members


BoundedVersusUnbounded.TestCase.settings = settings(max_examples=200, stateful_step_count=40)
test_bounded_queue_versus_unbounded = BoundedVersusUnbounded.TestCase
