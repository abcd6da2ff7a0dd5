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
