"""Injected time.

Everything that waits or stamps time (heartbeats, group commit, replay pacing, retention,
sampling) takes a :class:`Clock` so tests can drive a virtual clock and assert exact times
instead of sleeping.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol


class Clock(Protocol):
    """The time source of the broker."""

    def time(self) -> float:
        """Wall-clock seconds since the Unix epoch (UTC)."""
        ...

    def monotonic(self) -> float:
        """Seconds on a monotonic clock, for intervals."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` of this clock's time."""
        ...


class SystemClock:
    """The real clock."""

    def time(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


SYSTEM_CLOCK = SystemClock()


def time_us(clock: Clock) -> int:
    """Wall-clock microseconds since the Unix epoch (the journal's timestamp unit)."""
    return int(clock.time() * 1_000_000)
