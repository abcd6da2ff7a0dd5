"""The virtual clock and loop quiescence (server/clock.py).

Scenarios assert exact virtual times: ``advance`` must run every chain of work that its
wake-ups start before it returns, however many loop turns that chain needs.
"""

from __future__ import annotations

import asyncio
import socket
import sys
import threading
from collections.abc import Coroutine
from typing import Any, cast

import pytest

from spool.server import clock as clock_module
from spool.server.clock import VirtualClock, ready_callbacks, sleep_or_wake, wait_all_blocked

START = 1_700_000_000.0


def run(coro: Coroutine[Any, Any, None]) -> None:
    asyncio.run(asyncio.wait_for(coro, 30))


async def yield_many(turns: int) -> None:
    """A task that needs many loop turns (more than any fixed guess) before it blocks."""
    for _ in range(turns):
        await asyncio.sleep(0)


# -- ready_callbacks: the one private read, pinned on this Python ----------------------


def test_ready_callbacks_sees_call_soon_and_a_woken_task() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        assert ready_callbacks(loop) == 0  # this task is running, nothing else exists
        handle = loop.call_soon(lambda: None)
        assert ready_callbacks(loop) == 1
        handle.cancel()
        assert ready_callbacks(loop) == 0  # a cancelled handle will not run
        gate: asyncio.Future[None] = loop.create_future()
        waiter = asyncio.create_task(asyncio.wait_for(gate, 5))
        assert ready_callbacks(loop) == 1  # the new task's first step
        await asyncio.sleep(0)
        assert ready_callbacks(loop) == 0  # it is blocked on the future
        gate.set_result(None)
        woken = ready_callbacks(loop)
        assert woken is not None and woken >= 1  # its wake-up is queued
        await waiter

    run(scenario())


def test_ready_callbacks_sees_a_call_from_another_thread() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        called = threading.Event()
        ran: list[bool] = []

        def other_thread() -> None:
            loop.call_soon_threadsafe(ran.append, True)
            called.set()

        thread = threading.Thread(target=other_thread)
        thread.start()
        assert called.wait(5)  # the loop is held by this task: the callback cannot run yet
        thread.join()
        assert ready_callbacks(loop) == 1
        await asyncio.sleep(0)
        assert ran == [True]

    run(scenario())


def test_ready_callbacks_while_other_threads_add_callbacks() -> None:
    """Counting must not iterate the live deque in Python while worker threads (the end
    of every ``asyncio.to_thread``) append to it: "deque mutated during iteration" would
    break a virtual-clock advance during journal work in threads."""

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        for _ in range(2000):
            loop.call_soon(lambda: None)
        started = threading.Barrier(3)

        def hammer() -> None:
            # a bounded number of appends: an endless stream grows the deque without limit
            # and makes every count (a copy) slower, which timed out on a loaded machine
            started.wait()
            for _ in range(20_000):
                loop.call_soon_threadsafe(lambda: None)

        previous = sys.getswitchinterval()
        sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter can
        threads = [threading.Thread(target=hammer) for _ in range(2)]
        for t in threads:
            t.start()
        counts = 0
        try:
            started.wait()
            while any(t.is_alive() for t in threads) or counts < 200:
                assert (ready_callbacks(loop) or 0) >= 2000
                counts += 1
        finally:
            for t in threads:
                t.join()
            sys.setswitchinterval(previous)
        assert ready_callbacks(loop) == 2000 + 2 * 20_000
        await asyncio.sleep(0)

    run(scenario())


def test_ready_callbacks_is_none_for_a_loop_without_a_ready_queue() -> None:
    class OtherLoop:
        """Stands for a loop written elsewhere (uvloop): no ``_ready`` deque."""

    assert ready_callbacks(cast(asyncio.AbstractEventLoop, OtherLoop())) is None


# -- wait_all_blocked -------------------------------------------------------------------


def test_wait_all_blocked_runs_a_long_chain_of_ready_work() -> None:
    async def scenario() -> None:
        task = asyncio.create_task(yield_many(500))
        await wait_all_blocked()
        assert task.done()

    run(scenario())


def test_wait_all_blocked_runs_tasks_that_wake_each_other_through_events_and_queues() -> None:
    async def scenario() -> None:
        q: asyncio.Queue[int] = asyncio.Queue()
        relay: asyncio.Queue[int] = asyncio.Queue()
        got: list[int] = []
        first = asyncio.Event()

        async def producer() -> None:
            await first.wait()
            for i in range(20):
                await q.put(i)
                await asyncio.sleep(0)

        async def middle() -> None:
            while True:
                await relay.put(await q.get() * 10)

        async def consumer() -> None:
            while True:
                got.append(await relay.get())

        tasks = [asyncio.create_task(f()) for f in (producer, middle, consumer)]
        await wait_all_blocked()
        assert got == []
        first.set()
        await wait_all_blocked()
        assert got == [i * 10 for i in range(20)]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    run(scenario())


def test_wait_all_blocked_waits_for_io_between_tasks_of_the_loop() -> None:
    async def scenario() -> None:
        a, b = socket.socketpair()
        a.setblocking(False)
        b.setblocking(False)
        loop = asyncio.get_running_loop()
        received: list[bytes] = []

        async def reader() -> None:
            received.append(await loop.sock_recv(b, 100))

        async def writer() -> None:
            await asyncio.sleep(0)
            await loop.sock_sendall(a, b"ping")

        tasks = [asyncio.create_task(reader()), asyncio.create_task(writer())]
        try:
            await wait_all_blocked()
            assert received == [b"ping"]
        finally:
            await asyncio.gather(*tasks)
            a.close()
            b.close()

    run(scenario())


def test_wait_all_blocked_does_not_wait_for_threads() -> None:
    async def scenario() -> None:
        release = threading.Event()
        task = asyncio.create_task(asyncio.to_thread(release.wait, 10))
        await wait_all_blocked()  # returns although the thread is still blocked
        assert not task.done()
        release.set()
        assert await task is True

    run(scenario())


def test_wait_all_blocked_gives_up_on_a_task_that_never_blocks() -> None:
    async def scenario() -> None:
        spinner = asyncio.create_task(yield_many(10_000))
        with pytest.raises(RuntimeError, match="did not go quiet in 100 turns"):
            await wait_all_blocked(max_turns=100)
        spinner.cancel()

    run(scenario())


def test_without_a_visible_ready_queue_it_falls_back_to_a_fixed_number_of_turns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(clock_module, "ready_callbacks", lambda loop: None)

    async def scenario() -> None:
        short = asyncio.create_task(yield_many(clock_module.FALLBACK_TURNS // 2))
        await wait_all_blocked()
        assert short.done()

    run(scenario())


# -- VirtualClock -----------------------------------------------------------------------


def test_time_and_monotonic_start_where_told_and_move_only_on_advance() -> None:
    clock = VirtualClock(START)
    assert (clock.time(), clock.monotonic()) == (START, 0.0)
    run(clock.advance(2.5))
    assert (clock.time(), clock.monotonic()) == (START + 2.5, 2.5)
    run(clock.advance(0))
    assert clock.monotonic() == 2.5


def test_time_does_not_go_back() -> None:
    clock = VirtualClock(START)
    with pytest.raises(ValueError):
        run(clock.advance(-1))
    assert clock.monotonic() == 0.0


def test_sleepers_wake_in_deadline_order_at_their_deadline() -> None:
    async def scenario() -> None:
        clock = VirtualClock(START)
        woke: list[tuple[str, float]] = []

        async def sleeper(name: str, seconds: float) -> None:
            await clock.sleep(seconds)
            woke.append((name, clock.monotonic()))

        order = (("c", 3.0), ("a", 1.0), ("late", 9.0), ("b", 2.0), ("a2", 1.0))
        tasks = [asyncio.create_task(sleeper(name, seconds)) for name, seconds in order]
        await clock.advance(5.0)  # the tasks have not run yet: advance lets them sleep first
        assert woke == [("a", 1.0), ("a2", 1.0), ("b", 2.0), ("c", 3.0)]
        assert clock.sleepers == 1
        assert clock.monotonic() == 5.0
        await clock.advance(4.0)
        assert woke[-1] == ("late", 9.0)
        assert clock.sleepers == 0
        await asyncio.gather(*tasks)

    run(scenario())


def test_a_deadline_equal_to_the_target_wakes() -> None:
    async def scenario() -> None:
        clock = VirtualClock(START)
        task = asyncio.create_task(clock.sleep(1.0))
        await clock.advance(0.999)
        assert not task.done()
        await clock.advance(0.001)
        assert task.done()

    run(scenario())


def test_a_task_that_sleeps_again_after_waking_sees_the_intermediate_times() -> None:
    async def scenario() -> None:
        clock = VirtualClock(START)
        ticks: list[float] = []

        async def ticker() -> None:
            while True:
                await clock.sleep(1.5)
                ticks.append(clock.time())

        task = asyncio.create_task(ticker())
        await clock.advance(7.0)
        assert ticks == [START + 1.5, START + 3.0, START + 4.5, START + 6.0]
        assert clock.time() == START + 7.0
        await clock.advance(0.5)
        assert ticks[-1] == START + 7.5
        task.cancel()

    run(scenario())


def test_chains_started_by_a_wake_up_settle_before_advance_returns() -> None:
    """A wake-up sets off work far longer than any fixed number of loop turns, through an
    event, a queue and plain yields; the second sleeper's deadline sees all of it done."""

    async def scenario() -> None:
        clock = VirtualClock(START)
        ready = asyncio.Event()
        q: asyncio.Queue[float] = asyncio.Queue()
        log: list[tuple[str, float]] = []

        async def alarm() -> None:
            await clock.sleep(1.0)
            ready.set()

        async def worker() -> None:
            await ready.wait()
            await yield_many(200)
            await q.put(clock.monotonic())

        async def consumer() -> None:
            stamp = await q.get()
            await yield_many(200)
            log.append(("consumed", stamp))
            await clock.sleep(0.25)
            log.append(("again", clock.monotonic()))

        async def observer() -> None:
            await clock.sleep(1.0)  # same deadline as alarm, queued after it
            await clock.sleep(0.1)
            log.append(("observer", clock.monotonic()))

        tasks = [asyncio.create_task(f()) for f in (alarm, worker, consumer, observer)]
        await clock.advance(1.0)
        assert log == [("consumed", 1.0)]
        await clock.advance(1.0)
        assert log == [("consumed", 1.0), ("observer", 1.1), ("again", 1.25)]
        await asyncio.gather(*tasks)

    run(scenario())


def test_a_cancelled_sleeper_is_not_counted_and_does_not_stop_others() -> None:
    async def scenario() -> None:
        clock = VirtualClock(START)
        gone = asyncio.create_task(clock.sleep(1.0))
        kept = asyncio.create_task(clock.sleep(2.0))
        await clock.wait_all_blocked()
        assert clock.sleepers == 2
        gone.cancel()
        await clock.wait_all_blocked()
        assert clock.sleepers == 1
        await clock.advance(2.0)
        assert kept.done() and gone.cancelled()

    run(scenario())


def test_sleep_of_zero_or_less_only_yields() -> None:
    async def scenario() -> None:
        clock = VirtualClock(START)
        await clock.sleep(0)
        await clock.sleep(-1)
        assert clock.sleepers == 0 and clock.monotonic() == 0.0

    run(scenario())


def test_advance_cannot_run_twice_at_once() -> None:
    async def scenario() -> None:
        clock = VirtualClock(START)
        blocker = asyncio.create_task(yield_many(50))
        first = asyncio.create_task(clock.advance(1.0))
        await asyncio.sleep(0)  # first is now settling the loop
        with pytest.raises(RuntimeError, match="already running"):
            await clock.advance(1.0)
        await first
        await blocker
        assert clock.monotonic() == 1.0

    run(scenario())


def test_one_clock_serves_loops_one_after_another() -> None:
    clock = VirtualClock(START)

    async def sleep_and_advance(seconds: float) -> None:
        task = asyncio.create_task(clock.sleep(seconds))
        await clock.advance(seconds)
        assert task.done()

    run(sleep_and_advance(1.0))
    run(sleep_and_advance(2.0))
    assert clock.monotonic() == 3.0


def test_advance_fails_when_sleepers_keep_waking_without_time_moving() -> None:
    """A task that sleeps for a remainder smaller than float resolution wakes at the same
    instant again and again; ``advance`` says so instead of spinning forever (the
    replication pump's idle marker hung a scenario that way)."""

    async def main() -> None:
        clock = VirtualClock()
        await clock.advance(0.15)

        async def spinner() -> None:
            while True:
                await clock.sleep(1e-20)  # 0.15 + 1e-20 == 0.15: the deadline is now

        task = asyncio.get_running_loop().create_task(spinner())
        with pytest.raises(RuntimeError, match="without time moving"):
            await clock.advance(1.0)
        task.cancel()

    run(main())


def test_a_real_wait_moves_time_many_times_at_distinct_instants() -> None:
    """The guard counts wakes at one instant only: 50,000 short sleeps that each move time
    are fine."""

    async def main() -> None:
        clock = VirtualClock()
        wakes = 0

        async def ticker() -> None:
            nonlocal wakes
            while True:
                await clock.sleep(1e-5)
                wakes += 1

        task = asyncio.get_running_loop().create_task(ticker())
        await clock.advance(0.5)
        task.cancel()
        assert wakes == pytest.approx(50_000, abs=2)

    run(main())


# -- sleep_or_wake ----------------------------------------------------------------------


def new_tasks(before: set[asyncio.Task[Any]]) -> set[asyncio.Task[Any]]:
    """Tasks of the running loop that were not there ``before``."""
    return asyncio.all_tasks() - before


def test_sleep_or_wake_returns_true_when_the_time_runs_out() -> None:
    async def scenario() -> None:
        before = asyncio.all_tasks()
        clock = VirtualClock(START)
        event = asyncio.Event()
        nap = asyncio.create_task(sleep_or_wake(clock, 2.0, event))
        await clock.advance(1.999)
        assert not nap.done()
        await clock.advance(0.001)
        assert nap.done() and nap.result() is True
        assert not event.is_set()
        await clock.wait_all_blocked()
        assert new_tasks(before) == set() and clock.sleepers == 0

    run(scenario())


def test_sleep_or_wake_returns_false_when_the_event_is_set_first() -> None:
    async def scenario() -> None:
        before = asyncio.all_tasks()
        clock = VirtualClock(START)
        event = asyncio.Event()
        nap = asyncio.create_task(sleep_or_wake(clock, 5.0, event))
        await clock.advance(1.0)
        event.set()
        await clock.wait_all_blocked()
        assert nap.done() and nap.result() is False
        assert event.is_set()  # the caller clears it, not the helper
        assert clock.monotonic() == 1.0
        assert new_tasks(before) == set() and clock.sleepers == 0

    run(scenario())


def test_sleep_or_wake_on_an_event_already_set_still_yields_once() -> None:
    async def scenario() -> None:
        before = asyncio.all_tasks()
        clock = VirtualClock(START)
        event = asyncio.Event()
        event.set()
        ran: list[str] = []

        async def other() -> None:
            ran.append("other")

        task = asyncio.create_task(other())
        assert await sleep_or_wake(clock, 5.0, event) is False
        assert ran == ["other"]  # a loop woken every round does not starve the others
        await task
        await clock.wait_all_blocked()
        assert new_tasks(before) == set() and clock.sleepers == 0

    run(scenario())


def test_sleep_or_wake_without_a_time_waits_for_the_event_alone() -> None:
    async def scenario() -> None:
        before = asyncio.all_tasks()
        clock = VirtualClock(START)
        event = asyncio.Event()
        nap = asyncio.create_task(sleep_or_wake(clock, None, event))
        await clock.advance(1_000_000.0)
        assert not nap.done() and clock.sleepers == 0
        event.set()
        await clock.wait_all_blocked()
        assert nap.result() is False
        assert new_tasks(before) == set()

    run(scenario())


@pytest.mark.parametrize("seconds", [5.0, None])
def test_cancelling_sleep_or_wake_leaves_no_task_behind(seconds: float | None) -> None:
    async def scenario() -> None:
        before = asyncio.all_tasks()
        clock = VirtualClock(START)
        event = asyncio.Event()
        nap = asyncio.create_task(sleep_or_wake(clock, seconds, event))
        await clock.wait_all_blocked()
        assert len(new_tasks(before)) > 1  # the nap and what it waits on
        nap.cancel()
        with pytest.raises(asyncio.CancelledError):
            await nap
        await clock.wait_all_blocked()
        assert new_tasks(before) == set() and clock.sleepers == 0

    run(scenario())
