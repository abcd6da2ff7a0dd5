"""The event topics' token bucket on a virtual clock."""

from __future__ import annotations

import asyncio

import pytest

from spool.server.clock import VirtualClock
from spool.server.eventtopics.budget import TokenBucket


def test_a_full_burst_then_the_rate() -> None:
    clock = VirtualClock()
    bucket = TokenBucket(10, 10, clock)
    assert [bucket.take() for _ in range(11)] == [True] * 10 + [False]
    asyncio.run(clock.advance(0.35))  # three and a half tokens back
    assert [bucket.take() for _ in range(4)] == [True, True, True, False]
    asyncio.run(clock.advance(60))  # never more than the burst
    assert sum(bucket.take() for _ in range(30)) == 10


def test_a_bucket_that_could_never_give_is_refused() -> None:
    with pytest.raises(ValueError):
        TokenBucket(0, 5, VirtualClock())
    with pytest.raises(ValueError):
        TokenBucket(5, 0.5, VirtualClock())
