"""The triggers that fire by themselves: schedules and disk usage, each a task on the clock.

Every trigger sleeps on the injected :class:`~spool.server.clock.Clock` (a test drives it with a
virtual clock and asserts exact times) and, when it fires, calls ``fire(trigger, detail,
variables)``: the service runs the action unless it is running already (then the firing is
skipped, never queued: a ten-second schedule behind a two-minute run does not pile up).

- **Timer** (``Every 15m``): fires every interval from the instance's start, on the
  monotonic clock; intervals missed while a run was in progress are skipped.
- **Calendar** (``Daily 02:00``, ``Weekly Sun 03:00``, in a time zone): sleeps toward the
  next wall-clock instant (:func:`spool.server.actions.schedule.next_fire`) at most
  :data:`WALL_CHECK` at a time, so a wall clock that is set while it sleeps (NTP, a
  resumed machine) moves the run by at most that much.
- **Disk usage** (``amps-action-on-disk-usage``): reads the file system's usage every
  ``Interval`` (a ``statvfs`` in a thread); fires when it goes above the threshold, again
  every ``Repeat`` while it stays above if given, and re-arms once it is back at or below.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Final

from spool.server.actions.schedule import next_fire
from spool.server.clock import Clock
from spool.server.config import OnDiskUsage, OnSchedule
from spool.server.operations import Operations
from spool.server.stats.host import FilesystemUsage

__all__ = ["EARLY", "WALL_CHECK", "DiskUsageTrigger", "Fire", "ScheduleTrigger"]

#: Longest single sleep toward a calendar time (seconds): a wall clock set meanwhile
#: moves a run by at most this.
WALL_CHECK: Final = 60.0

#: How early a firing may come (seconds): a sleep toward an instant ends this much before
#: it, so float rounding between wall and monotonic time never makes a firing wait for
#: the clock's next move (a virtual clock advanced to exactly that instant wakes it).
EARLY: Final = 1e-3

#: ``fire(trigger module, detail, variables)``
Fire = Callable[[str, str, Mapping[str, str]], Awaitable[None]]


class ScheduleTrigger:
    """One ``amps-action-on-schedule`` of one action.

    Args:
        trigger: its configuration.
        fire: runs the action.
        clock: the time source.
        missed: told how many firings passed while a run was in progress (skipped).
    """

    def __init__(
        self, trigger: OnSchedule, fire: Fire, clock: Clock, missed: Callable[[int], None]
    ) -> None:
        self.trigger = trigger
        self._fire = fire
        self._clock = clock
        self._missed = missed
        self._task: asyncio.Task[None] | None = None
        self._anchor = 0.0  # monotonic start of a timer
        self._next: float | None = None  # wall time of the next firing

    @property
    def next_run(self) -> float | None:
        """Wall-clock time of the next firing (None before start)."""
        return self._next

    def start(self) -> None:
        """Start the timer now (timers count from here)."""
        self._anchor = self._clock.monotonic()
        schedule = self.trigger.schedule
        if schedule.kind == "every":
            self._next = self._clock.time() + schedule.interval
        else:
            self._next = next_fire(schedule, self._clock.time())
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"spool-action-schedule-{schedule.text}"
        )

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def first_run_from(self, when: float) -> float | None:
        """The first firing at or after wall time ``when`` (for the journal plan)."""
        schedule = self.trigger.schedule
        nxt = self._next
        if nxt is None:
            return None
        if when <= nxt:
            return nxt
        if schedule.kind == "every":
            steps = math.ceil((when - nxt) / schedule.interval)
            return nxt + steps * schedule.interval
        return next_fire(schedule, math.nextafter(when, -math.inf))

    async def _run(self) -> None:
        schedule = self.trigger.schedule
        detail = schedule.describe()
        clock = self._clock
        if schedule.kind == "every":
            due = self._anchor + schedule.interval
            while True:
                self._next = clock.time() + (due - clock.monotonic())
                while (remaining := due - clock.monotonic()) > EARLY:
                    await clock.sleep(remaining - EARLY / 2)
                await self._fire(self.trigger.module, detail, {"AMPS_SCHEDULE": detail})
                due += schedule.interval
                skipped = 0
                while due <= clock.monotonic():  # a run outlasted intervals: skip, no burst
                    due += schedule.interval
                    skipped += 1
                if skipped:
                    self._missed(skipped)
        at = -math.inf
        while True:
            # after the instant that fired, even if the clock still reads just before it;
            # firings that passed while the run went on are skipped, not caught up
            now = clock.time()
            skipped = 0
            if at != -math.inf:
                while (following := next_fire(schedule, at)) < now - EARLY:
                    at = following
                    skipped += 1
            if skipped:
                self._missed(skipped)
            at = next_fire(schedule, max(now, at))
            self._next = at
            while (remaining := at - clock.time()) > EARLY:
                await clock.sleep(min(remaining - EARLY / 2, WALL_CHECK))
            await self._fire(self.trigger.module, detail, {"AMPS_SCHEDULE": detail})


class DiskUsageTrigger:
    """One ``amps-action-on-disk-usage`` of one action.

    Args:
        trigger: its configuration.
        path: the directory whose file system it watches.
        fire: runs the action.
        ops: reads the usage (in a thread).
        clock: the time source.
    """

    def __init__(
        self, trigger: OnDiskUsage, path: Path, fire: Fire, ops: Operations, clock: Clock
    ) -> None:
        self.trigger = trigger
        self.path = path
        self._fire = fire
        self._ops = ops
        self._clock = clock
        self._task: asyncio.Task[None] | None = None
        #: the last reading, how many were made, and whether the trigger waits for a
        #: crossing (armed)
        self.last_usage: FilesystemUsage | None = None
        self.checks = 0
        self.armed = True
        self._next: float | None = None

    @property
    def next_run(self) -> float | None:
        """Wall-clock time of the next check."""
        return self._next

    def start(self) -> None:
        self._next = self._clock.time()
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"spool-action-disk-{self.trigger.label}"
        )

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        trigger = self.trigger
        last_fire = -math.inf
        while True:
            try:
                usage = await self._ops.filesystem_usage(self.path)
            except OSError as exc:
                self._ops.events.emit(
                    "error", "actions", "disk_check_failed", path=str(self.path), error=str(exc)
                )
            else:
                self.last_usage = usage
                self.checks += 1
                now = self._clock.monotonic()
                if usage.percent > trigger.above:
                    repeat = trigger.repeat
                    if self.armed or (repeat is not None and now - last_fire >= repeat):
                        self.armed = False
                        last_fire = now
                        detail = (
                            f"{trigger.label} {usage.percent:g}% used (above {trigger.above:g}%)"
                        )
                        await self._fire(trigger.module, detail, {
                            "AMPS_DISK_PATH": str(self.path),
                            "AMPS_DISK_PERCENT": f"{usage.percent:g}",
                            "AMPS_DISK_FREE_BYTES": str(usage.free),
                        })  # fmt: skip
                else:
                    self.armed = True
            self._next = self._clock.time() + trigger.interval
            await self._clock.sleep(trigger.interval)
