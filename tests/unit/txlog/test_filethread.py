"""The log's long-lived file thread: order, results, errors, idle exit and restart."""

from __future__ import annotations

import asyncio
import threading

import pytest

from spool.server.txlog.append import filethread
from spool.server.txlog.append.filethread import FileThread


async def _in_order() -> None:
    worker = FileThread("t")
    seen: list[tuple[int, int]] = []

    def job(i: int) -> int:
        seen.append((i, threading.get_ident()))
        return i * 2

    results = await asyncio.gather(*(worker.run(lambda i=i: job(i)) for i in range(50)))
    assert results == [i * 2 for i in range(50)]
    assert [i for i, _ in seen] == list(range(50))
    assert len({t for _, t in seen}) == 1 and seen[0][1] != threading.get_ident()
    worker.close()


async def _exception() -> None:
    worker = FileThread("t")

    def boom() -> None:
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space"):
        await worker.run(boom)
    assert await worker.run(lambda: 7) == 7
    worker.close()


async def _idle() -> None:
    worker = FileThread("t")
    first = await worker.run(threading.current_thread)
    await asyncio.to_thread(first.join, 5)
    assert not first.is_alive()  # it ended on its own
    second = await worker.run(threading.current_thread)
    assert second is not first and second is not threading.current_thread()
    worker.close()


async def _after_close() -> None:
    """Jobs submitted after a close, while the closing thread still runs a slow job, run
    in order and never beside another job."""
    worker = FileThread("t")
    running = threading.Lock()
    order: list[int] = []
    started, release = threading.Event(), threading.Event()

    def job(i: int, slow: bool = False) -> int:
        assert running.acquire(blocking=False), "two jobs ran at once"
        try:
            if slow:
                started.set()
                release.wait(60)
            order.append(i)
            return i
        finally:
            running.release()

    first = asyncio.ensure_future(worker.run(lambda: job(0, slow=True)))
    assert await asyncio.to_thread(started.wait, 60), "the slow job never started"
    worker.close()
    later = [asyncio.ensure_future(worker.run(lambda i=i: job(i))) for i in range(1, 6)]
    await asyncio.sleep(0.05)  # room for a later job to start beside the slow one (wrongly)
    release.set()
    assert await first == 0
    assert [await f for f in later] == [1, 2, 3, 4, 5]
    assert order[0] == 0 and sorted(order) == list(range(6))
    worker.close()


def test_jobs_run_in_order_on_one_thread_and_return_their_results() -> None:
    asyncio.run(_in_order())


def test_an_exception_reaches_the_caller_and_the_thread_goes_on() -> None:
    asyncio.run(_exception())


def test_an_idle_thread_ends_and_the_next_job_starts_another(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(filethread, "IDLE_EXIT", 0.01)
    asyncio.run(_idle())


def test_a_job_after_close_still_runs() -> None:
    asyncio.run(_after_close())
