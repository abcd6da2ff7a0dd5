"""The back-pressure policy alone (server/backpressure.py): thresholds, routes, the live /
catching-up state machine, and a model of a log, a buffer and a reader in which live
subscriptions spill and rejoin while publishers and the reader interleave at random.

The model checks what the engine relies on: each subscription receives every message of
its topics exactly once, the recorded ones in log order, across any number of spills and
rejoins; the buffer never holds more than the limit, and what could be read back (live
messages of recorded topics, the paced pieces of catch-ups, at most a quarter of the limit
each) never more than half of it, however the catch-ups of the connection interleave; a
connection is disconnected only when a message or heartbeat nobody can read back does not
fit, which data that can be read back never causes alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from spool.server.backpressure import MAX_FRAME, BufferLimits, FeedError, LiveFeed, route


def test_thresholds_are_fractions_of_the_limit() -> None:
    limits = BufferLimits(1000)
    assert (limits.spill_at, limits.paced_at) == (500, 250)
    assert limits.live_fits(400, 100, readable=True)
    assert not limits.live_fits(400, 101, readable=True)
    assert limits.live_fits(400, 600, readable=False)
    assert not limits.live_fits(400, 601, readable=False)
    assert limits.fits(999, 1) and not limits.fits(999, 2)
    assert limits.has_room(249) and not limits.has_room(250)
    assert limits.piece_max == 250 and BufferLimits(3).piece_max == 1


def test_frames_are_a_quarter_of_the_limit_at_most_one_megabyte() -> None:
    assert BufferLimits(64 * 1024).frame_max == 16 * 1024
    assert BufferLimits(1 << 20).frame_max == 256 * 1024
    assert BufferLimits(64 << 20).frame_max == MAX_FRAME


@pytest.mark.parametrize(
    ("fits", "readable", "expected"),
    [
        (True, True, "deliver"),
        (True, False, "deliver"),
        (False, True, "spill"),
        (False, False, "overflow"),
    ],
)
def test_route(fits: bool, readable: bool, expected: str) -> None:
    assert route(fits=fits, readable=readable) == expected


def test_a_feed_spills_catches_up_and_rejoins_at_the_end_of_the_log_only() -> None:
    feed = LiveFeed()
    assert feed.takes(True) and feed.takes(False)
    assert not feed.can_rejoin(1, 0)
    feed.spill(41, now=10.0)
    assert (feed.catching_up, feed.resume_seq, feed.spills) == (True, 41, 1)
    # while catching up: skipped for recorded runs, still fed runs nobody can read back
    assert not feed.takes(True) and feed.takes(False)
    with pytest.raises(FeedError):
        feed.spill(50, now=11.0)
    # the read is behind (or claims to be ahead): no rejoin there
    assert not feed.can_rejoin(45, 60)
    with pytest.raises(FeedError, match="cannot rejoin the live path at 45 with 60"):
        feed.rejoin(45, 60, now=12.0)
    with pytest.raises(FeedError):
        feed.rejoin(62, 60, now=12.0)
    assert feed.rejoin(61, 60, now=12.5) == 2.5
    assert (feed.catching_up, feed.caught_up) == (False, 1)
    with pytest.raises(FeedError, match="nothing to rejoin"):
        feed.rejoin(61, 60, now=13.0)


def test_a_spill_starts_at_a_record() -> None:
    with pytest.raises(FeedError):
        LiveFeed().spill(0, now=0.0)


def test_end_reports_the_time_spent_catching_up() -> None:
    feed = LiveFeed()
    assert feed.end(5.0) == 0.0
    feed.spill(3, now=5.0)
    assert feed.end(9.0) == 4.0
    assert not feed.catching_up


# -- the model ---------------------------------------------------------------------------

LIMIT = 1000
SIZE = 40  # bytes of one encoded message in the model
BEAT = 23  # bytes of a heartbeat
TOPICS = ("r1", "r2", "u1")  # r*: recorded, u*: not recorded
RECORDED = {"r1": True, "r2": True, "u1": False}


@dataclass
class ModelSub:
    """A live subscription of the one connection, and what it received."""

    name: str
    topics: frozenset[str]
    readable: bool
    feed: LiveFeed = field(default_factory=LiveFeed)
    next_seq: int = 0  # the read's position while catching up
    received: list[tuple[str, int]] = field(default_factory=list)  # (topic, message id)


class BackPressureModel(RuleBasedStateMachine):
    """One connection, three subscriptions, a log, publishers and a reader."""

    def __init__(self) -> None:
        super().__init__()
        self.limits = BufferLimits(LIMIT)
        # the log: (seq, topic, message id); seq = index + 1
        self.log: list[tuple[int, str, int]] = []
        self.next_id = 0
        # what each subscription should receive, per topic, in publish order
        self.expected: dict[str, list[tuple[str, int]]] = {}
        self.subs = [
            ModelSub("one", frozenset({"r1"}), readable=True),
            ModelSub("all", frozenset(TOPICS), readable=True),
            # a filter that reads CLIENT_NAME(): nothing can be read back for it
            ModelSub("named", frozenset({"r2"}), readable=False),
        ]
        for sub in self.subs:
            self.expected[sub.name] = []
        # the buffer: pieces of (subscription, (topic, id)) with their bytes and whether
        # they could be read back
        self.buffer: list[tuple[int, bool, list[tuple[ModelSub, tuple[str, int]]]]] = []
        self.depth = 0
        self.readable_depth = 0
        self.closed = False
        self.clock = 0.0

    # -- the broker side --

    @rule(topic=st.sampled_from(TOPICS), n=st.integers(min_value=1, max_value=12))
    @precondition(lambda self: not self.closed)
    def publish(self, topic: str, n: int) -> None:
        """A run of n messages to ``topic``: appended (if recorded), then fanned out."""
        recorded = RECORDED[topic]
        ids = list(range(self.next_id, self.next_id + n))
        self.next_id += n
        first_seq = len(self.log) + 1 if recorded else 0
        if recorded:
            self.log.extend((first_seq + k, topic, i) for k, i in enumerate(ids))
        for sub in self.subs:
            if topic in sub.topics:
                self.expected[sub.name].extend((topic, i) for i in ids)
        takers = [s for s in self.subs if topic in s.topics and s.feed.takes(recorded)]
        if not takers:
            return
        nbytes = n * SIZE  # one message per publish for the connection, whatever takes it
        readable = recorded and all(s.readable for s in takers)
        fits = self.limits.live_fits(self.depth, nbytes, readable=readable)
        decision = route(fits=fits, readable=readable)
        if decision == "deliver":
            self._queue(nbytes, readable, [(s, (topic, i)) for i in ids for s in takers])
        elif decision == "spill":
            assert recorded
            for s in takers:
                s.feed.spill(first_seq, self.clock)
                s.next_seq = first_seq
        else:
            # only what cannot be read back ever disconnects the client
            assert not readable and not fits
            self.closed = True

    @rule(sub_index=st.integers(min_value=0, max_value=2), count=st.integers(1, 20))
    @precondition(lambda self: not self.closed)
    def catch_up_step(self, sub_index: int, count: int) -> None:
        """A spilled subscription's read: one paced piece, or the rejoin at the end."""
        sub = self.subs[sub_index]
        if not sub.feed.catching_up:
            return
        self._read_log(sub, count)

    @rule()
    @precondition(lambda self: not self.closed)
    def heartbeat(self) -> None:
        """Control bytes (a heartbeat, an ack): queued up to L, or the client is cut."""
        if self.limits.fits(self.depth, BEAT):
            self._queue(BEAT, False, [])
            return
        # only what cannot be read back fills the buffer that far
        assert self.depth - self.readable_depth + BEAT > LIMIT - LIMIT // 2
        self.closed = True

    @rule(sub_index=st.integers(min_value=0, max_value=2))
    def a_rejoin_before_the_end_is_refused(self, sub_index: int) -> None:
        """Whatever the caller believes, the machine refuses a rejoin that would skip or
        repeat records."""
        sub = self.subs[sub_index]
        last_seq = len(self.log)
        if not sub.feed.catching_up or sub.next_seq == last_seq + 1:
            return
        with pytest.raises(FeedError):
            sub.feed.rejoin(sub.next_seq, last_seq, self.clock)
        assert sub.feed.catching_up

    def _read_log(self, sub: ModelSub, count: int) -> None:
        last_seq = len(self.log)
        if sub.feed.can_rejoin(sub.next_seq, last_seq):
            sub.feed.rejoin(sub.next_seq, last_seq, self.clock)
            return
        # a batch of ``count`` records, queued in pieces of at most L/4, each once the
        # buffer is below L/4 (the read waits for room before each, as a sink does)
        end = min(len(self.log), sub.next_seq - 1 + count)
        per_piece = max(1, self.limits.piece_max // SIZE)
        while sub.next_seq - 1 < end and self.limits.has_room(self.depth):
            piece: list[tuple[ModelSub, tuple[str, int]]] = []
            while sub.next_seq - 1 < end and len(piece) < per_piece:
                _, t, i = self.log[sub.next_seq - 1]
                sub.next_seq += 1
                if t in sub.topics:
                    piece.append((sub, (t, i)))
            if piece:
                self._queue(len(piece) * SIZE, True, piece)

    def _queue(
        self, nbytes: int, readable: bool, items: list[tuple[ModelSub, tuple[str, int]]]
    ) -> None:
        self.buffer.append((nbytes, readable, items))
        self.depth += nbytes
        if readable:
            self.readable_depth += nbytes

    # -- the client side --

    @rule(pieces=st.integers(min_value=1, max_value=4))
    def read(self, pieces: int) -> None:
        """The client takes the oldest pieces of its buffer."""
        for _ in range(min(pieces, len(self.buffer))):
            nbytes, readable, items = self.buffer.pop(0)
            self.depth -= nbytes
            if readable:
                self.readable_depth -= nbytes
            for sub, message in items:
                sub.received.append(message)

    @rule(seconds=st.floats(min_value=0.0, max_value=5.0))
    def time_passes(self, seconds: float) -> None:
        self.clock += seconds

    # -- what must hold --

    @invariant()
    def the_buffer_stays_bounded(self) -> None:
        # live recorded data stops at L/2, paced data waits below L/4 and comes in pieces of
        # at most L/4, and what would pass L is never queued
        assert self.depth <= LIMIT
        assert self.readable_depth <= LIMIT // 2

    @invariant()
    def every_subscription_received_a_prefix_of_its_messages(self) -> None:
        for sub in self.subs:
            self._check_prefix(sub, sub.received)

    def _check_prefix(self, sub: ModelSub, got: list[tuple[str, int]]) -> None:
        want = self.expected[sub.name]
        for topic in sub.topics:
            mine = [m for m in got if m[0] == topic]
            assert mine == [m for m in want if m[0] == topic][: len(mine)], sub.name
        # the recorded messages arrive in log order whatever topics they are on
        seq_of = {(t, i): s for s, t, i in self.log}
        seqs = [seq_of[m] for m in got if m in seq_of]
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs), sub.name

    def teardown(self) -> None:
        """No more publishes: the reader reads and every catch-up finishes; then each
        subscription has exactly its messages (unless the connection was cut)."""
        for _ in range(10_000):
            self.read(4)
            busy = False
            for sub in self.subs:
                if sub.feed.catching_up and not self.closed:
                    self._read_log(sub, 20)
                    busy = True
            if not busy and not self.buffer:
                break
        if self.closed:
            return
        for sub in self.subs:
            assert not sub.feed.catching_up
            want = self.expected[sub.name]
            assert sorted(sub.received) == sorted(want), sub.name
            self._check_prefix(sub, sub.received)


TestBackPressureModel = BackPressureModel.TestCase
TestBackPressureModel.settings = settings(max_examples=120, stateful_step_count=60, deadline=None)
