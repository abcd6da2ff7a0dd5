"""Conflation of a SOW subscription (``conflation=DURATION``): at most one delivery per
record per interval, the latest state.

The first change of a key opens a window of the interval on the injected clock; later
changes of that key inside it only move its end state. When the window closes, the
subscriber is given *one* change from the state before the window to the state at its
close, which is exactly what the subscriber needs: a delta subscriber gets the difference
from the state it holds, an ``oof`` subscriber hears of a record that left its focus even
if it came back and went again inside the window, and a record created and deleted inside
one window is never mentioned. Windows close in the order they opened.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from spool.server.clock import Clock
from spool.server.ports import Change, SowRecord
from spool.server.sow.memory import new_change

__all__ = ["SowConflation"]

#: what a closed window hands back: (topic, topic literal, changes, reason for deletions)
Flush = Callable[[str, bytes, list[Change], str | None], object]


@dataclass(slots=True)
class _Window:
    literal: bytes
    old: SowRecord | None
    new: SowRecord | None
    reason: str | None
    closes_at: float


class SowConflation:
    """The open windows of one subscription, and the task that closes them.

    Args:
        interval: seconds per window.
        clock: the injected clock (windows close on its monotonic time).
        flush: receives what closed windows deliver, grouped by topic and reason.
    """

    def __init__(self, interval: float, clock: Clock, flush: Flush) -> None:
        self.interval = interval
        self._clock = clock
        self._flush = flush
        self._windows: dict[tuple[str, str], _Window] = {}
        self._task: asyncio.Task[None] | None = None

    def add(self, topic: str, literal: bytes, changes: list[Change], reason: str | None) -> None:
        """Take changes of one topic."""
        windows = self._windows
        closes_at = self._clock.monotonic() + self.interval
        for ch in changes:
            w = windows.get((topic, ch.key))
            if w is None:
                windows[(topic, ch.key)] = _Window(literal, ch.old, ch.new, reason, closes_at)
            else:
                w.new = ch.new
                w.reason = reason
        if windows and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        clock = self._clock
        try:
            while self._windows:
                first = next(iter(self._windows.values()))
                wait = first.closes_at - clock.monotonic()
                if wait > 0:
                    await clock.sleep(wait)
                self._close_due(clock.monotonic())
        finally:
            self._task = None

    def _close_due(self, now: float) -> None:
        groups: dict[tuple[str, str | None], tuple[bytes, list[Change]]] = {}
        windows = self._windows
        while windows:
            (topic, key), w = next(iter(windows.items()))
            if w.closes_at > now:
                break
            del windows[(topic, key)]
            if w.old is None and w.new is None:
                continue  # made and deleted inside the window: nobody saw it
            entry = groups.setdefault((topic, w.reason if w.new is None else None), (w.literal, []))
            entry[1].append(new_change(key, w.old, w.new))
        for (topic, reason), (literal, changes) in groups.items():
            self._flush(topic, literal, changes, reason)

    def close(self) -> None:
        """Forget the open windows and stop (the subscription ended)."""
        self._windows.clear()
        if self._task is not None:
            self._task.cancel()
            self._task = None
