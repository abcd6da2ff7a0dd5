"""The run forms of a replicated queue's ownership (server/queues/ownership.py):
``messages``, ``acked_many`` and ``receive_acks`` against the per-message ``message``,
``acked`` and ``receive(Ack)`` they stand for.

Two copies of one instance's ownership get the same events in any order a hypothesis
state machine picks — runs of messages from three publishers (some already known, some
with an ack or a grant kept for them, some no longer able to arrive), local acks, acks
and grants from the others, requests, leases, owners going offline, proxied transfer on
and off, hand-backs — one through the per-message calls (the oracle), the other through
the run calls. Every answer must be equal, and so must every view of every message.
"""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from spool.server.queues.ownership import Grant, Ownership, OwnershipAck, Request

S = 1_000_000
HERE = "b"
PEERS = ("a", "c")
PUBLISHERS = {"a": 11, "b": 22, "c": 33}  # instance -> publisher hash of its bookmarks


class RunsMatchMessages(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.one = Ownership(HERE)  # per-message calls
        self.run = Ownership(HERE)  # run calls
        self.seq = dict.fromkeys(PUBLISHERS, 0)  # the next sequence per publisher
        self.known: list[str] = []  # every bookmark named so far
        self.now = 0

    def _both(self, name: str, *args: object) -> None:
        a = getattr(self.one, name)(*args)
        b = getattr(self.run, name)(*args)
        assert a == b, (name, args, a, b)

    def _bookmark(self, publisher: str, ahead: int) -> str:
        return f"{PUBLISHERS[publisher]}|{self.seq[publisher] + ahead}|"

    @rule(on=st.sampled_from(sorted(PUBLISHERS)), k=st.integers(1, 6),
          again=st.integers(0, 2), back=st.integers(0, 3))  # fmt: skip
    def arrive(self, on: str, k: int, again: int, back: int) -> None:
        """A run published on ``on`` enters: ``k`` new messages, ``again`` of them named
        twice (a message already here), the first ``back`` seqs from below the
        publisher's position (one that can no longer arrive, or did already)."""
        self.now += 1000
        start = max(1, self.seq[on] + 1 - back)
        seqs = list(range(start, self.seq[on] + 1 + k))
        seqs += seqs[:again]
        bms = [f"{PUBLISHERS[on]}|{s}|" for s in seqs]
        times = [self.now + i for i in range(len(bms))]
        entered_one = [self.one.message(bm, on, t) for bm, t in zip(bms, times, strict=True)]
        entered_run = self.run.messages(bms, on, times)
        assert (entered_run or [True] * len(bms)) == entered_one
        self.seq[on] = max(self.seq[on], max(seqs))
        for o in (self.one, self.run):
            o.passed(PUBLISHERS[on], max(seqs))
        self.known.extend(bms)

    @rule(publisher=st.sampled_from(sorted(PUBLISHERS)), ahead=st.integers(-2, 3),
          data=st.data())  # fmt: skip
    def acks_from_elsewhere(self, publisher: str, ahead: int, data: st.DataObject) -> None:
        """A ``QUEUE_ACK`` from another instance: known messages and ones not here yet."""
        bms = [self._bookmark(publisher, ahead)]
        if self.known:
            bms += data.draw(st.lists(st.sampled_from(self.known), max_size=4))
        for bm in bms:
            self.one.receive(OwnershipAck(bm))
        self.run.receive_acks(bms)

    @rule(publisher=st.sampled_from(sorted(PUBLISHERS)), ahead=st.integers(0, 3),
          owner=st.sampled_from(("a", "b", "c")), epoch=st.integers(0, 3))  # fmt: skip
    def grant(self, publisher: str, ahead: int, owner: str, epoch: int) -> None:
        """A grant from another instance, often for a message not here yet (kept)."""
        self._both("receive", Grant(self._bookmark(publisher, ahead), owner, epoch))

    @precondition(lambda self: self.known)
    @rule(data=st.data(), requester=st.sampled_from(PEERS), epoch=st.integers(0, 2))
    def request(self, data: st.DataObject, requester: str, epoch: int) -> None:
        bm = data.draw(st.sampled_from(self.known))
        self._both("receive", Request(bm, requester, HERE, epoch))

    @precondition(lambda self: self.known)
    @rule(data=st.data())
    def acked_here(self, data: st.DataObject) -> None:
        bms = data.draw(st.lists(st.sampled_from(self.known), max_size=5))
        wires = [w for bm in bms for w in self.one.acked(bm)]
        assert self.run.acked_many(bms) == len(wires)

    @precondition(lambda self: self.known)
    @rule(data=st.data(), leased=st.booleans())
    def lease(self, data: st.DataObject, leased: bool) -> None:
        self._both("leased", data.draw(st.sampled_from(self.known)), leased)

    @rule(spare=st.integers(0, 4))
    def want(self, spare: int) -> None:
        self.now += S
        self._both("want", self.now, spare, S // 2)

    @rule(peer=st.sampled_from(PEERS), offline=st.booleans())
    def link(self, peer: str, offline: bool) -> None:
        self._both("owner_offline", peer, offline, self.now)

    @rule(on=st.booleans())
    def proxied(self, on: bool) -> None:
        self._both("set_proxied", on)

    @rule()
    def hand_back(self) -> None:
        self._both("hand_back", self.now)

    @invariant()
    def same_views(self) -> None:
        one, run = self.one, self.run
        for bm in self.known:
            assert one.owner(bm) == run.owner(bm), bm
            assert one.can_deliver(bm) == run.can_deliver(bm), bm
        assert one.owners() == run.owners()
        assert (one.owned(), one.taken(), one.early(), one.early_acks(), len(one)) == (
            run.owned(), run.taken(), run.early(), run.early_acks(), len(run)
        )  # fmt: skip
        assert one.pending == run.pending
        assert one.handed_back == run.handed_back
        assert one.requests_waiting() == run.requests_waiting()


TestRunsMatchMessages = RunsMatchMessages.TestCase
TestRunsMatchMessages.settings = settings(max_examples=200, stateful_step_count=40)


def test_a_run_from_another_instance_is_parked_for_requests_in_order() -> None:
    """The run form queues another instance's messages as request candidates in arrival
    order, as ``message`` does one at a time."""
    o = Ownership(HERE)
    bms = [f"11|{i}|" for i in range(1, 6)]
    assert o.messages(bms, "a", [10, 20, 30, 40, 50]) is None
    assert o.owned() == 0 and o.owners() == {"a"}
    assert o.want(10 * S, 3, S) == [Request(bm, HERE, "a", 0) for bm in bms[:3]]


def test_an_ack_kept_for_a_message_of_a_run_keeps_it_out() -> None:
    o = Ownership(HERE)
    o.receive_acks(["11|2|"])  # acked on another instance before it came here
    assert o.early_acks() == 1
    assert o.messages(["11|1|", "11|2|", "11|3|"], "a", [1, 2, 3]) == [True, False, True]
    assert len(o) == 2 and o.early() == 0
