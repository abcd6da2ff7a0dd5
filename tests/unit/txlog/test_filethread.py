"""The log's long-lived file thread: order, results, errors, idle exit and restart."""

from __future__ import annotations

import asyncio
import threading

import pytest

from server.txlog import filethread
from server.txlog.filethread import FileThread


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
    first = await worker.run(threading.get_ident)
    thread = worker._thread
    assert thread is not None
    await asyncio.to_thread(thread.join, 5)
    assert not thread.is_alive() and worker._thread is None
    second = await worker.run(threading.get_ident)
    assert second != threading.get_ident() and isinstance(first, int)
    worker.close()


async def _after_close() -> None:
    worker = FileThread("t")
    await worker.run(lambda: None)
    worker.close()
    assert await worker.run(lambda: 5) == 5
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
