"""The failover list and back-off of a destination's link, alone (pure, seeded jitter)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spool.server.replication.dialer import FIRST_DELAY, JITTER, MAX_DELAY, STABLE_AFTER, Dialer

A, B, C = ("10.0.0.1", 1), ("10.0.0.2", 2), ("10.0.0.3", 3)


def test_each_pass_starts_at_the_top_and_waits_longer_after_each_failed_pass() -> None:
    dialer = Dialer([A, B, C], rng=random.Random(1))
    tried = []
    for _ in range(3):  # first pass: no wait at all
        addr, delay = dialer.next_attempt()
        tried.append(addr)
        assert delay == 0.0
        dialer.failed()
    assert tried == [A, B, C]
    waits = []
    for _ in range(8):
        addr, delay = dialer.next_attempt()
        assert addr == A  # every pass starts from the top, after its wait
        waits.append(delay)
        dialer.failed()
        for expected in (B, C):  # then the rest of the list without waiting
            assert dialer.next_attempt() == (expected, 0.0)
            dialer.failed()
    bases = [min(MAX_DELAY, FIRST_DELAY * 2**i) for i in range(8)]
    for wait, base in zip(waits, bases, strict=True):
        assert base * (1 - JITTER) <= wait <= base * (1 + JITTER)
    assert waits[-1] <= MAX_DELAY * (1 + JITTER)


def test_a_stable_link_resets_the_back_off_and_a_drop_starts_from_the_top() -> None:
    dialer = Dialer([A, B], rng=random.Random(2))
    for _ in range(5):
        dialer.failed()  # two and a half passes
    assert dialer.failed_passes == 2
    addr, _ = dialer.next_attempt()
    assert addr == B
    dialer.streaming(now=100.0)
    dialer.dropped(now=100.0 + STABLE_AFTER)
    assert dialer.next_attempt() == (A, 0.0)
    assert dialer.failed_passes == 0


def test_a_link_that_drops_at_once_backs_off_even_on_the_first_address() -> None:
    dialer = Dialer([A, B], rng=random.Random(3))
    for i in range(4):
        addr, delay = dialer.next_attempt()
        assert addr == A
        assert (delay == 0.0) == (i == 0)
        dialer.streaming(now=float(i))
        dialer.dropped(now=float(i) + STABLE_AFTER / 2)
    assert dialer.failed_passes == 4


def test_reset_tries_the_top_at_once() -> None:
    dialer = Dialer([A, B], rng=random.Random(4))
    for _ in range(6):
        dialer.failed()
    dialer.reset()
    assert dialer.next_attempt() == (A, 0.0)


def test_no_address_is_refused() -> None:
    with pytest.raises(ValueError):
        Dialer([])


@given(st.lists(st.sampled_from(["fail", "stream-short", "stream-long", "reset"]), max_size=40))
def test_the_wait_is_bounded_and_only_before_a_pass(moves: list[str]) -> None:
    dialer = Dialer([A, B, C], rng=random.Random(5))
    now = 0.0
    for move in moves:
        addr, delay = dialer.next_attempt()
        assert 0.0 <= delay <= MAX_DELAY * (1 + JITTER)
        if delay:
            assert addr == A
        if move == "fail":
            dialer.failed()
        elif move == "reset":
            dialer.reset()
        else:
            dialer.streaming(now)
            now += STABLE_AFTER * (2 if move == "stream-long" else 0.1)
            dialer.dropped(now)
            assert dialer.next_attempt()[0] == A
