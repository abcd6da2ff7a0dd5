"""The no-progress rule: a client that takes nothing for ``SlowClientTimeout`` is cut.

A connection's writer sends one frame at a time and uvicorn applies TCP flow control to
each send, so a client that stops reading keeps its writer waiting in one send while
everything else for it waits behind. Paced producers (bookmark replays, ``live`` bookmark
subscriptions, the catch-up reads of spilled live subscriptions) then wait too, and
nothing would ever end the connection. :class:`StallWatch` ends it: a connection whose
current send began ``SlowClientTimeout`` ago is closed with ``slow client`` (cause
``slow_client_stalled``). Progress is counted per frame, so frames are kept to a quarter of
``SlowClientBufferLimit`` (at most 1 MB, server/backpressure.py): a reader that takes one
frame per ``SlowClientTimeout`` is never cut.

One task for the whole instance, on the injected clock. It sleeps until the earliest
moment a send in progress would pass the timeout (a whole timeout when none is in
progress), so it wakes about once per timeout while clients keep up and closes a stalled
one at exactly its deadline; each wake looks at every connection once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable
from typing import Final

from spool.server.clock import Clock
from spool.server.protocol.errors import SlowClient
from spool.server.session import Session
from spool.server.stats.source import EventSink

#: a deadline this close to now counts as reached (float sums of virtual times)
_EPSILON: Final = 1e-9


class StallWatch:
    """Closes the connections whose writer has been stuck in one send for ``timeout``.

    Args:
        sessions: the open connections (read at every wake).
        timeout: ``Tuning/SlowClientTimeout``, seconds.
        clock: the time source (virtual in scenario tests).
        events: the event log.
    """

    def __init__(
        self,
        sessions: Callable[[], Iterable[Session]],
        timeout: float,
        clock: Clock,
        events: EventSink,
    ) -> None:
        self._sessions = sessions
        self.timeout = timeout
        self._clock = clock
        self._events = events
        self._task: asyncio.Task[None] | None = None
        #: connections this watch closed
        self.closed = 0

    def start(self) -> None:
        """Start watching (in a task of the running loop)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="stall-watch")

    async def stop(self) -> None:
        """Stop watching."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        while True:
            await self._clock.sleep(self.sweep())

    def sweep(self) -> float:
        """Close every connection past its deadline; returns the seconds until the next
        deadline of a send in progress (a whole timeout when there is none)."""
        now = self._clock.monotonic()
        timeout = self.timeout
        wait = timeout
        for session in list(self._sessions()):
            started = session.send_started
            if started is None or session.closing:
                continue
            left = started + timeout - now
            if left <= _EPSILON:
                self._close(session, now - started)
            elif left < wait:
                wait = left
        return wait

    def _close(self, session: Session, waited: float) -> None:
        self.closed += 1
        session.close_cause = "slow_client_stalled"  # closing: nothing more is queued
        self._events.emit(
            "warning", "session", "slow_client",
            client=session.name, remote=session.remote, cause="stalled",
            seconds=round(waited, 3), buffered=session.queue_depth,
        )  # fmt: skip
        session.close_soon(SlowClient.reason, cause="slow_client_stalled")
