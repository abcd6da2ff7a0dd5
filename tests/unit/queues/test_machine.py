"""The queue state machine (server/queues/machine.py): scenarios on explicit times, and a
hypothesis state machine that runs it against a small oracle."""

from __future__ import annotations

import random
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from spool.server.queues.machine import (
    Consumer,
    QueuedMessage,
    QueueMachine,
    QueuePolicy,
)

S = 1_000_000  # one second in microseconds


def msg(seq: int, *, priority: int = 0, barrier: bool = False, at: int = 0) -> QueuedMessage:
    return QueuedMessage(seq, f"1|{seq}|", "work", b"{}", at, priority=priority, barrier=barrier)


def machine(**kw: object) -> QueueMachine:
    return QueueMachine("q", QueuePolicy(**kw), random.Random(7))  # type: ignore[arg-type]


def test_lease_expiry_redelivers_with_a_delivery_count() -> None:
    q = machine(lease_period_us=30 * S, max_backlog=5)
    a = Consumer("a", 5)
    q.subscribe(a)
    q.add(msg(1))
    (d,) = q.dispatch(0)
    assert (d.consumer, d.number, d.lease_us) == (a, 1, 30 * S)
    assert q.tick(30 * S - 1) == [] and q.dispatch(30 * S - 1) == []
    assert q.tick(30 * S) == []  # back to ready, not removed
    (d2,) = q.dispatch(30 * S)
    assert d2.message.seq == 1 and d2.number == 2


def test_disconnect_returns_leases_and_max_deliveries_removes() -> None:
    q = machine(max_backlog=5, max_deliveries=2)
    a, b = Consumer("a", 5), Consumer("b", 5)
    q.subscribe(a)
    q.add(msg(1))
    assert q.dispatch(0)[0].consumer is a
    assert q.unsubscribe(a) == []
    q.subscribe(b)
    (d,) = q.dispatch(0)
    assert d.consumer is b and d.number == 2
    (gone,) = q.unsubscribe(b)
    assert gone.reason == "max_deliveries" and q.depth == 0


def test_cancel_returns_and_max_cancels_removes() -> None:
    q = machine(max_backlog=1, max_cancels=2)
    a = Consumer("a", 1)
    q.subscribe(a)
    q.add(msg(1))
    q.dispatch(0)
    r = q.cancel(a, ["1|1|"])
    assert [m.seq for m in r.returned] == [1] and not r.removed
    q.dispatch(0)
    r = q.cancel(a, ["1|1|"])
    assert [x.reason for x in r.removed] == ["max_cancels"] and q.depth == 0


def test_ack_refused_from_a_consumer_without_the_lease() -> None:
    q = machine(max_backlog=1)
    a, b = Consumer("a", 1), Consumer("b", 1)
    q.subscribe(a)
    q.subscribe(b)
    q.add(msg(1))
    holder = q.dispatch(0)[0].consumer
    other = b if holder is a else a
    assert q.ack(other, ["1|1|"]).refused == ["1|1|"]
    assert q.ack(holder, ["1|1|", "9|9|"]).refused == ["9|9|"]
    assert q.depth == 0


def test_sublet_takes_a_late_ack_strict_does_not() -> None:
    for leasing, taken in (("sublet", True), ("strict", False)):
        q = machine(lease_period_us=S, max_backlog=1, leasing=leasing)
        a = Consumer("a", 1)
        q.subscribe(a)
        q.add(msg(1))
        q.dispatch(0)
        q.unsubscribe(a)  # the lease ends; nobody else leased it since
        q.subscribe(a)
        q.unsubscribe(a)
        r = q.ack(a, ["1|1|"])
        assert (not r.refused) is taken


def test_backlog_limits_leases() -> None:
    q = machine(max_backlog=3)
    a = Consumer("a", 2)
    q.subscribe(a)
    for i in range(1, 6):
        q.add(msg(i))
    assert [d.message.seq for d in q.dispatch(0)] == [1, 2]
    assert q.dispatch(0) == []
    q.ack(a, ["1|1|"])
    assert [d.message.seq for d in q.dispatch(0)] == [3]


def test_barrier_waits_for_everything_ahead_of_it() -> None:
    q = machine(max_backlog=10)
    a = Consumer("a", 10)
    q.subscribe(a)
    q.add(msg(1))
    q.add(msg(2))
    q.add(msg(3, barrier=True))
    q.add(msg(4))
    assert [d.message.seq for d in q.dispatch(0)] == [1, 2, 4]
    q.ack(a, ["1|1|"])
    assert q.dispatch(0) == []
    q.ack(a, ["1|2|"])
    assert [d.message.seq for d in q.dispatch(0)] == [3]


def test_priority_goes_first() -> None:
    q = machine(max_backlog=10)
    a = Consumer("a", 10)
    q.add(msg(1, priority=1))
    q.add(msg(2, priority=5))
    q.add(msg(3, priority=1))
    q.subscribe(a)
    assert [d.message.seq for d in q.dispatch(0)] == [2, 1, 3]


def test_expiration_removes_unread_messages() -> None:
    q = machine(expiration_us=10 * S)
    q.add(msg(1, at=0))
    q.add(msg(2, at=5 * S))
    assert [r.message.seq for r in q.tick(10 * S)] == [1]
    assert q.next_deadline_us() == 15 * S


def test_at_most_once_removes_on_delivery() -> None:
    q = machine(semantics="at-most-once")
    a = Consumer("a", 1)
    q.subscribe(a)
    for i in range(1, 4):
        q.add(msg(i))
    out = q.dispatch(0)
    assert [d.message.seq for d in out] == [1, 2, 3] and q.depth == 0


def test_filters_skip_consumers() -> None:
    q = machine(max_backlog=5)
    odd = Consumer("odd", 5, accepts=lambda m: m.seq % 2 == 1)
    q.subscribe(odd)
    for i in range(1, 5):
        q.add(msg(i))
    assert [d.message.seq for d in q.dispatch(0)] == [1, 3]
    assert q.ready == 2


def _share(fairness: str, backlogs: tuple[int, ...], n: int) -> Counter[str]:
    """Deliver ``n`` messages one at a time to consumers that keep what they get until the
    next message arrives, then ack everything (a steady load)."""
    q = machine(max_backlog=100, fairness=fairness)
    cs = [Consumer(f"c{i}", b) for i, b in enumerate(backlogs)]
    for c in cs:
        q.subscribe(c)
    got: Counter[str] = Counter()
    for i in range(1, n + 1):
        q.add(msg(i))
        for d in q.dispatch(0):
            got[d.consumer.name] += 1
            q.ack(d.consumer, [d.message.bookmark])
    return got


def test_fairness_proportions() -> None:
    rr = _share("round-robin", (1, 3), 1000)
    assert rr["c0"] == rr["c1"] == 500
    fast = _share("fast", (1, 3), 1000)
    assert fast["c0"] == 1000
    prop = _share("proportional", (1, 3), 4000)
    assert 0.22 < prop["c0"] / 4000 < 0.28  # 1 : 3 by free backlog


class QueueModel(RuleBasedStateMachine):
    """The machine against an oracle that tracks each message's state by the rules of
    the module docstring, and checks every delivery the machine chose was allowed."""

    def __init__(self) -> None:
        super().__init__()
        self.policy = QueuePolicy(
            lease_period_us=10 * S, max_backlog=3, max_deliveries=3, max_cancels=2
        )
        self.q = QueueMachine("q", self.policy, random.Random(1))
        self.now = 0
        self.seq = 0
        self.consumers: list[Consumer] = []
        # oracle: seq -> None (ready) | (consumer, until); deleted ones are absent
        self.state: dict[int, tuple[Consumer, int] | None] = {}
        self.barrier: set[int] = set()
        self.prio: dict[int, int] = {}
        self.deliveries: Counter[int] = Counter()
        self.cancels: Counter[int] = Counter()
        self.gone: set[int] = set()
        self.last_holder: dict[int, Consumer] = {}

    def _bm(self, seq: int) -> str:
        return f"1|{seq}|"

    @rule(priority=st.integers(0, 2), barrier=st.booleans())
    def add(self, priority: int, barrier: bool) -> None:
        self.seq += 1
        self.q.add(msg(self.seq, priority=priority, barrier=barrier and self.seq % 3 == 0))
        self.state[self.seq] = None
        self.prio[self.seq] = priority
        if barrier and self.seq % 3 == 0:
            self.barrier.add(self.seq)

    @rule(backlog=st.integers(1, 4), even_only=st.booleans())
    def subscribe(self, backlog: int, even_only: bool) -> None:
        accepts = (lambda m: m.seq % 2 == 0) if even_only else None
        c = Consumer(f"c{len(self.consumers)}", min(backlog, self.policy.max_backlog), accepts)
        self.consumers.append(c)
        self.q.subscribe(c)

    def _end_lease(self, seq: int) -> None:
        if self.deliveries[seq] >= self.policy.max_deliveries:
            del self.state[seq]
            self.gone.add(seq)
        else:
            self.state[seq] = None

    @precondition(lambda self: bool(self.consumers))
    @rule(data=st.data())
    def unsubscribe(self, data: st.DataObject) -> None:
        c = data.draw(st.sampled_from(self.consumers))
        self.consumers.remove(c)
        removed = self.q.unsubscribe(c)
        for seq, s in list(self.state.items()):
            if s is not None and s[0] is c:
                self._end_lease(seq)
        assert {r.message.seq for r in removed} <= self.gone

    @rule()
    def dispatch(self) -> None:
        out = self.q.dispatch(self.now)
        for d in out:
            seq = d.message.seq
            assert seq in self.state and self.state[seq] is None, "delivered a non-ready message"
            if seq in self.barrier:
                assert min(self.state) == seq, "a barrier passed a message ahead of it"
            c = d.consumer
            assert c in self.consumers
            assert c.accepts is None or c.accepts(d.message)
            self.deliveries[seq] += 1
            assert d.number == self.deliveries[seq]
            self.state[seq] = (c, self.now + self.policy.lease_period_us)
            self.last_holder[seq] = c
        # maximal: nothing ready that a consumer with room would take
        for seq, s in self.state.items():
            if s is not None or (seq in self.barrier and min(self.state) != seq):
                continue
            for c in self.consumers:
                held = sum(1 for x in self.state.values() if x is not None and x[0] is c)
                assert not (held < c.backlog and (c.accepts is None or c.accepts(msg(seq))))

    @precondition(lambda self: bool(self.consumers) and self.seq > 0)
    @rule(data=st.data(), how=st.sampled_from(["ack", "cancel", "expire"]))
    def settle(self, data: st.DataObject, how: str) -> None:
        c = data.draw(st.sampled_from(self.consumers))
        seq = data.draw(st.integers(1, self.seq))
        s = self.state.get(seq)
        holds = s is not None and s[0] is c
        result = getattr(self.q, how)(c, [self._bm(seq)])
        if how == "cancel":
            if not holds:
                assert result.refused == [self._bm(seq)]
                return
            self.cancels[seq] += 1
            if self.cancels[seq] >= self.policy.max_cancels:
                del self.state[seq]
                self.gone.add(seq)
            else:
                self.state[seq] = None
            return
        # sublet: a consumer whose lease ran out may still ack what nobody leased since
        sublet = seq in self.state and s is None and self.last_holder.get(seq) is c
        if holds or sublet:
            assert not result.refused
            del self.state[seq]
            self.gone.add(seq)
        else:
            assert result.refused == [self._bm(seq)]

    @rule(seconds=st.integers(1, 15))
    def advance(self, seconds: int) -> None:
        self.now += seconds * S
        self.q.tick(self.now)
        for seq, s in list(self.state.items()):
            if s is not None and s[1] <= self.now:
                self._end_lease(seq)

    @invariant()
    def same_states(self) -> None:
        q = self.q
        assert {m.seq for m in q.messages()} == set(self.state)
        for m in q.messages():
            s = self.state[m.seq]
            assert (m.holder is None) == (s is None)
            if s is not None:
                assert m.holder is s[0]
        for c in self.consumers:
            assert len(c.leased) <= c.backlog


TestQueueModel = QueueModel.TestCase
TestQueueModel.settings = settings(max_examples=150, stateful_step_count=40)


def test_a_leased_message_past_its_expiration_is_not_due_until_its_lease_ends() -> None:
    """The deadline of a leased, expired message must not stay at the top of the heap:
    next_deadline_us() would keep answering a past time and the service's timer spin."""
    q = machine(expiration_us=10 * S, lease_period_us=30 * S)
    a = Consumer("a", 1)
    q.subscribe(a)
    q.add(msg(1, at=0))
    q.dispatch(0)
    assert q.tick(11 * S) == []
    assert q.next_deadline_us() == 30 * S  # the lease end, not the passed expiration
    assert [r.reason for r in q.tick(30 * S)] == ["expired"]


def test_a_message_back_from_its_lease_keeps_its_expiration() -> None:
    q = machine(expiration_us=60 * S, lease_period_us=10 * S)
    a = Consumer("a", 1)
    q.subscribe(a)
    q.add(msg(1, at=0))
    q.dispatch(0)
    q.tick(10 * S)  # back to the queue, not expired yet
    assert q.ready == 1 and q.next_deadline_us() == 60 * S
    assert [r.reason for r in q.tick(60 * S)] == ["expired"]


def test_at_most_once_skips_a_held_consumer() -> None:
    """At-most-once respects the backlog too: a consumer the service holds (backlog 0:
    its connection is full) gets no message."""
    q = machine(semantics="at-most-once", fairness="round-robin")
    full, free = Consumer("full", 0), Consumer("free", 1)
    q.subscribe(full)
    q.subscribe(free)
    for i in range(1, 4):
        q.add(msg(i))
    assert {d.consumer.name for d in q.dispatch(0)} == {"free"}
    q.add(msg(4))
    free.backlog = 0
    assert q.dispatch(0) == [] and q.ready == 1


def _ops(max_size: int, **kinds: tuple[int, int]) -> st.SearchStrategy[list[tuple[str, int]]]:
    """Traffic for the differential tests: ``(operation, argument)`` pairs, each
    operation's argument drawn from its ``(low, high)``."""
    return st.lists(
        st.one_of(*(st.tuples(st.just(k), st.integers(lo, hi)) for k, (lo, hi) in kinds.items())),
        max_size=max_size,
    )


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(0, 6), min_size=1, max_size=5),
    _ops(40, add=(1, 40), dispatch=(1, 50), ack=(0, 4), cancel=(0, 4)),
    st.integers(0, 2**32),
)
def test_proportional_picks_of_unfiltered_consumers_are_those_of_choose(
    backlogs: list[int], ops: list[tuple[str, int]], seed: int
) -> None:
    """``dispatch`` picks among consumers without a filter with weights it keeps itself
    (the fast twin); with a filter that takes everything each pick goes through
    ``_choose`` (the readable twin). Same seed, same traffic: the same consumer gets the
    same message at every step, and both draw the same random numbers."""

    def everything(_m: QueuedMessage) -> bool:
        return True

    rngs = [random.Random(seed) for _ in range(2)]
    policy = QueuePolicy(max_backlog=10, lease_period_us=10 * S)
    machines = [QueueMachine("q", policy, rng) for rng in rngs]
    for q, accepts in zip(machines, (None, everything), strict=True):
        for i, b in enumerate(backlogs):
            q.subscribe(Consumer(f"c{i}", b, accepts=accepts))
    seq = 0
    for op, n in ops:
        if op == "add":
            for _ in range(n):
                seq += 1
                for q in machines:
                    q.add(msg(seq))
            continue
        if op == "dispatch":
            picks = [
                [(d.consumer.name, d.message.seq) for d in q.dispatch(0, limit=n)] for q in machines
            ]
            assert picks[0] == picks[1]
            continue
        for q in machines:
            c = q.consumers[n % len(backlogs)]
            held = [m.bookmark for m in list(c.leased.values())[:2]]
            (q.ack if op == "ack" else q.cancel)(c, held)
    assert [q.ready for q in machines] == [machines[0].ready] * 2
    assert rngs[0].getstate() == rngs[1].getstate()


@settings(max_examples=150, deadline=None)
@given(
    owned_here=st.lists(st.booleans(), min_size=1, max_size=30),
    ops=_ops(30, dispatch=(1, 6), gain=(0, 29), ack=(0, 1)),
)
def test_a_gated_run_parks_what_dispatch_would_park(
    owned_here: list[bool], ops: list[tuple[str, int]]
) -> None:
    """``add_many(gated=True)`` asks the gate as messages enter and parks the ones it
    holds back; without it ``dispatch`` parks them when it reaches them. Same messages,
    same gate, same traffic (deliveries, messages coming to be owned here, acks): the
    same deliveries at every step, and the same ready and parked counts."""
    machines = [machine(max_backlog=3, lease_period_us=10 * S) for _ in range(2)]
    mine = {seq for seq, here in enumerate(owned_here, 1) if here}
    for q in machines:
        q.gate = lambda m: m.seq in mine
        for i in range(2):
            q.subscribe(Consumer(f"c{i}", 3))
    run = range(1, len(owned_here) + 1)
    machines[0].add_many([msg(seq) for seq in run])
    machines[1].add_many([msg(seq) for seq in run], gated=True)
    assert machines[1].parked == len(owned_here) - len(mine)
    for op, n in ops:
        if op == "dispatch":
            picks = [[(d.consumer.name, d.message.seq) for d in q.dispatch(0, n)] for q in machines]
            assert picks[0] == picks[1]
        elif op == "gain":
            mine.add(n + 1)  # this instance came to own it (Ownership.on_gained)
            for q in machines:
                q.unpark(f"1|{n + 1}|")
        else:
            for q in machines:
                c = q.consumers[n]
                q.ack(c, [m.bookmark for m in list(c.leased.values())[:2]])
        assert machines[0].ready == machines[1].ready
    # drained (every lease acked until nothing more is delivered), both hold back
    # exactly the messages still owned elsewhere
    for q in machines:
        while q.dispatch(0) or q.leased:
            for c in q.consumers:
                q.ack(c, [m.bookmark for m in c.leased.values()])
    assert machines[0].parked == machines[1].parked == machines[0].depth
    assert machines[0].depth == len(set(range(1, len(owned_here) + 1)) - mine)


# -- the hold (server/queues/hold.py) ---------------------------------------------------


def _seqs(q: QueueMachine, now: int = 0) -> list[int]:
    return [d.message.seq for d in q.dispatch(now)]


def test_a_hold_keeps_back_what_was_recorded_up_to_it_and_new_work_goes_on() -> None:
    q = machine(max_backlog=20, lease_period_us=10 * S)
    q.subscribe(Consumer("a", 20))
    for seq in range(1, 6):
        q.add(msg(seq))
    q.hold(3)
    assert (q.held(), q.ready) == (3, 5)
    assert _seqs(q) == [4, 5]
    q.hold_seqs([7])  # came back from a lost range
    for seq in (6, 7, 8):
        q.add(msg(seq))
    assert _seqs(q) == [6, 8]
    assert q.held() == 4 and q.holding
    q.hold(1)  # narrower: 2 and 3 go
    assert _seqs(q) == [2, 3]
    q.release_hold()
    assert _seqs(q) == [1, 7]
    assert (q.held(), q.holding) == (0, False)


def test_a_held_message_acked_meanwhile_never_goes() -> None:
    q = machine(max_backlog=5, lease_period_us=10 * S)
    q.subscribe(Consumer("a", 5))
    q.add(msg(1))
    q.add(msg(2))
    q.hold(2)
    assert _seqs(q) == []
    q.forget([1])  # its ack came back (a repair, a resync)
    q.release_hold()
    assert _seqs(q) == [2]


@settings(max_examples=60, deadline=None)
@given(
    through=st.integers(0, 12),
    extra=st.sets(st.integers(1, 12), max_size=4),
    priorities=st.lists(st.integers(0, 2), min_size=12, max_size=12),
    room=st.integers(1, 12),
)
def test_a_hold_delivers_nothing_it_holds_and_everything_once_it_ends(
    through: int, extra: set[int], priorities: list[int], room: int
) -> None:
    """Held or not, the same messages go, each once: the held ones only after the hold
    ends, and the others in the order an unheld queue gives them."""
    held, free = machine(max_backlog=12), machine(max_backlog=12)
    for q in (held, free):
        q.subscribe(Consumer("a", 12))
        for seq, p in enumerate(priorities, 1):
            q.add(msg(seq, priority=p))
    held.hold(through)
    held.hold_seqs(extra)
    kept = {s for s in range(1, 13) if s <= through or s in extra}
    got: list[int] = []
    while True:
        out = [d.message.seq for d in held.dispatch(0, room)]
        if not out:
            break
        got += out
    assert not kept & set(got)
    assert got == [s for s in [d.message.seq for d in free.dispatch(0)] if s not in kept]
    held.release_hold()
    rest = [d.message.seq for d in held.dispatch(0)]
    assert sorted(got + rest) == list(range(1, 13))
