"""Waiting on conditions with timeouts (never fixed sleeps)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable


def wait_until(
    cond: Callable[[], bool],
    timeout: float = 10.0,
    interval: float = 0.01,
    message: str = "condition",
) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {message}")
        time.sleep(interval)


async def async_wait_until(
    cond: Callable[[], bool | Awaitable[bool]],
    timeout: float = 10.0,
    interval: float = 0.01,
    message: str = "condition",
) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        result = cond()
        if not isinstance(result, bool):
            result = await result
        if result:
            return
        if loop.time() > deadline:
            raise TimeoutError(f"timed out waiting for {message}")
        await asyncio.sleep(interval)


# -- loop turns (virtual time) --------------------------------------------------------
#
# Code driven by ``server.clock.VirtualClock`` makes progress only when the loop runs its
# ready tasks: no wall time needs to pass, and waiting for it would only slow the tests
# down and make them load-sensitive. These two helpers count loop turns instead of seconds.


async def run_turns(rounds: int = 200) -> None:
    """Let the loop run ``rounds`` turns, so every task made ready runs and reaches its
    next await (to check that something did *not* happen, or before advancing a virtual
    clock that such a task is about to sleep on)."""
    for _ in range(rounds):
        await asyncio.sleep(0)


async def turns_until(
    cond: Callable[[], bool], rounds: int = 5000, message: str = "condition"
) -> None:
    """Run loop turns until ``cond()`` holds, then :func:`run_turns` so the tasks it woke
    settle (a virtual-clock advance afterwards sees their sleeps).

    Raises:
        TimeoutError: ``cond()`` still false after ``rounds`` turns.
    """
    for _ in range(rounds):
        if cond():
            await run_turns()
            return
        await asyncio.sleep(0)
    raise TimeoutError(f"{message} not reached within {rounds} loop turns")
