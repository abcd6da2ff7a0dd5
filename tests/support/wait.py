"""Waiting on conditions with timeouts: the suite's one wait-until (never a fixed sleep).

A test that waits for something another thread, process or task does polls a condition
until it holds, and fails with a message naming what it waited for. Both helpers return the
condition's truthy value, so a test can wait for a value and use it::

    journals = wait_until(lambda: len(j := list_journals()) >= 3 and j, message="3 journals")

Code running on a :class:`spool.server.clock.VirtualClock` should not poll for what only the loop
does: ``await clock.advance(...)`` or ``await clock.wait_all_blocked()`` settle the loop.
Poll only for work outside the loop (threads such as ``asyncio.to_thread``, processes).
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar, overload

T = TypeVar("T")


def wait_until(
    cond: Callable[[], T | None],
    timeout: float = 10.0,
    interval: float = 0.01,
    message: str = "condition",
) -> T:
    """Call ``cond`` every ``interval`` seconds until it returns something truthy.

    Returns:
        The first truthy value ``cond`` returned.

    Raises:
        TimeoutError: ``cond`` stayed falsy for ``timeout`` seconds (checked once more at
            the deadline); the message names ``message`` and the last value.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(_timed_out(message, timeout, value))
        time.sleep(interval)


@overload
async def async_wait_until(
    cond: Callable[[], Awaitable[T | None]],
    timeout: float = ...,
    interval: float = ...,
    message: str = ...,
) -> T: ...


@overload
async def async_wait_until(
    cond: Callable[[], T | None],
    timeout: float = ...,
    interval: float = ...,
    message: str = ...,
) -> T: ...


async def async_wait_until(
    cond: Callable[[], T | Awaitable[T | None] | None],
    timeout: float = 10.0,
    interval: float = 0.01,
    message: str = "condition",
) -> T:
    """The event-loop twin of :func:`wait_until`: ``cond`` may also be a coroutine function.

    Returns:
        The first truthy value ``cond`` returned (awaited if it was awaitable).

    Raises:
        TimeoutError: as :func:`wait_until`, measured on the loop's own clock.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        result = cond()
        value = await result if inspect.isawaitable(result) else result
        if value:
            return value
        if loop.time() > deadline:
            raise TimeoutError(_timed_out(message, timeout, value))
        await asyncio.sleep(interval)


def _timed_out(message: str, timeout: float, last: object) -> str:
    shown = repr(last)
    if len(shown) > 200:
        shown = shown[:200] + "..."
    return f"timed out after {timeout:g} s waiting for {message} (last value: {shown})"


# -- loop turns (virtual time) --------------------------------------------------------
#
# Code driven by ``spool.server.clock.VirtualClock`` makes progress only when the loop runs its
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
