"""The task that removes expired SOW records, on the injected clock.

It sleeps until the earliest deadline of any store (server/sow/expiry.py), removes what
is due through :meth:`spool.server.sow.deleting.SowDeletes.remove` (logged as ``SOW_DELETE``,
``oof`` reason ``expired``), and sleeps again; a new deadline earlier than the one it
sleeps towards wakes it. When the log refuses the removals (``txlog full``) the records
stay and it tries again a second later.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Final

from spool.server.clock import Clock, sleep_or_wake, time_us
from spool.server.sow.deleting import SowDeletes
from spool.server.sow.registry import SowTopics
from spool.server.sow.subscribers import EXPIRED
from spool.server.stats.source import EventSink

__all__ = ["Expirer"]

#: seconds before retrying when the log refused an expiration
_RETRY: Final = 1.0


class Expirer:
    """Removes records when their lifetime ends.

    Args:
        topics: the stores and their expiry indexes.
        deletes: how a removal is logged, applied and told.
        clock: the time deadlines are measured on.
        events: refusals of the log.
    """

    def __init__(
        self, topics: SowTopics, deletes: SowDeletes, clock: Clock, events: EventSink
    ) -> None:
        self._topics = topics
        self._deletes = deletes
        self._clock = clock
        self._events = events
        self._wake = asyncio.Event()
        self._target: int | None = None
        self._task: asyncio.Task[None] | None = None
        #: records removed because they expired
        self.expired = 0

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def deadline(self, expires_us: int) -> None:
        """A record now expires at ``expires_us``: wake up earlier if that is sooner."""
        if self._target is None or expires_us < self._target:
            self._wake.set()

    def _next_due(self) -> int | None:
        due = [d for index in self._topics.expiry.values() if (d := index.next_due()) is not None]
        return min(due, default=None)

    async def _run(self) -> None:
        clock = self._clock
        while True:
            due = self._next_due()
            now = time_us(clock)
            if due is None or due > now:
                self._target = due
                await self._sleep(None if due is None else (due - now) / 1_000_000)
                continue
            self._target = None
            if not self.expire(now):
                self._target = now + int(_RETRY * 1_000_000)
                await self._sleep(_RETRY)
            await asyncio.sleep(0)

    async def _sleep(self, seconds: float | None) -> None:
        """Until ``seconds`` passed on the clock (None: for ever), or :meth:`deadline`."""
        self._wake.clear()
        await sleep_or_wake(self._clock, seconds, self._wake)

    def expire(self, now_us: int) -> bool:
        """Remove every record due at ``now_us``; False when the log refused some."""
        topics = self._topics
        ok = True
        for topic, index in list(topics.expiry.items()):
            store = topics.store(topic)
            next_due = index.next_due()
            if store is None or next_due is None or next_due > now_us:
                continue
            due = index.due(now_us, store.get)
            if due:
                removed, refusal = self._deletes.remove(store, due, EXPIRED)
                self.expired += removed
                if refusal is not None:
                    ok = False
                    for rec in due:
                        if store.get(rec.key) is rec:
                            index.add(rec)  # still there: try again later
                    self._events.emit(
                        "warning", "sow", "expiration_refused", topic=topic, error=str(refusal)
                    )
            index.compact(len(store), store.records)
        return ok
