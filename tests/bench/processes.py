"""Running benchmark workers in their own OS processes, started together.

The machine has two cores: the broker, the publisher and the subscriber(s) must each get
CPU, and none may share an interpreter (and a GIL) with another. Each worker is a function
``fn(gate, **kwargs) -> dict`` (a coroutine function or a plain one) run in a process of a
``forkserver`` context that has the worker modules preloaded, so starting one costs a
fork, not an interpreter start and the imports.

Every worker first prepares (connects, logs on, subscribes), then calls ``gate.open()``:
that marks it ready and waits for *go*. The harness sets *go* once all workers are ready,
so no publisher sends before every subscriber is listening. Timing is taken inside the
workers with ``time.monotonic_ns()``: CLOCK_MONOTONIC is one clock for all processes of
the machine, so a publisher's send stamp and a subscriber's receive stamp can be
subtracted.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import multiprocessing
import queue
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.context import ForkServerContext
from multiprocessing.synchronize import Event
from typing import Any, Final

#: modules imported once in the fork server, so each worker starts warm.
PRELOAD: Final = [
    "tests.bench.workers",
    "tests.bench.peer_workers",
    "tests.bench.client_workers",
    "tests.bench.delayed_workers",
]


class WorkerError(Exception):
    """A worker failed; the message holds its traceback."""


class WorkerTimeout(WorkerError):
    """Workers did not get ready or finish in time (they are killed)."""


class Gate:
    """The start barrier a worker passes once it is prepared."""

    def __init__(self, ready: Event, go: Event, timeout: float) -> None:
        self._ready = ready
        self._go = go
        self._timeout = timeout

    def open(self) -> None:
        """Mark ready and block until the harness says go.

        Raises:
            TimeoutError: no go within the worker's timeout.
        """
        self._ready.set()
        if not self._go.wait(self._timeout):
            raise TimeoutError("the harness never said go")

    async def aopen(self) -> None:
        """:meth:`open` for coroutine workers (waits in a thread, the loop keeps running)."""
        self._ready.set()
        if not await asyncio.to_thread(self._go.wait, self._timeout):
            raise TimeoutError("the harness never said go")


@dataclass(frozen=True, slots=True)
class Task:
    """One worker: a module-level function (picklable by name) and its keyword arguments."""

    fn: Callable[..., Any]
    kwargs: dict[str, Any] = field(default_factory=dict)


@functools.cache
def _context() -> ForkServerContext:
    ctx = multiprocessing.get_context("forkserver")
    assert isinstance(ctx, ForkServerContext)
    ctx.set_forkserver_preload(PRELOAD)
    return ctx


def _entry(
    fn: Callable[..., Any],
    kwargs: dict[str, Any],
    index: int,
    ready: Event,
    go: Event,
    out: multiprocessing.Queue[tuple[int, bool, Any]],
    timeout: float,
) -> None:
    gate = Gate(ready, go, timeout)
    try:
        if inspect.iscoroutinefunction(fn):
            result = asyncio.run(fn(gate, **kwargs))
        else:
            result = fn(gate, **kwargs)
        out.put((index, True, result))
    except BaseException:
        out.put((index, False, traceback.format_exc()))


def run_tasks(
    tasks: list[Task], *, timeout: float, on_ready: Callable[[], None] | None = None
) -> list[dict[str, Any]]:
    """Run ``tasks`` each in its own process; returns their results in task order.

    Args:
        timeout: seconds for the whole run (preparation included).
        on_ready: called in the harness once every worker is ready, before go (the memory
            scenarios read the broker's RSS there).

    Raises:
        WorkerError: a worker raised (its traceback is the message).
        WorkerTimeout: a worker was not ready or not done in time.
    """
    ctx = _context()
    go = ctx.Event()
    out: multiprocessing.Queue[tuple[int, bool, Any]] = ctx.Queue()
    readies = [ctx.Event() for _ in tasks]
    procs = [
        ctx.Process(
            target=_entry,
            name=f"bench-{t.fn.__name__}",
            args=(t.fn, t.kwargs, i, readies[i], go, out, timeout),
            daemon=True,
        )
        for i, t in enumerate(tasks)
    ]
    results: dict[int, Any] = {}
    finished = False
    deadline = time.monotonic() + timeout
    try:
        for p in procs:
            p.start()
        # 1. wait until every worker is ready (or one failed while preparing)
        while not all(r.is_set() for r in readies):
            _collect(out, results, 0.05)
            _raise_failures(results, tasks)
            for i, p in enumerate(procs):
                if not p.is_alive() and i not in results and not readies[i].is_set():
                    _collect(out, results, 0.5)
                    _raise_failures(results, tasks)
                    raise WorkerError(
                        f"worker {tasks[i].fn.__name__} exited with "
                        f"{p.exitcode} before getting ready"
                    )
            if time.monotonic() > deadline:
                raise WorkerTimeout("workers not ready in time")
        # 2. the harness's own step between ready and go
        if on_ready is not None:
            on_ready()
        # 3. go, then collect every result
        go.set()
        while len(results) < len(tasks):
            _collect(out, results, 0.2)
            _raise_failures(results, tasks)
            for i, p in enumerate(procs):
                if not p.is_alive() and i not in results:
                    _collect(out, results, 1.0)
                    if i not in results:
                        raise WorkerError(
                            f"worker {tasks[i].fn.__name__} died with exit code {p.exitcode}"
                        )
            if time.monotonic() > deadline:
                raise WorkerTimeout(f"workers not done within {timeout:.0f}s")
        _raise_failures(results, tasks)
        finished = True
        return [results[i][1] for i in range(len(tasks))]
    finally:
        go.set()
        for p in procs:
            if p.pid is None:  # never started
                continue
            if finished:
                p.join(timeout=5)
            if p.is_alive():
                p.kill()
            p.join(timeout=5)
        out.close()
        with contextlib.suppress(Exception):
            out.join_thread()


def _collect(
    out: multiprocessing.Queue[tuple[int, bool, Any]], results: dict[int, Any], wait: float
) -> None:
    try:
        index, ok, value = out.get(timeout=wait)
    except queue.Empty:
        return
    results[index] = (ok, value)
    while True:
        try:
            index, ok, value = out.get_nowait()
        except queue.Empty:
            return
        results[index] = (ok, value)


def _raise_failures(results: dict[int, Any], tasks: list[Task]) -> None:
    for i, (ok, value) in sorted(results.items()):
        if not ok:
            raise WorkerError(f"worker {tasks[i].fn.__name__} failed:\n{value}")
