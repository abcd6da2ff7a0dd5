"""A long-lived worker thread for the log's file work that recurs every group commit.

The group commit hands its batch to a thread every ``FlushInterval`` (1 ms by default)
and the cache writer its index entries after each commit. ``asyncio.to_thread`` costs a
context copy, an executor submit (locks, a semaphore, a work item), two chained futures
and the wake-ups, for each of those: about twice the CPU of a job put on one thread's
queue and resolved with ``call_soon_threadsafe``. At a thousand commits a second that
difference is a visible share of a core on every instance, paid per commit whatever the
message rate (docs/transaction-log.md).

:class:`FileThread` runs jobs in submission order on one thread (so the files it owns
need no lock). The thread starts on the first job and ends after :data:`IDLE_EXIT`
seconds without one, so a log that is never closed (a test, a crash path) leaves no
thread behind for long; :meth:`close` ends it at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Final, TypeVar

__all__ = ["IDLE_EXIT", "FileThread"]

T = TypeVar("T")

#: seconds a thread without work waits before it ends (the next job starts another)
IDLE_EXIT: Final = 5.0

_Job = tuple[Callable[[], object], asyncio.AbstractEventLoop, "asyncio.Future[object]"]


class FileThread:
    """Jobs run one at a time, in order, on one worker thread (module docstring).

    Each worker thread has its own queue: a thread that ends (idle, or closed) takes its
    queue with it, and the next job starts a new thread on a new queue, so two threads
    never share jobs; a new thread first waits for the one before it to end, so jobs
    submitted after :meth:`close` run after what the closing thread still had, never
    beside it.

    Args:
        name: the thread's name (shows in stack dumps and py-spy).
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._lock = threading.Lock()
        #: the live thread's queue (None: no thread; the next job starts one)
        self._jobs: queue.SimpleQueue[_Job | None] | None = None
        self._last: threading.Thread | None = None  # the thread started last

    async def run(self, fn: Callable[[], T]) -> T:
        """Run ``fn()`` on the thread; its result or exception comes back here.

        Cancelling the caller does not stop a job already queued (like
        ``asyncio.to_thread``): file work is never left half done by a cancellation.
        """
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[object] = loop.create_future()
        with self._lock:
            jobs = self._jobs
            if jobs is None:
                jobs = self._jobs = queue.SimpleQueue()
                self._last = threading.Thread(
                    target=self._work, args=(jobs, self._last), name=self._name, daemon=True
                )
                self._last.start()
            jobs.put((fn, loop, fut))
        result = await fut
        return result  # type: ignore[return-value]

    def close(self) -> None:
        """End the thread once the jobs queued so far ran (it is not waited for)."""
        with self._lock:
            if self._jobs is not None:
                self._jobs.put(None)
                self._jobs = None

    def _work(self, jobs: queue.SimpleQueue[_Job | None], before: threading.Thread | None) -> None:
        if before is not None:
            before.join()  # one thread at a time owns the files
        while True:
            try:
                job = jobs.get(timeout=IDLE_EXIT)
            except queue.Empty:
                with self._lock:  # jobs are put under the lock: empty now is empty
                    if not jobs.empty():
                        continue
                    if self._jobs is jobs:
                        self._jobs = None
                    return
            if job is None:
                return
            fn, loop, fut = job
            try:
                result = fn()
            except BaseException as exc:  # handed to the awaiting coroutine
                _resolve(loop, fut, None, exc)
            else:
                _resolve(loop, fut, result, None)


def _resolve(
    loop: asyncio.AbstractEventLoop,
    fut: asyncio.Future[object],
    result: object,
    exc: BaseException | None,
) -> None:
    with contextlib.suppress(RuntimeError):  # the loop closed: nobody is waiting
        loop.call_soon_threadsafe(_set, fut, result, exc)


def _set(fut: asyncio.Future[object], result: object, exc: BaseException | None) -> None:
    if fut.done():  # the caller was cancelled
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(result)
