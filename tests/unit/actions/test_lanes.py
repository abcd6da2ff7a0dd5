"""The lane of an event-driven action (server/actions/lanes.py) against a list model.

The state machine plays a producer and a worker over a log kept as a counter: the producer
offers runs of messages (each run takes the next seqs of the log), the worker takes
batches, finishes them oldest first (appending what it derived to the log, then recording
a mark), the log becomes durable step by step, and the lane stops at some point. The model
is a list of the runs queued; at every step the lane holds exactly those, in order, never
more messages than its capacity, counts every message offered once (taken, dropped or
queued), and its checkpoint is the last mark whose marks before it are all durable,
derived messages included: never a seq whose candidates are not all done.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from spool.server.actions.lanes import MAX_MARKS, EventLane, Hold


@dataclass(frozen=True, slots=True)
class Run:
    """Candidate messages with source seqs ``first`` .. ``last``."""

    first: int
    last: int

    @property
    def count(self) -> int:
        return self.last - self.first + 1


class LaneVersusList(RuleBasedStateMachine):
    """See the module docstring."""

    @initialize(capacity=st.integers(1, 10), start=st.none() | st.integers(0, 20))
    def begin(self, capacity: int, start: int | None) -> None:
        self.loop = asyncio.new_event_loop()
        self.capacity = capacity
        self.start = start
        self.lane: EventLane[Run] = EventLane("a", capacity, checkpoint=start)
        self.last_seq = start or 0  # the log's end
        self.durable = self.last_seq
        self.queue: list[Run] = []  # the model: what the lane holds, in order
        self.accepted: list[Run] = []  # every run queued, in order
        self.taken: list[Run] = []  # every run handed to the worker, in order
        self.batches: list[list[Run]] = []  # taken, not finished (oldest first)
        self.finished: set[Run] = set()
        self.marks: list[tuple[int, int, Hold | None]] = []  # (upto_seq, needs, hold)
        self.holds: list[Hold] = []  # the holds not released yet
        self.accepting = True
        self.offered = self.dropped = 0

    def teardown(self) -> None:
        self.loop.close()

    @rule(count=st.integers(1, 6))
    def offer(self, count: int) -> None:
        run = Run(self.last_seq + 1, self.last_seq + count)
        self.last_seq = run.last
        fits = self.accepting and sum(r.count for r in self.queue) + count <= self.capacity
        assert self.lane.offer(run) is fits
        self.offered += count
        if fits:
            self.queue.append(run)
            self.accepted.append(run)
        else:
            self.dropped += count

    @rule(limit=st.integers(1, 8))
    def take(self, limit: int) -> None:
        expected: list[Run] = []
        total = 0
        for run in self.queue:
            if expected and total + run.count > limit:
                break
            expected.append(run)
            total += run.count
        if self.queue or not self.accepting:
            batch = self.loop.run_until_complete(self.lane.take(limit))
        else:  # would wait for an offer
            batch = self.lane.take_nowait(limit)
        assert batch == expected
        del self.queue[: len(batch)]
        self.taken.extend(batch)
        if batch:
            self.batches.append(batch)

    @precondition(lambda self: bool(self.batches))
    @rule(derived=st.integers(0, 3), posts=st.integers(0, 2))
    def finish(self, derived: int, posts: int) -> None:
        """The worker ends its oldest batch: what it derived is appended, then marked,
        with ``posts`` side effects still under way."""
        batch = self.batches.pop(0)
        self.finished.update(batch)
        derived_seq = None
        if derived:
            self.last_seq += derived
            derived_seq = self.last_seq
        upto = batch[-1].last
        hold = None
        if posts:
            hold = Hold()
            for _ in range(posts):
                hold.add()
                self.holds.append(hold)
        self.lane.done(upto, derived_seq, hold)
        self.marks.append((upto, upto if derived_seq is None else derived_seq, hold))

    @precondition(lambda self: bool(self.holds))
    @rule(which=st.integers(0, 10))
    def settle(self, which: int) -> None:
        """One side effect under way settles (in any order)."""
        self.holds.pop(which % len(self.holds)).release()

    @rule(step=st.integers(0, 6))
    def sync(self, step: int) -> None:
        self.durable = min(self.durable + step, self.last_seq)

    @rule()
    def stop(self) -> None:
        self.lane.stop()
        self.accepting = False

    @invariant()
    def counts_are_conserved(self) -> None:
        lane = self.lane
        assert (lane.offered, lane.dropped, lane.accepting) == (
            self.offered, self.dropped, self.accepting,
        )  # fmt: skip
        assert lane.queued == sum(r.count for r in self.queue) <= self.capacity
        assert lane.taken == sum(r.count for r in self.taken)
        assert lane.offered == lane.taken + lane.dropped + lane.queued

    @invariant()
    def first_in_first_out(self) -> None:
        assert self.taken + self.queue == self.accepted

    @invariant()
    def the_checkpoint_is_done_durable_and_settled(self) -> None:
        """Never past a mark not durable or held; exactly the durable prefix once every
        hold is released (while one is held, marks merged with its mark wait too)."""
        limit = self.start
        for upto, needs, hold in self.marks:
            if needs > self.durable or (hold is not None and not hold.settled):
                break
            limit = upto
        got = self.lane.checkpoint(self.durable)
        if not self.holds:
            assert got == limit
        else:
            assert got == self.start or (got is not None and limit is not None and got <= limit)
        if got is None:
            return
        assert got <= self.durable
        assert all(r in self.finished for r in self.accepted if r.first <= got)
        assert all(needs <= self.durable for upto, needs, _ in self.marks if upto <= got)
        assert all(h is None or h.settled for upto, _, h in self.marks if upto <= got)
        assert self.lane.marks <= len(self.marks)


LaneVersusList.TestCase.settings = settings(max_examples=200, stateful_step_count=40)
test_lane_versus_list = LaneVersusList.TestCase


def test_a_mark_never_goes_back() -> None:
    lane: EventLane[Run] = EventLane("a", 10, checkpoint=5)
    with pytest.raises(ValueError, match="behind"):
        lane.done(4)
    lane.done(5)
    lane.done(9, 12)
    with pytest.raises(ValueError, match="behind"):
        lane.done(8)
    assert lane.checkpoint(11) == 5  # the derived message at 12 is not durable yet
    assert lane.checkpoint(12) == 9
    assert lane.checkpoint(3) == 9  # durability does not go back


def test_marks_nobody_asks_about_stay_bounded_and_never_pass_durability() -> None:
    lane: EventLane[Run] = EventLane("a", 10)
    for i in range(1, 3 * MAX_MARKS):
        lane.done(2 * i - 1, 2 * i)  # a source, then its derived message
    assert lane.marks == MAX_MARKS
    got = lane.checkpoint(5 * MAX_MARKS)  # the oldest marks kept are durable
    assert got is not None and got < 5 * MAX_MARKS
    final = 2 * (3 * MAX_MARKS - 1)
    assert lane.checkpoint(final) == final - 1
    assert lane.marks == 0


def test_a_held_mark_waits_for_its_side_effects_and_so_do_those_merged_into_it() -> None:
    lane: EventLane[Run] = EventLane("a", 10)
    posts = Hold()
    posts.add()
    lane.done(5, 8, posts)  # a post under way for sources up to 5
    lane.done(7)  # durable with the mark before: merged into it
    assert lane.checkpoint(20) is None
    posts.release()
    assert lane.checkpoint(20) == 7


def test_a_held_mark_forgotten_past_the_bound_hands_its_hold_on() -> None:
    lane: EventLane[Run] = EventLane("a", 10)
    posts = Hold()
    posts.add()
    lane.done(1, 2, posts)
    for i in range(2, MAX_MARKS + 2):
        lane.done(2 * i - 1, 2 * i)
    assert lane.marks == MAX_MARKS  # the held mark itself was forgotten
    assert lane.checkpoint(10 * MAX_MARKS) is None
    posts.release()
    assert lane.checkpoint(10 * MAX_MARKS) == 2 * (MAX_MARKS + 1) - 1


def test_a_run_that_does_not_fit_whole_is_dropped_whole() -> None:
    lane: EventLane[Run] = EventLane("a", 5)
    assert lane.offer(Run(1, 3))
    assert not lane.offer(Run(4, 6))  # 3 more do not fit in the 2 places left
    assert lane.offer(Run(7, 8))
    assert (lane.offered, lane.queued, lane.dropped) == (8, 5, 3)
    assert lane.take_nowait(1) == [Run(1, 3)]  # longer than the limit: alone, not never
    assert lane.take_nowait() == [Run(7, 8)]
    assert lane.take_nowait() == []


def test_take_waits_for_an_offer() -> None:
    async def scenario() -> None:
        lane: EventLane[Run] = EventLane("a", 10)
        taking = asyncio.ensure_future(lane.take())
        for _ in range(3):
            await asyncio.sleep(0)
        assert not taking.done()
        assert lane.offer(Run(1, 2))
        assert await asyncio.wait_for(taking, 1) == [Run(1, 2)]
        assert (lane.queued, lane.taken) == (0, 2)

    asyncio.run(scenario())


def test_take_ends_once_stopped_and_drained() -> None:
    async def scenario() -> None:
        lane: EventLane[Run] = EventLane("a", 10)
        taking = asyncio.ensure_future(lane.take())
        await asyncio.sleep(0)
        lane.stop()
        assert await asyncio.wait_for(taking, 1) == []

        lane = EventLane("b", 10)
        lane.offer(Run(1, 1))
        lane.offer(Run(2, 2))
        lane.stop()
        assert not lane.offer(Run(3, 4))  # after stop: dropped, counted
        assert (lane.offered, lane.queued, lane.dropped) == (4, 2, 2)
        assert await lane.take(1) == [Run(1, 1)]  # what was queued is still taken
        assert await lane.take(1) == [Run(2, 2)]
        assert await lane.take() == []
        assert await lane.take() == []

    asyncio.run(scenario())


def test_a_lane_holds_at_least_one_message() -> None:
    with pytest.raises(ValueError, match="at least one"):
        EventLane("a", 0)


def test_a_lane_resumes_from_a_checkpoint_read_at_start_up() -> None:
    lane: EventLane[Run] = EventLane("a", 10)
    assert lane.checkpoint(0) is None
    lane.resume(40)
    assert lane.checkpoint(0) == 40  # what was read back stands until a later one is durable
    with pytest.raises(ValueError, match="behind the previous one, 40"):
        lane.done(39)
    lane.done(45, 50)
    assert lane.checkpoint(49) == 40
    assert lane.checkpoint(50) == 45
