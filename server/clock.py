"""Injected time.

Everything that waits or stamps time (heartbeats, group commit, replay pacing, retention,
sampling, the event log) takes a :class:`Clock` so tests can drive a virtual clock and assert
exact times instead of sleeping.

:class:`VirtualClock` follows trio's ``MockClock`` with ``wait_all_tasks_blocked``: time only
moves in :meth:`VirtualClock.advance`, and between two moves the event loop runs until it is
*quiescent* (no task is ready to run), so a test states exact virtual times without guessing
how many loop turns the code under test needs.
"""

from __future__ import annotations

import asyncio
import collections
import heapq
import time
from typing import Final, Protocol

#: Tolerance when comparing clock readings (float rounding of sums). A wait shorter than
#: this is due now: ``now + wait`` can round back to ``now``, and a waiter that sleeps for
#: such a wait on a :class:`VirtualClock` wakes at the same instant, recomputes the same
#: wait and never lets time move (a spin seen in the replication pump's idle marker).
TIME_EPSILON: Final = 1e-9
#: :meth:`VirtualClock.advance` fails after this many wakes in a row at one instant.
MAX_WAKES_AT_ONE_INSTANT: Final = 10_000


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


async def sleep_or_wake(clock: Clock, seconds: float | None, event: asyncio.Event) -> bool:
    """Wait ``seconds`` of ``clock``'s time, or less if ``event`` is set first.

    The one way a background loop of the broker naps between rounds while staying
    wakeable (an operator's request, new work, a stop). ``seconds`` None waits for the
    event alone. The event is neither cleared before nor after: each caller clears it
    where its own loop needs to (before computing the next deadline, or after waking).
    The wait always takes at least one loop turn, even when the event is already set, so
    a loop that is woken on every round still lets other tasks run.

    Both waits run as tasks that are cancelled on the way out (also when the caller is
    cancelled), so none outlives the call by more than the loop turn that ends it.

    Returns:
        True when the time ran out (the clock's sleep finished, whether or not the event
        was set in the same turn), False when the event ended the wait first.
    """
    loop = asyncio.get_running_loop()
    waiter = loop.create_task(event.wait())
    if seconds is None:
        try:
            await waiter
        finally:
            waiter.cancel()
        return False
    sleeper = loop.create_task(clock.sleep(seconds))
    try:
        done, _ = await asyncio.wait({sleeper, waiter}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        sleeper.cancel()
        waiter.cancel()
    return sleeper in done


# -- quiescence -------------------------------------------------------------------------

QUIET_TURNS: Final = 2
"""Consecutive loop turns with nothing ready before the loop counts as quiescent.

Two, because one turn is not enough for I/O: a task may write to a socket that another task
of this loop reads, and the reader's callback only becomes ready at the next I/O poll. Each
turn of :func:`wait_all_blocked` leaves its own task ready, so the next iteration polls with
a zero timeout and queues that callback ahead of the check.
"""

FALLBACK_TURNS: Final = 50
"""Loop turns :func:`wait_all_blocked` yields on a loop whose ready queue it cannot see."""

MAX_TURNS: Final = 100_000
"""Loop turns after which :func:`wait_all_blocked` gives up: a task that never blocks (a
busy loop on ``sleep(0)``) keeps the loop from ever going quiet, and a clear error beats a
hung test."""


def ready_callbacks(loop: asyncio.AbstractEventLoop) -> int | None:
    """How many live callbacks ``loop`` will run at its next turn; None if it cannot tell.

    asyncio has no public API for this. CPython's ``BaseEventLoop`` (every loop of the
    standard library on 3.11) keeps the callbacks it runs next in the private deque
    ``_ready``: a task becomes ready by a handle being appended there (a future's result,
    ``call_soon``, ``call_soon_threadsafe``, an I/O event, a due timer). This is the only
    place that reads the private attribute; tests/unit/test_clock.py pins its behaviour on
    the Python this project runs. Other loops (uvloop) return None and
    :func:`wait_all_blocked` falls back to a fixed number of turns.
    """
    ready = getattr(loop, "_ready", None)
    if not isinstance(ready, collections.deque):
        return None
    # Copy first: worker threads append to the deque (``call_soon_threadsafe`` at the end
    # of every ``asyncio.to_thread``), and a thread switch inside a Python-level loop over
    # the live deque raises "deque mutated during iteration". ``tuple()`` copies in C,
    # holding the GIL throughout.
    return sum(1 for handle in tuple(ready) if not _cancelled(handle))


def _cancelled(handle: object) -> bool:
    return isinstance(handle, asyncio.Handle) and handle.cancelled()


async def wait_all_blocked(*, max_turns: int = MAX_TURNS) -> None:
    """Return once every other task of the running loop is blocked (trio's
    ``wait_all_tasks_blocked``).

    Blocked means waiting on something that is not "ready to run": a future, an event, a
    queue, a lock, a real timer or I/O that has not arrived. Work handed to a thread
    (``asyncio.to_thread``, ``run_in_executor``) is *not* waited for: the awaiting task is
    blocked until the thread finishes, so a test of such code still waits on a condition
    (tests/support/wait.py) for the thread's result.

    Raises:
        RuntimeError: the loop was still busy after ``max_turns`` turns (some task never
            blocks).
    """
    loop = asyncio.get_running_loop()
    quiet = 0
    for _ in range(max_turns):
        await asyncio.sleep(0)
        pending = ready_callbacks(loop)
        if pending is None:
            for _ in range(FALLBACK_TURNS):
                await asyncio.sleep(0)
            return
        quiet = quiet + 1 if pending == 0 else 0
        if quiet >= QUIET_TURNS:
            return
    raise RuntimeError(f"the event loop did not go quiet in {max_turns} turns (a busy task?)")


# -- the virtual clock ------------------------------------------------------------------


class VirtualClock:
    """A clock that only moves when told to, for exact tests of time-driven code.

    ``sleep`` parks the caller until :meth:`advance` moves time to its deadline. ``time()``
    is ``start + elapsed`` and ``monotonic()`` is ``elapsed``. One clock may serve several
    event loops one after another (each ``asyncio.run`` of a test), not at the same time.
    """

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._start = start
        self._now = 0.0
        # (deadline, arrival order, future): a heap, so equal deadlines wake first-come
        # first-served like asyncio's own timers
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._counter = 0
        self._advancing = False

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
        heapq.heappush(self._sleepers, (self._now + seconds, self._counter, fut))
        await fut

    @property
    def advancing(self) -> bool:
        """Whether an :meth:`advance` is running (one at a time: a helper that moves time
        while other code may too checks this first)."""
        return self._advancing

    @property
    def sleepers(self) -> int:
        """How many tasks are parked in :meth:`sleep` (for tests waiting on a condition)."""
        return sum(1 for _, _, f in self._sleepers if not f.done())

    async def wait_all_blocked(self) -> None:
        """Let the running loop settle without moving time (see :func:`wait_all_blocked`)."""
        await wait_all_blocked()

    async def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds``, waking every sleeper whose deadline it reaches.

        First the loop settles at the current time, so tasks that were about to sleep do so
        before time moves (a real clock does not move while the loop has work either). Then
        time jumps from deadline to deadline: the sleepers of one deadline wake together, in
        the order they went to sleep, and the loop settles again before the next deadline.
        Code that sleeps again after waking therefore sees the intermediate time, and
        chains of tasks that wake each other (events, queues) have all run when this
        returns. Time finally stands at exactly ``monotonic() + seconds``.

        Threads are not waited for (see :func:`wait_all_blocked`).

        Raises:
            ValueError: ``seconds`` is negative (time does not go back).
            RuntimeError: another ``advance`` is running, the loop never settles, or
                sleepers keep waking at one instant (a wait that rounds to nothing would
                otherwise spin here forever instead of failing the test).
        """
        if seconds < 0:
            raise ValueError(f"cannot advance a clock by {seconds} s")
        if self._advancing:
            raise RuntimeError("VirtualClock.advance is already running")
        self._advancing = True
        try:
            target = self._now + seconds
            await wait_all_blocked()
            still = 0  # wakes in a row that did not move time
            while True:
                before = self._now
                if not self._wake_next(target):
                    break
                still = still + 1 if self._now == before else 0
                if still > MAX_WAKES_AT_ONE_INSTANT:
                    raise RuntimeError(
                        f"tasks woke {still} times at t={self._now} without time moving: a "
                        "sleep shorter than float resolution (see TIME_EPSILON)?"
                    )
                await wait_all_blocked()
            self._now = target
        finally:
            self._advancing = False

    def _wake_next(self, target: float) -> bool:
        """Move to the earliest live deadline up to ``target`` and wake its sleepers.

        Returns False when no live sleeper is due by ``target``.
        """
        heap = self._sleepers
        while heap and heap[0][2].done():  # cancelled sleeps
            heapq.heappop(heap)
        if not heap or heap[0][0] > target:
            return False
        deadline = heap[0][0]
        self._now = max(self._now, deadline)
        while heap and heap[0][0] == deadline:
            _, _, fut = heapq.heappop(heap)
            if not fut.done():
                fut.set_result(None)
        return True
