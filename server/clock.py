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


class VirtualClock:
    """A clock that only moves when told to, for exact tests of time-driven code.

    ``sleep`` parks the caller until :meth:`advance` moves time past its deadline; sleepers
    wake in deadline order. ``time()`` is ``start + elapsed``.
    """

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._start = start
        self._now = 0.0
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._counter = 0

    def time(self) -> float:
        return self._start + self._now

    def monotonic(self) -> float:
        return self._now

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._counter += 1
        self._sleepers.append((self._now + seconds, self._counter, fut))
        self._sleepers.sort(key=lambda s: (s[0], s[1]))
        await fut

    @property
    def sleepers(self) -> int:
        """How many tasks are parked in :meth:`sleep` (for tests waiting on a condition)."""
        return sum(1 for _, _, f in self._sleepers if not f.done())

    async def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds``, waking every sleeper whose deadline passed.

        Sleepers are woken one deadline at a time, letting the loop run in between, so code
        that sleeps again after waking sees the intermediate times.
        """
        target = self._now + seconds
        while True:
            self._sleepers = [s for s in self._sleepers if not s[2].done()]
            if not self._sleepers or self._sleepers[0][0] > target:
                break
            deadline, _, fut = self._sleepers.pop(0)
            self._now = max(self._now, deadline)
            fut.set_result(None)
            for _ in range(5):
                await asyncio.sleep(0)
        self._now = target
        for _ in range(5):
            await asyncio.sleep(0)
