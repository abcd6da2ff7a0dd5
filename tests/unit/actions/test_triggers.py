"""Schedule triggers alone on a virtual clock: a firing that comes due during a run is
skipped and counted, never queued; a firing never repeats its instant."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import pytest

from spool.server.actions.triggers import EARLY, ScheduleTrigger
from spool.server.clock import VirtualClock
from spool.server.config import OnSchedule, Schedule


class Runs:
    """A fire callback whose runs last until the test lets them end."""

    def __init__(self, clock: VirtualClock) -> None:
        self.clock = clock
        self.started: list[float] = []
        self.release = asyncio.Event()
        self.missed: list[int] = []

    async def fire(self, trigger: str, detail: str, variables: Mapping[str, str]) -> None:
        self.started.append(self.clock.monotonic())
        await self.release.wait()
        self.release.clear()


def test_a_timer_skips_the_firings_a_long_run_outlasts() -> None:
    async def scenario() -> None:
        clock = VirtualClock()
        runs = Runs(clock)
        timer = ScheduleTrigger(
            OnSchedule(Schedule("every", interval=60.0, text="1m")), runs.fire, clock,
            runs.missed.append,
        )  # fmt: skip
        timer.start()
        await clock.advance(60)
        assert runs.started == pytest.approx([60.0], abs=EARLY)
        await clock.advance(150)  # the run goes on through 120 and 180
        assert len(runs.started) == 1
        runs.release.set()
        await clock.wait_all_blocked()
        assert runs.missed == [2]
        assert timer.next_run == pytest.approx(clock.time() + 30)  # 240, on the original grid
        await clock.advance(30)
        assert runs.started == pytest.approx([60.0, 240.0], abs=EARLY)
        runs.release.set()
        await timer.stop()

    asyncio.run(scenario())


def test_a_calendar_schedule_skips_what_came_due_during_a_run_and_never_fires_twice() -> None:
    async def scenario() -> None:
        clock = VirtualClock(start=0.0)  # 1970-01-01 00:00 UTC
        runs = Runs(clock)
        daily = ScheduleTrigger(
            OnSchedule(Schedule("daily", time_of_day=3600, text="01:00")), runs.fire, clock,
            runs.missed.append,
        )  # fmt: skip
        daily.start()
        assert daily.next_run == 3600.0
        await clock.advance(3600)
        assert len(runs.started) == 1
        runs.release.set()  # the run ends at once: the next firing is tomorrow, not now
        await clock.advance(1)
        assert len(runs.started) == 1 and daily.next_run == 86400 + 3600
        await clock.advance(86400 - 1)
        assert len(runs.started) == 2
        await clock.advance(3 * 86400 - 10)  # this run lasts almost three days
        runs.release.set()
        await clock.wait_all_blocked()
        assert runs.missed == [2]  # days 2 and 3 at 01:00
        assert daily.next_run == 4 * 86400 + 3600
        await clock.advance(10)
        assert len(runs.started) == 3
        runs.release.set()
        await daily.stop()

    asyncio.run(scenario())
