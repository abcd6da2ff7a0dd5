"""A link's liveness: dead exactly when nothing was heard for the timeout while listening.

Driven the way the adapters drive it: ticks at the times the previous tick asked for,
bytes heard and reading paused or resumed in between, at arbitrary times.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spool.server.replication.liveness import PINGS_PER_TIMEOUT, Liveness

# what happens between two ticks: bytes heard, or reading paused / resumed, after a delay
happenings = st.lists(
    st.tuples(st.floats(0.0, 4.0), st.sampled_from(["heard", "pause", "resume"])),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(timeout=st.floats(0.3, 10.0), events=happenings)
def test_dead_exactly_when_silent_for_the_timeout_while_listening(
    timeout: float, events: list[tuple[float, str]]
) -> None:
    live = Liveness(timeout, 100.0)
    now = 100.0
    heard = 100.0  # the oracle: when silence started counting
    listening = True
    next_at = 100.0 + live.interval
    pings: list[float] = []
    for delay, what in events:
        at = now + delay
        while next_at <= at:  # the timer fires first
            now = next_at
            if not listening:
                heard = now
            tick = live.tick(now)
            assert tick.dead == (now >= heard + timeout)
            if tick.dead:
                return
            assert now < tick.next_at <= heard + timeout  # never past the deadline
            if tick.ping:
                pings.append(now)
            next_at = tick.next_at
        now = at
        if what == "heard":
            live.heard(now)
            heard = now
        else:
            on = what == "resume"
            live.listening(on, now)
            if on and not listening:
                heard = max(heard, now)
            listening = on
        assert live.silence(now) == (max(0.0, now - heard) if listening else 0.0)
    gaps = [b - a for a, b in itertools.pairwise(pings)]
    assert all(g >= live.interval - 1e-9 for g in gaps)  # pings never come faster


def test_a_silent_link_is_dead_at_the_timeout_and_pings_in_between() -> None:
    live = Liveness(6.0, 0.0)
    assert live.interval == 6.0 / PINGS_PER_TIMEOUT
    ticks = []
    at = live.interval
    while True:
        tick = live.tick(at)
        ticks.append((at, tick.ping, tick.dead))
        if tick.dead:
            break
        at = tick.next_at
    assert ticks == [(2.0, True, False), (4.0, True, False), (6.0, False, True)]


def test_hearing_keeps_it_alive_and_a_paused_reader_blames_nobody() -> None:
    live = Liveness(3.0, 0.0)
    for t in range(1, 30):
        live.heard(float(t))
        assert not live.tick(t + 0.5).dead
    live.listening(False, 30.0)
    assert not live.tick(100.0).dead  # nothing read for 70 s, but nothing was listened to
    live.listening(True, 100.0)
    assert not live.tick(102.9).dead
    assert live.tick(103.0).dead


def test_a_timeout_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        Liveness(0.0, 0.0)
