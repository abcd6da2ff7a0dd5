"""``TargetQueueDepth`` on a replicated queue: a bounded copy against an unbounded one
under ownership changes that name inactive messages (server/queues/stage.py, window.py,
ownership.py), over a log kept in a list.

The oracle state machine is instance ``a`` of a replicated queue whose messages are
published on ``a`` and on ``b``. Both copies get the same traffic: publishes (some outside
the queue's filter), grants from other instances (to ``a``, ``b`` or ``c``, any epoch) and
acks by bookmark from other instances — for active messages, inactive ones, and ones not
published yet —, local acks of messages ``a`` owns, requests from other instances (answered as the
unbounded copy answers, for active and inactive messages), ``b`` going offline and back (an
offline owner's messages do not count against the window), refills of the bounded window
in steps of any size, and restarts that replay the log into a fresh bounded copy. The
unbounded copy is the truth: at every step every active message of the bounded copy has
the truth's owner and epoch, the active ones are the oldest (log order), the inactive
ones are exactly the truth's messages from the cursor on, and the acks kept for inactive
messages are exactly those of messages acked while inactive (plus those of messages not
published yet); draining the bounded copy meets every message the truth still holds, each
with the truth's owner, and none that left."""

from __future__ import annotations

import orjson
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from spool.server.bookmarks import broker_pub_hash, format_bookmark
from spool.server.clock import VirtualClock
from spool.server.config.model import QueueConfig
from spool.server.queues.ownership import Grant, Ownership, Request
from spool.server.queues.records import encode_ack_bookmarks, encode_transfers
from spool.server.queues.stage import QueueRuntime, QueueStage
from spool.server.queues.window import Window
from spool.server.txlog.format.batch import RecordBatch
from spool.server.txlog.format.record import Record, RecordKind

#: publishers: a client of instance a, and one of instance b (its messages reach a with
#: the replication path ("b",))
_PUBS = {"a": 11, "b": 22}
_QUEUE_ACK = int(RecordKind.QUEUE_ACK)


def _config(target: int) -> QueueConfig:
    return QueueConfig(
        name="work", kind="Queue", underlying="work-in", filter="/k = 1",
        max_backlog=1000, target_queue_depth=target,
    )  # fmt: skip


def _runtime(target: int, clock: VirtualClock) -> QueueRuntime:
    return QueueRuntime.build(_config(target), clock, "a", replicated=True)


class ReplicatedBoundedVersusUnbounded(RuleBasedStateMachine):
    """See the module docstring."""

    @initialize(depth=st.integers(1, 4))
    def start(self, depth: int) -> None:
        self.target = depth
        self.log: list[Record] = []
        self.clock = VirtualClock()
        self.truth = _runtime(0, self.clock)
        self.next_pub = {"a": 1, "b": 1}
        self.members: dict[str, int] = {}  # bookmark -> seq of the queue's messages
        self.seqs: dict[str, int] = {}  # bookmark -> seq of every published message
        self.acked: set[str] = set()  # bookmarks acked (here or elsewhere)
        self.b_offline = False
        self.ever_offline = False
        self.events = {"a": 1, "b": 1, "c": 1}
        self._open()

    def _open(self) -> None:
        """A fresh bounded copy: the log replayed into it (a restart); then the link
        state, as the first timer tick after start-up tells it."""
        self.bounded = _runtime(self.target, self.clock)
        if self.log:
            QueueStage([self.bounded], lambda q: None).recover(RecordBatch.from_records(self.log))
        if self.b_offline:
            self._own(self.bounded).owner_offline("b", True)

    @staticmethod
    def _own(q: QueueRuntime) -> Ownership:
        assert q.ownership is not None
        return q.ownership

    @property
    def window(self) -> Window:
        assert self.bounded.window is not None
        return self.bounded.window

    def _append(self, rec: Record) -> Record:
        self.log.append(rec)
        return rec

    def _event(self, on: str, kind: RecordKind, body: bytes) -> None:
        """A queue event logged on instance ``on`` (replicated here when not ``a``),
        applied by both copies as the queue stage does."""
        seq = len(self.log) + 1
        path = () if on == "a" else (on,)
        self._append(Record(seq, seq, broker_pub_hash(on), self.events[on], "work", "json",
                            kind, path, 0, body))  # fmt: skip
        self.events[on] += 1
        for q in (self.bounded, self.truth):
            q.receive(int(kind), body)
            q.outgoing.clear()

    def _bookmark(self, data: st.DataObject) -> str:
        """A bookmark of a published message (a member or not), or of one of ``b``'s next
        messages (a change that arrives before its message)."""
        published = sorted(self.members)
        future = [format_bookmark(_PUBS["b"], self.next_pub["b"] + d) for d in range(3)]
        return data.draw(st.sampled_from(published + future))

    @rule(origin=st.sampled_from(["a", "b"]), ks=st.lists(st.integers(0, 1), min_size=1,
                                                           max_size=5))  # fmt: skip
    def publish(self, origin: str, ks: list[int]) -> None:
        """One run of one publisher (consecutive publisher sequences)."""
        first = len(self.log) + 1
        bodies = [orjson.dumps({"k": k}) for k in ks]
        pub_seqs = list(range(self.next_pub[origin], self.next_pub[origin] + len(ks)))
        self.next_pub[origin] += len(ks)
        path = () if origin == "a" else ("b",)
        for i, body in enumerate(bodies):
            rec = self._append(Record(first + i, first + i, _PUBS[origin], pub_seqs[i],
                                      "work-in", "json", RecordKind.PUBLISH, path, 0, body))  # fmt: skip
            self.seqs[rec.bookmark] = rec.seq
            if ks[i] == 1:
                self.members[rec.bookmark] = rec.seq
        for q in (self.bounded, self.truth):
            q.admit("work-in", bodies, first, list(range(first, first + len(ks))),
                    [_PUBS[origin]] * len(ks), pub_seqs, origin)  # fmt: skip
            q.outgoing.clear()

    @rule(data=st.data(), owner=st.sampled_from(["a", "b", "c"]), epoch=st.integers(1, 4),
          sender=st.sampled_from(["b", "c"]))  # fmt: skip
    def grant(self, data: st.DataObject, owner: str, epoch: int, sender: str) -> None:
        bm = self._bookmark(data)
        self._event(sender, RecordKind.QUEUE_TRANSFER, encode_transfers([Grant(bm, owner, epoch)]))

    @rule(data=st.data(), requester=st.sampled_from(["b", "c"]), epoch=st.integers(0, 2))
    def request(self, data: st.DataObject, requester: str, epoch: int) -> None:
        """Another instance asks ``a`` for a message (at the truth's epoch when the truth
        has it): the bounded copy answers as the unbounded one, for an active message or
        an inactive one; the answers are logged as ``a``'s."""
        bm = self._bookmark(data)
        entry = self._own(self.truth)._entries.get(bm)
        asked = Request(bm, requester, "a", entry.epoch if entry is not None else epoch)
        if asked.epoch == 0 and not bm.startswith(f"{_PUBS['a']}|"):
            return  # at epoch 0 a message is asked of its initial owner only (b, here)
        body = encode_transfers([asked])
        seq = len(self.log) + 1
        self._append(Record(seq, seq, broker_pub_hash(requester), self.events[requester],
                            "work", "json", RecordKind.QUEUE_TRANSFER, (requester,), 0, body))  # fmt: skip
        self.events[requester] += 1
        answers = []
        for q in (self.bounded, self.truth):
            q.receive(int(RecordKind.QUEUE_TRANSFER), body)
            answers.append(list(q.outgoing))
            q.outgoing.clear()
        assert answers[0] == answers[1], "the bounded copy answered otherwise"
        if answers[0]:
            grants = [g for g in answers[0] if type(g) is Grant]
            seq = len(self.log) + 1
            self._append(Record(seq, seq, broker_pub_hash("a"), self.events["a"], "work",
                                "json", RecordKind.QUEUE_TRANSFER, (), 0,
                                encode_transfers(grants)))  # fmt: skip
            self.events["a"] += 1

    @rule(data=st.data(), sender=st.sampled_from(["b", "c"]))
    def ack_elsewhere(self, data: st.DataObject, sender: str) -> None:
        bm = self._bookmark(data)
        self.acked.add(bm)
        self._event(sender, RecordKind.QUEUE_ACK, encode_ack_bookmarks([bm]))

    @rule(data=st.data())
    def ack_here(self, data: st.DataObject) -> None:
        """A consumer here acked messages ``a`` may deliver (the service's ``_log``)."""
        own = self._own(self.bounded)
        mine = sorted(m.bookmark for m in self.bounded.machine.messages()
                      if own.can_deliver(m.bookmark))  # fmt: skip
        if not mine:
            return
        bms = data.draw(st.lists(st.sampled_from(mine), min_size=1, unique=True))
        truth_own = self._own(self.truth)
        for bm in bms:
            assert truth_own.can_deliver(bm), "the bounded copy delivers what the truth would not"
        self._ack_here(bms)

    def _ack_here(self, bms: list[str]) -> None:
        for q in (self.bounded, self.truth):
            q.machine.drop(bms, "acked")
            for bm in bms:
                self._own(q).acked(bm)
        self.acked.update(bms)
        seq = len(self.log) + 1
        self._append(Record(seq, seq, broker_pub_hash("a"), self.events["a"], "work", "json",
                            RecordKind.QUEUE_ACK, (), 0, encode_ack_bookmarks(bms), sow_key="acked"))  # fmt: skip
        self.events["a"] += 1

    @rule()
    def b_goes_offline_or_back(self) -> None:
        self.b_offline = not self.b_offline
        self.ever_offline = True
        for q in (self.bounded, self.truth):
            self._own(q).owner_offline("b", self.b_offline)

    @rule(step=st.integers(1, 8))
    def refill(self, step: int) -> None:
        w = self.window
        if w.room(self.bounded.counted()):
            self.bounded.activate(self.log[w.cursor - 1 : w.cursor - 1 + step], len(self.log))

    @rule()
    def restart(self) -> None:
        self._open()

    @invariant()
    def same_state(self) -> None:
        if not hasattr(self, "bounded"):
            return
        truth, bounded = self.truth, self.bounded
        t_own, b_own = self._own(truth), self._own(bounded)
        truth_msgs = {m.bookmark: m.seq for m in truth.machine.messages()}
        assert set(truth_msgs) == set(self.members) - self.acked
        active = {m.bookmark: m.seq for m in bounded.machine.messages()}
        w = self.window
        for bm in active:
            assert bm in truth_msgs, f"{bm} is active but left the queue"
            assert (b_own.owner(bm), b_own._entries[bm].epoch) == (
                t_own.owner(bm),
                t_own._entries[bm].epoch,
            ), f"{bm}: owner differs from the unbounded copy"
        cursor = w.cursor
        if not cursor:
            assert active == truth_msgs
        else:
            assert all(s < cursor for s in active.values()), "the active ones are the oldest"
            waiting = {bm for bm, s in truth_msgs.items() if s >= cursor}
            assert set(active) | waiting == set(truth_msgs)
            members_after = {bm for bm, s in self.members.items() if s >= cursor}
            assert w.inactive == len(members_after)  # counted until the refill passes them
        # acks kept: of messages acked while inactive, and of messages not published yet
        kept = {bm for bm in self.acked
                if bm not in self.seqs or (cursor and self.seqs[bm] >= cursor)}  # fmt: skip
        assert b_own.early_acks() == len(kept)
        if not self.ever_offline:  # (an offline owner's messages are not counted)
            assert bounded.machine.depth <= self.target

    @rule()
    def drain(self) -> None:
        """Refill and take out every active message until the bounded copy is empty; each
        message met on the way is one the truth holds, with the truth's owner."""
        met: set[str] = set()
        acked_before = set(self.acked)
        for _ in range(len(self.log) + 2):
            w = self.window
            if w.room(self.bounded.counted()):
                self.bounded.activate(self.log[w.cursor - 1 :], len(self.log))
            self.same_state()
            bms = [m.bookmark for m in self.bounded.machine.messages()]
            if not bms and not w.cursor:
                break
            met.update(bms)
            if bms:
                self._ack_here(bms)
        assert self.bounded.machine.depth == 0 and self.truth.machine.depth == 0
        assert met <= set(self.members) and not (met & acked_before)


ReplicatedBoundedVersusUnbounded.TestCase.settings = settings(
    max_examples=200, stateful_step_count=40
)
test_replicated_bounded_queue_versus_unbounded = ReplicatedBoundedVersusUnbounded.TestCase
