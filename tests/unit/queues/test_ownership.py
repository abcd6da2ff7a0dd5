"""Replicated-queue ownership (server/queues/ownership.py): instances over a fake link.

The link keeps one FIFO per ordered pair of instances and delivers when the test says so
(a hypothesis state machine picks the order), and can be cut (an instance offline)."""

from __future__ import annotations

from collections import deque
from itertools import pairwise

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from spool.server.queues.ownership import (
    MAX_REASK_US,
    REASK_US,
    Grant,
    Ownership,
    OwnershipAck,
    Request,
    Wire,
)

S = 1_000_000
NAMES = ("a", "b", "c")

#: what crosses the fake link: an ownership message, or a replicated publish
Item = Wire | tuple[str, str]


class Fabric:
    """Instances joined by per-pair FIFO links."""

    def __init__(self, names: tuple[str, ...] = NAMES, initial_owner: str | None = None) -> None:
        self.nodes = {n: Ownership(n, initial_owner) for n in names}
        self.links: dict[tuple[str, str], deque[Item]] = {
            (s, d): deque() for s in names for d in names if s != d
        }
        self.down: set[str] = set()
        #: every grant each instance sent
        self.grants: dict[str, list[Grant]] = {n: [] for n in names}

    def send(self, src: str, items: list[Wire] | list[Item]) -> None:
        self.grants[src].extend(i for i in items if type(i) is Grant)
        for (s, _), q in self.links.items():
            if s == src:
                q.extend(items)

    def publish(self, on: str, bm: str, now: int = 0) -> None:
        self.nodes[on].message(bm, on, now)
        self.send(on, [("publish", bm)])

    def step(self, src: str, dst: str, now: int = 0) -> bool:
        if src in self.down or dst in self.down:
            return False
        q = self.links[(src, dst)]
        if not q:
            return False
        item = q.popleft()
        node = self.nodes[dst]
        if isinstance(item, tuple) and len(item) == 2 and item[0] == "publish":
            node.message(item[1], src, now)
        else:
            self.send(dst, node.receive(item))  # type: ignore[arg-type]
        return True

    def drain(self, now: int = 0) -> None:
        while any(self.step(s, d, now) for (s, d) in list(self.links)):
            pass

    def deliverers(self, bm: str) -> list[str]:
        return [n for n, o in self.nodes.items() if o.can_deliver(bm)]


def test_the_publishing_instance_owns_and_the_first_request_is_granted() -> None:
    f = Fabric()
    f.publish("a", "m1")
    f.drain()
    assert f.deliverers("m1") == ["a"]
    assert [o.owner("m1") for o in f.nodes.values()] == ["a", "a", "a"]
    # b and c both waited longer than the typical time: both ask, a grants b's only
    f.send("b", f.nodes["b"].want(10 * S, spare=5, typical_wait_us=S))
    f.send("c", f.nodes["c"].want(10 * S, spare=5, typical_wait_us=S))
    f.step("b", "a")
    f.step("c", "a")
    f.drain()
    assert f.deliverers("m1") == ["b"]
    assert {o.owner("m1") for o in f.nodes.values()} == {"b"}
    assert f.grants == {"a": [Grant("m1", "b", 1)], "b": [], "c": []}


def test_a_leased_message_is_not_given_away_and_acks_converge() -> None:
    f = Fabric()
    f.publish("a", "m1")
    f.drain()
    f.nodes["a"].leased("m1", True)
    f.send("b", f.nodes["b"].want(10 * S, spare=1, typical_wait_us=S))
    f.drain()
    assert f.deliverers("m1") == ["a"]
    f.send("a", f.nodes["a"].acked("m1"))
    f.drain()
    assert all(len(o) == 0 for o in f.nodes.values())


def test_initial_owner_owns_what_others_publish() -> None:
    f = Fabric(initial_owner="c")
    f.publish("a", "m1")
    f.drain()
    assert f.deliverers("m1") == ["c"]


def test_proxied_transfer_takes_over_from_an_offline_owner_with_the_duplicate_risk() -> None:
    f = Fabric(("a", "b"))
    f.publish("a", "m1")
    f.publish("a", "m2")
    f.drain()
    f.nodes["a"].leased("m1", True)  # a delivered m1, then died before the ack
    f.down.add("a")
    assert f.nodes["b"].owner_offline("a", True) == []  # proxied transfer is off: stuck
    assert f.deliverers("m2") == ["a"]
    f.send("b", f.nodes["b"].set_proxied(True))  # the operator, over REST
    assert f.nodes["b"].can_deliver("m1") and f.nodes["b"].can_deliver("m2")
    # the documented duplicate risk: a delivered m1 and b delivers it again
    assert f.deliverers("m1") == ["a", "b"]
    assert f.nodes["b"].taken() == 2
    f.nodes["b"].leased("m1", True)  # b's consumer is processing m1
    # a comes back: what b took and has not out is handed back at once, m1 when its
    # lease here ends unacked
    f.down.discard("a")
    back = f.nodes["b"].owner_offline("a", False)
    assert back == [Grant("m2", "a", 2)]
    f.send("b", back)
    f.nodes["b"].set_proxied(False)
    f.drain()
    assert f.deliverers("m1") == ["b"] and f.deliverers("m2") == ["a"]  # nothing lost
    assert {o.owner("m2") for o in f.nodes.values()} == {"a"}
    assert f.nodes["b"].returning()
    f.nodes["b"].leased("m1", False)
    f.send("b", f.nodes["b"].hand_back(0))
    f.drain()
    assert f.deliverers("m1") == ["a"] and f.nodes["b"].taken() == 0
    assert f.nodes["b"].handed_back == 2
    assert sorted(g for g in f.grants["b"] if not g.proxied) == [Grant("m1", "a", 2),
                                                                 Grant("m2", "a", 2)]  # fmt: skip


def test_an_acked_takeover_is_not_handed_back() -> None:
    f = Fabric(("a", "b"))
    f.publish("a", "m1")
    f.drain()
    f.down.add("a")
    f.nodes["b"].owner_offline("a", True)
    f.send("b", f.nodes["b"].set_proxied(True))
    f.send("b", f.nodes["b"].acked("m1"))  # processed on b while a was away
    f.down.discard("a")
    assert f.nodes["b"].owner_offline("a", False) == []
    f.drain()
    assert all(len(o) == 0 for o in f.nodes.values())  # a's copy converges: acked


def test_a_takeover_won_by_another_proxy_is_handed_back_by_the_winner() -> None:
    f = Fabric()
    f.publish("a", "m1")
    f.drain()
    f.down.add("a")
    for n in ("b", "c"):  # both operators enable proxied transfer at once
        f.nodes[n].owner_offline("a", True)
        f.send(n, f.nodes[n].set_proxied(True))
    f.drain()
    # the same epoch: the higher name wins on every copy that heard both (a is away)
    assert [n for n in f.deliverers("m1") if n != "a"] == ["c"]
    assert (f.nodes["b"].taken(), f.nodes["c"].taken()) == (0, 1)
    f.down.discard("a")
    assert f.nodes["b"].owner_offline("a", False) == []
    f.send("c", f.nodes["c"].owner_offline("a", False))
    f.drain()
    assert f.deliverers("m1") == ["a"] and {o.owner("m1") for o in f.nodes.values()} == {"a"}


def test_a_takeover_read_back_from_the_log_is_handed_back_once_the_owner_is_online() -> None:
    b = Ownership("b")
    b.message("m1", "a", 0)
    b.receive(Grant("m1", "b", 1, proxied=True))  # b's own record, at start-up
    assert b.taken() == 1 and b.returning()
    # the first pass finds a offline: nothing yet, and nothing lost
    b.owner_offline("a", True)
    assert b.hand_back(0) == [] and b.can_deliver("m1")
    assert b.owner_offline("a", False) == [Grant("m1", "a", 2)]
    assert b.taken() == 0 and not b.returning()


def test_a_refused_request_is_asked_again_later() -> None:
    """The owner had the message out when asked; its consumer left since: the message
    must not stay with an owner that has nobody to deliver it to."""
    f = Fabric(("a", "b"))
    f.publish("a", "m1")
    f.drain()
    f.nodes["a"].leased("m1", True)
    f.send("b", f.nodes["b"].want(10 * S, spare=1, typical_wait_us=S // 10))
    f.drain()
    assert f.deliverers("m1") == ["a"]
    f.nodes["a"].leased("m1", False)  # a's consumer went away
    assert f.nodes["b"].want(10 * S + REASK_US // 2, spare=1, typical_wait_us=S // 10) == []
    f.send("b", f.nodes["b"].want(10 * S + REASK_US + 1, spare=1, typical_wait_us=S // 10))
    f.drain()
    assert f.deliverers("m1") == ["b"]


def test_a_request_read_back_at_start_up_is_answered_by_the_running_instance() -> None:
    """The owner had the message out when asked, and stopped before the lease ended.
    Reading its log back must not grant the request there and then (the grant would be
    in memory only: the owner would think the message given away, the requester would
    never hear of it, and each would ask the other for it for ever); the instance, once
    running, grants it and the grant goes out."""
    a = Ownership("a")  # a restarts: its log holds the message and b's request
    a.message("1|1|", "a", 0)
    assert a.receive(Request("1|1|", "b", "a", 0), 5 * S, replay=True) == []
    assert a.can_deliver("1|1|") and a.owner("1|1|") == "a"
    assert a.requests_waiting() == 1
    assert a.answer(6 * S) == [Grant("1|1|", "b", 1)]
    assert a.owner("1|1|") == "b" and a.requests_waiting() == 0
    # a grant that was logged before the stop is read back after its request: nothing
    # is held, nothing granted twice
    a2 = Ownership("a")
    a2.message("1|1|", "a", 0)
    a2.receive(Request("1|1|", "b", "a", 0), 5 * S, replay=True)
    a2.receive(Grant("1|1|", "b", 1), 5 * S, replay=True)
    assert a2.answer(6 * S) == [] and a2.owner("1|1|") == "b"


def test_a_request_for_a_leased_message_is_held_and_answered_when_the_lease_ends() -> None:
    f = Fabric(("a", "b"))
    f.publish("a", "m1")
    f.drain()
    a, b = f.nodes["a"], f.nodes["b"]
    a.leased("m1", True)
    f.send("b", b.want(10 * S, spare=1, typical_wait_us=S // 10))
    f.drain()
    assert b.requests_open() == 1 and a.requests_waiting() == 1
    state = a.request_state("m1")
    assert state is not None and (state.asked, state.requester, state.epoch) == (False, "b", 0)
    assert a.answer(11 * S) == []  # still out
    a.leased("m1", False)
    f.send("a", a.answer(12 * S))
    f.drain()
    assert f.deliverers("m1") == ["b"] and b.requests_open() == 0
    assert f.grants["a"] == [Grant("m1", "b", 1)]


def test_repeated_requests_back_off_and_change_nothing_at_the_owner() -> None:
    a, b = Ownership("a"), Ownership("b")
    a.message("m1", "a", 0)
    b.message("m1", "a", 0)
    a.leased("m1", True)
    asked: list[int] = []
    t = S
    while t < 400 * S:
        for r in b.want(t, spare=1, typical_wait_us=S // 10):
            asked.append(t)
            assert a.receive(r, t) == []
        t += S // 20
    gaps = [y - x for x, y in pairwise(asked)]
    assert gaps == sorted(gaps) and gaps[-1] >= MAX_REASK_US  # less and less often
    assert len(asked) <= 15 and a.requests_waiting() == 1
    state = b.request_state("m1")
    assert state is not None and state.asked and state.times == len(asked)


def test_no_request_goes_to_an_offline_owner_and_they_resume_when_it_is_back() -> None:
    b = Ownership("b")
    b.message("m1", "a", 0)
    b.owner_offline("a", True)
    assert b.want(10 * S, 5, S) == []
    b.owner_offline("a", False)
    assert b.want(10 * S, 5, S) == [Request("m1", "b", "a", 0)]


def test_an_ack_before_its_message_is_applied_when_it_arrives() -> None:
    c = Ownership("c")
    c.receive(OwnershipAck("7|3|"))  # b acked a's message before a's publish reached c
    assert c.early() == 1
    assert c.message("7|3|", "a", 0) is False  # it does not enter
    assert c.early() == 0 and len(c) == 0


def test_an_ack_is_not_kept_once_its_message_cannot_arrive() -> None:
    c = Ownership("c")
    c.receive(OwnershipAck("7|3|"))
    c.receive(Grant("7|4|", "b", 1))
    c.passed(7, 3)  # publisher 7's position passed 3: the message was filtered out
    assert c.early() == 1
    c.passed(7, 10)
    assert c.early() == 0
    # a second ack of a message that came and went (processed twice) is not kept at all
    c.message("7|11|", "a", 0)
    c.passed(7, 11)
    c.receive(OwnershipAck("7|11|"))
    c.receive(OwnershipAck("7|11|"))
    c.receive(Grant("7|11|", "b", 1))
    assert c.early() == 0 and len(c) == 0


def test_early_changes_are_capped() -> None:
    c = Ownership("c", max_early=3)
    for i in range(1, 6):
        c.receive(OwnershipAck(f"9|{i}|"))
    assert c.early() == 3 and c.early_dropped == 2
    # the oldest went: their messages enter (the documented cost of the cap)
    assert c.message("9|1|", "a", 0) is True
    assert c.message("9|5|", "a", 0) is False


class EarlyOracle(RuleBasedStateMachine):
    """Acks and grants of messages not seen yet, against an oracle: what is kept is
    exactly what can still arrive (its publisher's position is below it), and never
    more than the cap (the oldest go first)."""

    def __init__(self) -> None:
        super().__init__()
        self.o = Ownership("c", max_early=8)
        self.seen: dict[int, int] = {}
        self.entered: set[str] = set()
        #: the oracle's pending changes, oldest first: bookmark -> is an ack
        self.kept: dict[str, bool] = {}

    @rule(pub=st.integers(1, 3), seq=st.integers(1, 30), grant=st.booleans())
    def change(self, pub: int, seq: int, grant: bool) -> None:
        bm = f"{pub}|{seq}|"
        self.o.receive(Grant(bm, "b", 1) if grant else OwnershipAck(bm))
        if bm in self.entered:
            if not grant:
                self.entered.discard(bm)
            return
        if seq <= self.seen.get(pub, 0):
            return
        if grant:
            self.kept.setdefault(bm, False)
        elif not self.kept.get(bm, False):
            self.kept.pop(bm, None)  # an ack replaces a kept grant (and is newer)
            self.kept[bm] = True
        while len(self.kept) > 8:
            del self.kept[next(iter(self.kept))]

    @rule(pub=st.integers(1, 3), step=st.integers(1, 5), enter=st.booleans())
    def publish(self, pub: int, step: int, enter: bool) -> None:
        seq = self.seen.get(pub, 0) + step
        bm = f"{pub}|{seq}|"
        if enter:
            entered = self.o.message(bm, "a", 0)
            assert entered is not self.kept.get(bm, False)  # refused iff acked early
            if entered:
                self.entered.add(bm)
        self.o.passed(pub, seq)
        self.seen[pub] = seq
        self.kept = {
            b: ack
            for b, ack in self.kept.items()
            if int(b.split("|")[1]) > self.seen.get(int(b.split("|")[0]), 0)
        }

    @invariant()
    def matches_the_oracle(self) -> None:
        assert self.o.early() <= 8
        assert {b: v is None for b, v in self.o._early.items()} == self.kept


TestEarlyOracle = EarlyOracle.TestCase
TestEarlyOracle.settings = settings(max_examples=150, stateful_step_count=50)


class Converges(RuleBasedStateMachine):
    """Publishes, requests, leases and acks on three instances, links delivering in any
    order: never two instances that may deliver a message at once, and once the links are
    drained every copy names the same owner and no acked message is left anywhere."""

    def __init__(self) -> None:
        super().__init__()
        self.f = Fabric()
        self.n = 0
        self.now = 0
        self.acked: set[str] = set()

    @rule(on=st.sampled_from(NAMES))
    def publish(self, on: str) -> None:
        self.n += 1
        self.f.publish(on, f"m{self.n}", self.now)

    @rule(src=st.sampled_from(NAMES), dst=st.sampled_from(NAMES))
    def deliver(self, src: str, dst: str) -> None:
        if src != dst:
            self.f.step(src, dst, self.now)

    @rule(who=st.sampled_from(NAMES), spare=st.integers(0, 3))
    def want(self, who: str, spare: int) -> None:
        self.now += S
        self.f.send(who, self.f.nodes[who].want(self.now, spare, S // 2))

    @precondition(lambda self: self.n > 0)
    @rule(who=st.sampled_from(NAMES), data=st.data(), ack=st.booleans())
    def consume(self, who: str, data: st.DataObject, ack: bool) -> None:
        bm = f"m{data.draw(st.integers(1, self.n))}"
        node = self.f.nodes[who]
        if not node.can_deliver(bm):
            return
        if ack:
            self.acked.add(bm)
            self.f.send(who, node.acked(bm))
        else:
            node.leased(bm, True)

    @invariant()
    def one_deliverer(self) -> None:
        for i in range(1, self.n + 1):
            assert len(self.f.deliverers(f"m{i}")) <= 1

    @invariant()
    def the_indexes_match_a_scan(self) -> None:
        for name, node in self.f.nodes.items():
            owners = [node.owner(f"m{i}") for i in range(1, self.n + 1)]
            assert node.owners() == {o for o in owners if o is not None}
            assert node.owned() == owners.count(name)

    def teardown(self) -> None:
        self.f.drain(self.now)
        self.check_converged()

    def check_converged(self) -> None:
        """Every copy agrees: an acked message is owned nowhere, any other by exactly one
        instance, which alone delivers it."""
        for i in range(1, self.n + 1):
            bm = f"m{i}"
            owners = {o.owner(bm) for o in self.f.nodes.values()}
            if bm in self.acked:
                assert owners == {None}
            else:
                assert len(owners) == 1 and None not in owners, (bm, owners)
                assert len(self.f.deliverers(bm)) == 1


TestConverges = Converges.TestCase
TestConverges.settings = settings(max_examples=150, stateful_step_count=40)


class ConvergesWithProxies(Converges):
    """The same with instances going offline and back, proxied transfer switched on and
    off, leases ending and hand-backs: two instances may deliver a message at once only
    if it was taken over by proxy (the documented duplicate risk); once every instance
    is back, leases ended and the links drained, every copy names the same owner,
    nothing is left taken, and no message is stuck or lost."""

    def __init__(self) -> None:
        super().__init__()
        self.ever_taken: set[str] = set()
        send = self.f.send

        def sniff(src: str, items: list[Wire] | list[Item]) -> None:
            for it in items:
                if type(it) is Grant and it.proxied:
                    self.ever_taken.add(it.bookmark)
            send(src, items)

        self.f.send = sniff  # type: ignore[method-assign]

    def _links(self, who: str) -> None:
        """``who`` learns the link state of the others (the service's pass)."""
        node = self.f.nodes[who]
        for other in NAMES:
            if other == who:
                continue
            offline = other in self.f.down or who in self.f.down
            if offline != node.is_offline(other):
                self.f.send(who, node.owner_offline(other, offline, self.now))

    @rule(who=st.sampled_from(NAMES), down=st.booleans())
    def cut(self, who: str, down: bool) -> None:
        if down:
            self.f.down.add(who)
        else:
            self.f.down.discard(who)
        for n in NAMES:
            self._links(n)

    @rule(who=st.sampled_from(NAMES), on=st.booleans())
    def proxied(self, who: str, on: bool) -> None:
        self.f.send(who, self.f.nodes[who].set_proxied(on))

    @precondition(lambda self: self.n > 0)
    @rule(who=st.sampled_from(NAMES), data=st.data())
    def lease_ends(self, who: str, data: st.DataObject) -> None:
        bm = f"m{data.draw(st.integers(1, self.n))}"
        node = self.f.nodes[who]
        node.leased(bm, False)
        self.f.send(who, node.hand_back(self.now))

    @invariant()
    def one_deliverer(self) -> None:
        for i in range(1, self.n + 1):
            bm = f"m{i}"
            assert len(self.f.deliverers(bm)) <= 1 or bm in self.ever_taken, bm

    def teardown(self) -> None:
        self.f.down.clear()
        for n in NAMES:
            self._links(n)
        for _ in range(3):
            self.f.drain(self.now)
            for n, node in self.f.nodes.items():
                for i in range(1, self.n + 1):
                    node.leased(f"m{i}", False)
                self.f.send(n, node.hand_back(self.now))
        self.f.drain(self.now)
        assert all(node.taken() == 0 for node in self.f.nodes.values())
        self.check_converged()


TestConvergesWithProxies = ConvergesWithProxies.TestCase
TestConvergesWithProxies.settings = settings(max_examples=200, stateful_step_count=50)


def test_wire_values_are_plain_tuples() -> None:
    assert Request("m", "b", "a", 0) == ("m", "b", "a", 0) and OwnershipAck("m") == ("m",)
    assert Grant("m", "b", 2) == ("m", "b", 2, False)


def test_the_request_heap_stays_bounded_while_nothing_is_asked() -> None:
    """A busy instance (no spare backlog) asks for nothing for a long time; the places of
    messages acked meanwhile must not pile up in its request heap."""
    o = Ownership("b")
    for i in range(20_000):
        o.message(f"1|{i}|", "a", 0)
        o.receive(OwnershipAck(f"1|{i}|"))
    assert len(o._due) <= 1024 + 2
    o.message("1|x|", "a", 0)
    assert o.want(10 * S, 1, S) == [Request("1|x|", "b", "a", 0)]


# -- a message published on two instances -----------------------------------------------


def test_a_claim_of_a_higher_instance_moves_a_first_owner() -> None:
    """The copies of a message published on a and on b meet: the higher name owns it
    on both, whichever copy each instance logged; the loser logs the claim it lost to
    (a grant at epoch 0) and every copy applies it like a grant."""
    a, b, c = Ownership("a"), Ownership("b"), Ownership("c")
    a.message("1|1|", "a", 0)
    b.message("1|1|", "b", 0)
    c.message("1|1|", "a", 0)  # c logged a's copy first
    assert b.claim("1|1|", "a") == []  # a lower claim: b keeps it
    claim = a.claim("1|1|", "b")
    assert claim == [Grant("1|1|", "b", 0)]
    assert c.claim("1|1|", "b") == claim
    assert [o.owner("1|1|") for o in (a, b, c)] == ["b", "b", "b"]
    assert not a.can_deliver("1|1|") and b.can_deliver("1|1|")
    assert a.claim("1|1|", "b") == [] and c.claim("1|1|", "a") == []  # known, lower
    # a copy that had not met b's copy yet learns it from a claim another logged
    d = Ownership("d")
    d.message("1|1|", "a", 0)
    assert d.receive(claim[0]) == [] and d.owner("1|1|") == "b"


def test_a_claim_changes_nothing_after_a_grant_or_with_an_initial_owner() -> None:
    a, b = Ownership("a"), Ownership("b")
    a.message("1|1|", "a", 0)
    b.message("1|1|", "a", 0)
    (grant,) = a.receive(Request("1|1|", "b", "a", 0))
    assert grant == Grant("1|1|", "b", 1)
    assert a.claim("1|1|", "c") == []  # epoch 1 wins whatever the claim
    assert a.owner("1|1|") == "b"
    g = Ownership("a", initial_owner="a")
    g.message("1|1|", "a", 0)
    assert g.claim("1|1|", "z") == [] and g.owner("1|1|") == "a"


def test_a_claim_of_an_inactive_message_is_kept_until_activation() -> None:
    """A bounded queue: the message is in the log but not active here. A claim of
    another instance than the held copy's is kept and logged, and applied when the
    message enters; another route's copy of the same publication logs nothing."""
    a = Ownership("a")
    a.arrived(1, 5)  # 1|1| .. 1|5| are in a's log, inactive
    assert a.claim("1|3|", "a", held_on="a") == []  # the usual duplicate
    assert a.claim("1|9|", "b", held_on="a") == []  # not in the log
    assert a.claim("1|3|", "b", held_on="a") == [Grant("1|3|", "b", 0)]
    assert a.claim("1|3|", "b", held_on=None) == []  # known
    assert a.is_early("1|3|")
    assert a.claim("1|4|", "b", held_on=None) == [Grant("1|4|", "b", 0)]  # origin not known
    a.message("1|3|", "a", 0)  # activated
    a.passed(1, 3)
    assert a.owner("1|3|") == "b" and not a.can_deliver("1|3|")
    assert a.claim("1|2|", "b", held_on="a") == []  # passed: activated and gone
