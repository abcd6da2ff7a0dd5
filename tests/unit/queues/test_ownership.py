"""Replicated-queue ownership (server/queues/ownership.py): instances over a fake link.

The link keeps one FIFO per ordered pair of instances and delivers when the test says so
(a hypothesis state machine picks the order), and can be cut (an instance offline)."""

from __future__ import annotations

from collections import deque

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from server.queues.ownership import Ack, Grant, Ownership, Request, Wire

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

    def send(self, src: str, items: list[Wire] | list[Item]) -> None:
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
    assert (f.nodes["a"].transferred_out, f.nodes["b"].transferred_in) == (1, 1)


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
    f.down.discard("a")
    f.send("b", f.nodes["b"].owner_offline("a", False))
    f.nodes["b"].set_proxied(False)
    f.drain()
    assert f.deliverers("m1") == ["b"] and f.deliverers("m2") == ["b"]  # nothing lost
    assert {o.owner("m2") for o in f.nodes.values()} == {"b"}


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

    def teardown(self) -> None:
        self.f.drain(self.now)
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


def test_wire_values_are_plain_tuples() -> None:
    assert Request("m", "b", "a", 0) == ("m", "b", "a", 0) and Ack("m") == ("m",)
    assert Grant("m", "b", 2) == ("m", "b", 2, False)
