"""The HA client's pure parts, each alone: delay strategies on a virtual clock with seeded
randomness, the server chooser, liveness, and the resume state against an oracle."""

from __future__ import annotations

import random

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from spool.server.client.ha.chooser import Credentials, DefaultServerChooser, StaticAuthenticator
from spool.server.client.ha.delay import ExponentialDelayStrategy, FixedDelayStrategy
from spool.server.client.ha.errors import ReconnectGaveUp
from spool.server.client.ha.heartbeat import HeartbeatLiveness
from spool.server.client.ha.resume import EPOCH, MAX_GAPS, ResumeState, parse_bookmark


class Clock:
    """A virtual monotonic clock: time moves only when the test says."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_exponential_schedule_is_exact_on_a_virtual_clock() -> None:
    clock = Clock()
    strategy = ExponentialDelayStrategy(
        initial=0.5, maximum=4.0, backoff=2.0, max_total=20.0, jitter=0.2, clock=clock,
        rng=random.Random(7),
    )  # fmt: skip
    oracle = random.Random(7)
    waits = []
    for _ in range(7):
        w = strategy.get_connect_wait_duration("ws://a")
        waits.append(w)
        clock.now += w
    # first attempt immediate; then 0.5, 1, 2, 4 (capped) ... each plus jitter in [0, 0.1)
    expected = [0.0]
    for k in range(2, 8):
        base = min(4.0, 0.5 * 2.0 ** (k - 2))
        expected.append(min(4.0, base + oracle.random() * 0.2 * 0.5))
    assert waits == expected
    assert waits[4] == 4.0 and waits[5] == 4.0  # the maximum caps base and jitter
    # a second URI starts its own schedule (a failover is immediate)
    assert strategy.get_connect_wait_duration("ws://b") == 0.0
    # total time: the next wait would end past max_total since the first attempt
    clock.now = 100.0 + 19.0
    with pytest.raises(ReconnectGaveUp, match=r"max_total 20\.0"):
        strategy.get_connect_wait_duration("ws://a")
    strategy.reset()
    assert strategy.get_connect_wait_duration("ws://a") == 0.0


def test_exponential_without_jitter_and_without_limit() -> None:
    clock = Clock()
    s = ExponentialDelayStrategy(initial=1, maximum=10, backoff=3, jitter=0, clock=clock)
    got = [s.get_connect_wait_duration("u") for _ in range(5)]
    assert got == [0.0, 1.0, 3.0, 9.0, 10.0]
    clock.now += 1e9
    assert s.get_connect_wait_duration("u") == 10.0  # max_total 0: never gives up


def test_fixed_delay_and_its_limit() -> None:
    clock = Clock()
    s = FixedDelayStrategy(0.25, max_total=1.0, clock=clock)
    assert s.get_connect_wait_duration("u") == 0.0
    assert s.get_connect_wait_duration("u") == 0.25
    clock.now += 0.8
    with pytest.raises(ReconnectGaveUp):
        s.get_connect_wait_duration("u")


@pytest.mark.parametrize(
    ("initial", "maximum", "backoff", "jitter"),
    [(-1, 20, 2, 1), (2, 1, 2, 1), (0.2, 20, 0.5, 1), (0.2, 20, 2, -1)],
)
def test_exponential_refuses_bad_settings(
    initial: float, maximum: float, backoff: float, jitter: float
) -> None:
    with pytest.raises(ValueError):
        ExponentialDelayStrategy(initial, maximum, backoff, jitter=jitter)


def test_chooser_rotates_on_failure_stays_on_success_and_gives_up_with_an_error() -> None:
    auth_b = StaticAuthenticator("bob", "pw")
    c = DefaultServerChooser(["ws://a"], max_rounds=2)
    c.add("ws://b", auth_b)
    assert c.current_uri() == "ws://a"
    assert c.current_authenticator().authenticate("ws://a") == Credentials()
    c.report_failure(OSError("refused"), "ws://a")
    assert c.current_uri() == "ws://b"
    assert c.current_authenticator().authenticate("ws://b") == Credentials("bob", "pw")
    c.report_success("ws://b")
    assert c.current_uri() == "ws://b"
    for _ in range(3):
        c.report_failure(OSError("refused"), c.current_uri() or "")
    assert c.current_uri() is not None
    c.report_failure(OSError("down"), c.current_uri() or "")
    assert c.current_uri() is None
    assert "in 2 rounds" in c.get_error() and "OSError('down')" in c.get_error()
    assert DefaultServerChooser().current_uri() is None


def test_liveness() -> None:
    lv = HeartbeatLiveness.of(1.0)
    assert lv.idle == 2.0
    assert not lv.dead(now=11.99, last_received=10.0)
    assert lv.dead(now=12.0, last_received=10.0)
    assert lv.next_check(now=10.0, last_received=10.0) == 0.25
    assert lv.next_check(now=11.9, last_received=10.0) == pytest.approx(0.1)
    with pytest.raises(ValueError):
        HeartbeatLiveness.of(1.0, 0.5)


def bm(pub: int, seq: int) -> str:
    return f"{pub}|{seq}|"


def test_resume_state_most_recent_over_several_publishers() -> None:
    s = ResumeState()
    assert s.resume_bookmark() == EPOCH
    arrivals = [bm(1, 1), bm(2, 1), bm(1, 2), bm(2, 2)]
    assert [s.receive(b) for b in arrivals] == [True] * 4
    assert not s.receive(bm(1, 1))  # already received in this process
    s.discard(bm(2, 1))  # out of order: the oldest undiscarded is still 1|1|
    assert s.resume_bookmark() == EPOCH
    s.discard(bm(1, 1))
    assert s.resume_bookmark() == f"{bm(2, 1)},{bm(1, 1)}"
    s.discard(bm(2, 2))  # 1|2| is outstanding
    assert s.recovery == bm(2, 1) and s.outstanding == 1
    # after a restart: the undiscarded message comes again once, the others are dropped
    again = ResumeState.from_snapshot(s.snapshot())
    again.reloaded()
    assert [again.receive(b) for b in arrivals] == [False, False, True, False]
    assert not again.receive(bm(1, 2))
    assert again.resume_bookmark() == s.resume_bookmark()


def test_persisted_position_moves_the_recovery_point_only_when_nothing_is_outstanding() -> None:
    s = ResumeState("0|1|")
    assert s.resume_bookmark() == "0|1|"
    s.receive(bm(1, 5))
    assert not s.persisted(bm(1, 9))
    s.discard(bm(1, 5))
    assert s.persisted(bm(1, 9))
    assert s.resume_bookmark().split(",")[0] == bm(1, 9)


def test_parse_bookmark() -> None:
    assert parse_bookmark("123|45|") == ("123", 45)
    assert parse_bookmark("0") is None and parse_bookmark("1|x|") is None


@given(
    st.lists(st.tuples(st.integers(0, 2), st.booleans()), max_size=60),
    st.randoms(use_true_random=False),
)
def test_resume_state_against_an_oracle(events: list[tuple[int, bool]], rnd: random.Random) -> None:
    """A log of messages from 3 publishers; the application discards some in a random
    order, the process restarts, the log is replayed from the resume point: the new
    process gets exactly the messages not discarded, in log order."""
    counters = [0, 0, 0]
    log: list[str] = []
    for pub, _ in events:
        counters[pub] += 1
        log.append(bm(pub, counters[pub]))
    got, expected = _replayed_after_restart(log, events, rnd)
    assert got == expected


@given(
    st.lists(st.integers(0, 2), min_size=1, max_size=50),
    st.lists(st.sampled_from(["reconnect", "restart"]), min_size=1, max_size=6),
    st.randoms(use_true_random=False),
)
def test_resume_state_across_reconnects_and_restarts(
    pubs: list[int], outages: list[str], rnd: random.Random
) -> None:
    """Rounds of: the broker replays its log from the resume point up to some point; the
    application discards some of what it holds (in any order); then a reconnect (same
    process) or a restart (a snapshot reloaded, what was not discarded is forgotten by
    the application). Oracle: the application is handed each message at most once while
    it holds it, never one it discarded, and in log order within a round; at the end,
    after a last replay, everything is discarded exactly once."""
    counters = [0, 0, 0]
    log = []
    for pub in pubs:
        counters[pub] += 1
        log.append(bm(pub, counters[pub]))
    state = ResumeState()
    held: list[str] = []  # handed over, not discarded (lost by a restart)
    discarded: list[str] = []

    def replay(upto: int) -> None:
        resume = state.resume_bookmark()
        start = 0 if resume == EPOCH else min(log.index(p) for p in resume.split(",")) + 1
        got = [b for b in log[start:upto] if state.receive(b)]
        assert not set(got) & set(discarded), "a discarded message came back"
        assert not set(got) & set(held), "a held message was handed over twice"
        assert got == sorted(got, key=log.index)
        held.extend(got)

    for outage in [*outages, "restart"]:
        replay(rnd.randint(0, len(log)))
        for b in rnd.sample(held, rnd.randint(0, len(held))):
            state.discard(b)
            held.remove(b)
            discarded.append(b)
        if outage == "restart":
            state = ResumeState.from_snapshot(state.snapshot())
            state.reloaded()
            held.clear()
    replay(len(log))
    for b in list(held):
        state.discard(b)
        discarded.append(b)
    assert sorted(discarded, key=log.index) == log and len(set(discarded)) == len(log)


def test_a_late_message_below_a_publishers_highest_is_received_once() -> None:
    """A publisher failed over: the instance serving the subscription holds its 21..30
    before its 11..20, which came later by another route (a late fill). The late ones are
    new to the subscription, once, also after a restart; the gap travels in the snapshot."""
    s = ResumeState()
    for seq in [*range(1, 11), *range(21, 31)]:
        assert s.receive(bm(1, seq))
        s.discard(bm(1, seq))
    assert s.is_discarded(bm(1, 30)) and not s.is_discarded(bm(1, 15))
    assert not s.is_duplicate(bm(1, 15))
    for seq in range(11, 16):
        assert s.receive(bm(1, seq))
        assert not s.receive(bm(1, seq))
        s.discard(bm(1, seq))
    again = ResumeState.from_snapshot(s.snapshot())
    again.reloaded()
    new = [q for q in range(1, 31) if again.receive(bm(1, q))]
    assert new == list(range(16, 21))
    assert not again.receive(bm(1, 18))


def test_a_snapshot_without_gaps_keeps_its_out_of_order_discards() -> None:
    """A store written before gaps were kept: the discards above the contiguous point are
    still duplicates, the sequences between them new."""
    old = {"start": EPOCH, "recovery": bm(1, 3), "contig": {"1": 3}, "above": {"1": [6]},
           "order": [[bm(1, 5), False], [bm(1, 6), True]]}  # fmt: skip
    s = ResumeState.from_snapshot(old)
    s.reloaded()
    assert [q for q in range(1, 8) if s.receive(bm(1, q))] == [4, 5, 7]


@given(
    st.lists(st.tuples(st.integers(0, 2), st.booleans()), max_size=60),
    st.randoms(use_true_random=False),
)
def test_resume_state_with_late_messages_against_an_oracle(
    events: list[tuple[int, bool]], rnd: random.Random
) -> None:
    """As the oracle above, with each publisher's sequences in any order in the log (late
    fills after a failover): the new process still gets exactly the messages not
    discarded, in log order."""
    per_pub: dict[int, list[int]] = {}
    for pub, _ in events:
        per_pub.setdefault(pub, []).append(len(per_pub.get(pub, [])) + 1)
    for seqs in per_pub.values():
        rnd.shuffle(seqs)
    log = [bm(pub, per_pub[pub].pop(0)) for pub, _ in events]
    got, expected = _replayed_after_restart(log, events, rnd)
    assert got == expected


def _replayed_after_restart(
    log: list[str], events: list[tuple[int, bool]], rnd: random.Random
) -> tuple[list[str], list[str]]:
    """Receive a random prefix of ``log``, discard the messages ``events`` marks in a
    random order, restart from the snapshot and replay ``log`` from the resume point (the
    broker starts after the oldest listed bookmark found in its log): what the
    application gets, and what it should get (every message not discarded, in log
    order)."""
    cut = rnd.randint(0, len(log))
    s = ResumeState()
    received = log[:cut]
    for b in received:
        assert s.receive(b)
    discarded = [b for b, (_, d) in zip(received, events, strict=False) if d]
    rnd.shuffle(discarded)
    for b in discarded:
        s.discard(b)
    restarted = ResumeState.from_snapshot(s.snapshot())
    restarted.reloaded()
    resume = restarted.resume_bookmark()
    start = 0 if resume == EPOCH else min(log.index(p) for p in resume.split(",")) + 1
    got = [b for b in log[start:] if restarted.receive(b)]
    return got, [b for b in log if b not in set(discarded)]


def test_a_restarted_state_resumes_as_the_running_one_would() -> None:
    """A publisher's discarded message written while an earlier message of another one is
    outstanding: after a restart, later discards of that publisher still move its
    contiguous point: the restarted process resumes from the same list as the running
    one."""
    running = ResumeState()
    for b in (bm(2, 1), bm(1, 5), bm(1, 6)):
        running.receive(b)
    running.discard(bm(1, 5))
    restarted = ResumeState.from_snapshot(running.snapshot())
    restarted.reloaded()
    for s in (running, restarted):
        assert s.receive(bm(2, 1)) is (s is restarted)  # expected again after the restart
        s.receive(bm(1, 6))
        s.discard(bm(1, 6))
        s.discard(bm(2, 1))
    assert restarted.resume_bookmark() == running.resume_bookmark() == "1|6|,2|1|"
    assert restarted.outstanding == running.outstanding == 0


def _oracle_gaps(received: set[int], max_gaps: int) -> list[list[int]]:
    """The gaps below the highest of ``received`` (a plain set, changed in place): past
    ``max_gaps`` the lowest is forgotten, its sequences then received."""
    while True:
        gaps: list[list[int]] = []
        for q in range(1, max(received, default=0)):
            if q in received:
                continue
            if gaps and gaps[-1][1] == q - 1:
                gaps[-1][1] = q
            else:
                gaps.append([q, q])
        if len(gaps) <= max_gaps:
            return gaps
        received.update(range(gaps[0][0], gaps[0][1] + 1))


@given(
    st.lists(st.tuples(st.integers(1, 2), st.integers(1, 40)), max_size=80),
    st.integers(1, 4),
    st.lists(st.integers(0, 80), max_size=3),
    st.integers(1, 4),
)
def test_past_max_gaps_the_oldest_are_forgotten_against_an_oracle(
    arrivals: list[tuple[int, int]], max_gaps: int, restarts: list[int], reload_gaps: int
) -> None:
    """Two publishers' sequences in any order, each discarded as it arrives, with a small
    ``max_gaps``: every verdict is a plain set's (a sequence is new unless received, or
    in a gap forgotten when a publisher had more than ``max_gaps``: the lowest goes
    first), and the gaps kept are the oracle's. A restart from the snapshot keeps them;
    one with a smaller bound keeps the newest gaps, as if the bound had been that."""
    state = ResumeState(max_gaps=max_gaps)
    received: dict[int, set[int]] = {1: set(), 2: set()}
    for i, (pub, seq) in enumerate(arrivals):
        if i in restarts:
            max_gaps = min(max_gaps, reload_gaps)
            snap = orjson.loads(orjson.dumps(state.snapshot()))
            state = ResumeState.from_snapshot(snap, max_gaps=max_gaps)
            state.reloaded()
            for held in received.values():
                _oracle_gaps(held, max_gaps)
        assert state.is_duplicate(bm(pub, seq)) == (seq in received[pub])
        assert state.receive(bm(pub, seq)) == (seq not in received[pub])
        state.discard(bm(pub, seq))
        received[pub].add(seq)
        _oracle_gaps(received[pub], max_gaps)
    kept = state.snapshot()["gaps"]
    for pub, held in received.items():
        assert kept.get(str(pub), []) == _oracle_gaps(held, max_gaps)


def test_max_gaps_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_gaps"):
        ResumeState(max_gaps=0)


def test_thousands_of_delayed_messages_are_each_delivered_once() -> None:
    """A publisher's 10,000 messages, every other one delayed: the immediate (even) ones
    arrive first, each opening a gap, then the delayed (odd) ones as they fall due, in
    any order. With the default bound every message is delivered exactly once, also
    across a restart in the middle; and the gaps all close."""
    assert MAX_GAPS >= 5_000
    rnd = random.Random(5)
    evens = [bm(1, q) for q in range(2, 10_001, 2)]
    odds = [bm(1, q) for q in range(1, 10_000, 2)]
    rnd.shuffle(odds)
    state = ResumeState()
    for b in evens:
        assert state.receive(b)
        state.discard(b)
    assert len(state.snapshot()["gaps"]["1"]) == 5_000
    for i, b in enumerate(odds):
        if i == 2_500:
            state = ResumeState.from_snapshot(orjson.loads(orjson.dumps(state.snapshot())))
            state.reloaded()
        assert state.receive(b), b
        state.discard(b)
    assert not any(state.receive(b) for b in evens + odds)
    assert state.snapshot()["gaps"] == {}
    assert state.resume_bookmark() == f"{odds[-1]},{bm(1, 10_000)}"
