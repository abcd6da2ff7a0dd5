"""The suite's wait-until helpers (tests/support/wait.py)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from tests.support.wait import async_wait_until, wait_until


def test_wait_until_returns_the_first_truthy_value() -> None:
    calls: list[int] = []

    def cond() -> list[int]:
        calls.append(len(calls))
        return calls if len(calls) >= 3 else []

    assert wait_until(cond, interval=0) == [0, 1, 2]


def test_wait_until_sees_what_another_thread_does() -> None:
    done = threading.Event()
    timer = threading.Timer(0.05, done.set)
    timer.start()
    assert wait_until(done.is_set, timeout=5, message="the timer") is True
    timer.join()


def test_wait_until_names_what_it_waited_for_and_the_last_value() -> None:
    with pytest.raises(
        TimeoutError, match=r"after 0.05 s waiting for the answer \(last value: 0\)"
    ):
        wait_until(lambda: 0, timeout=0.05, message="the answer")


def test_async_wait_until_takes_plain_and_coroutine_conditions() -> None:
    async def scenario() -> None:
        box: dict[str, int] = {}

        async def filled() -> dict[str, int]:
            await asyncio.sleep(0)
            return box

        asyncio.get_running_loop().call_later(0.02, box.update, {"n": 1})
        assert await async_wait_until(filled, timeout=5) == {"n": 1}
        assert await async_wait_until(lambda: box.get("n"), timeout=5) == 1

    asyncio.run(scenario())


def test_async_wait_until_times_out_with_its_message() -> None:
    async def scenario() -> None:
        with pytest.raises(TimeoutError, match="waiting for nothing"):
            await async_wait_until(lambda: None, timeout=0.05, message="nothing")

    asyncio.run(scenario())
