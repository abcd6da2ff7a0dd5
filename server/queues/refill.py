"""Reading a bounded queue's inactive messages back from the transaction log.

A queue with a ``TargetQueueDepth`` (server/queues/window.py) keeps its inactive messages
in the log only. :class:`Refills` brings them back as active ones leave: one task per
queue at a time reads the log from the window's cursor (the log's own read API, which
reads journal files in a thread — never on the event loop) and activates the queue's
messages it finds, in log order, until the window is full again. A removal by filter
(``sow_delete`` with ``f``) of a bounded queue takes its active matches and scans the
inactive range for the others, deferring their acks; removals and refills of one queue
take turns (a lock), so a refill never activates a message a removal is about to take.

A refill the log refuses (a damaged or unreadable journal) is tried again on a timer,
0.5 s after the first failure and twice as long after each next one, up to 30 s: a queue
whose window emptied would otherwise wait for its next publish or ack to try again (and a
busy one would retry, and report, at every ack). Each failure is reported
(``queue_refill_failed``, with when it is tried next), the first success after them too
(``queue_refill_recovered``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, Final

from spool.server.clock import Clock
from spool.server.queues.machine import QueuedMessage, Removal
from spool.server.queues.stage import QueueRuntime
from spool.server.stats.source import EventSink
from spool.server.txlog import TransactionLog
from spool.server.txlog.format.record import Record

__all__ = ["Refills"]

#: records read per step (a refill also stops at about 1 MiB: the log's own limit)
_STEP: Final = 1000
#: seconds before a failed refill is tried again, doubled after each next failure ...
RETRY_FIRST: Final = 0.5
#: ... up to this
RETRY_MAX: Final = 30.0


class Refills:
    """The refills and scans of every bounded queue. Owned by the event loop.

    Args:
        txlog: where inactive messages are read back from.
        changed: told after a refill activated messages or moved a cursor (the service
            moves the queue's pin and delivers).
        events: the event log (a read the log refused).
        clock: when a failed refill is tried again.
    """

    def __init__(
        self,
        txlog: TransactionLog | None,
        changed: Callable[[QueueRuntime], None],
        events: EventSink,
        clock: Clock,
    ) -> None:
        self._txlog = txlog
        self._changed = changed
        self._events = events
        self._clock = clock
        #: per queue whose last refill failed: failures in a row, and when to try again
        self._failures: dict[QueueRuntime, int] = {}
        self._retry_at: dict[QueueRuntime, float] = {}
        self._locks: dict[QueueRuntime, asyncio.Lock] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        #: per queue, the records of its last read past where the window stopped (log
        #: records never change): the next refill starts with them instead of reading the
        #: same span again; at most one read's worth (``_STEP`` records, ~1 MiB) a queue
        self._ahead: dict[QueueRuntime, list[Record]] = {}
        #: messages activated by refills (all queues), for tests and the bench
        self.activated = 0

    def wanted(self, queue: QueueRuntime) -> None:
        """``queue`` may have room: start a refill unless one runs or none is needed."""
        window = queue.window
        if (
            window is None
            or window.reading
            or self._txlog is None
            or not window.room(queue.counted())
        ):
            return
        retry_at = self._retry_at.get(queue)
        if retry_at is not None and self._clock.monotonic() < retry_at:
            return  # its timer tries again (_retry)
        window.reading = True
        self._start(self._refill(queue))

    def _start(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _lock(self, queue: QueueRuntime) -> asyncio.Lock:
        lock = self._locks.get(queue)
        if lock is None:
            lock = self._locks[queue] = asyncio.Lock()
        return lock

    async def _refill(self, queue: QueueRuntime) -> None:
        window = queue.window
        txlog = self._txlog
        assert window is not None and txlog is not None
        try:
            async with self._lock(queue):
                while window.room(queue.counted()):
                    start = window.cursor
                    records = self._ahead.pop(queue, None)
                    if not records or records[0].seq > start:
                        records = await txlog.read_appended(
                            start, max_count=_STEP, upto_seq=txlog.last_seq
                        )
                    if not records or window.cursor != start:
                        break
                    self.activated += queue.activate(records, txlog.last_seq)
                    cursor = window.cursor
                    if cursor and records[-1].seq >= cursor:
                        self._ahead[queue] = records[max(0, cursor - records[0].seq) :]
                    self._changed(queue)
        except Exception as exc:  # a damaged journal: the messages stay inactive, reported
            failures = self._failures[queue] = self._failures.get(queue, 0) + 1
            delay = min(RETRY_MAX, RETRY_FIRST * 2 ** (failures - 1))
            self._retry_at[queue] = self._clock.monotonic() + delay
            self._events.emit("error", "queue", "queue_refill_failed", queue=queue.config.name,
                              cursor=window.cursor, reason=str(exc), failures=failures,
                              retry_in_s=delay)  # fmt: skip
            self._start(self._retry(queue, delay))
        else:
            failures = self._failures.pop(queue, 0)
            if failures:
                self._retry_at.pop(queue, None)
                self._events.emit("info", "queue", "queue_refill_recovered",
                                  queue=queue.config.name, failures=failures)  # fmt: skip
        finally:
            window.reading = False

    async def _retry(self, queue: QueueRuntime, delay: float) -> None:
        await self._clock.sleep(delay)
        self.wanted(queue)

    async def remove_where(
        self, queue: QueueRuntime, matches: Callable[[QueuedMessage], bool]
    ) -> tuple[list[Removal], list[tuple[int, str]]]:
        """A removal by filter of a bounded queue: its active messages that ``matches``
        takes leave the state machine, and the seqs of its inactive ones (as of now) are
        deferred, so they are never activated. Returns both, the inactive ones as (seq,
        bookmark) (the caller logs them). Done
        while no refill of the queue runs: a message cannot escape by being activated
        between the two halves."""
        window = queue.window
        txlog = self._txlog
        assert window is not None and txlog is not None
        found: list[tuple[int, str]] = []
        async with self._lock(queue):
            removed = queue.machine.remove_where(matches)
            end = txlog.last_seq
            at = window.cursor
            while at and at <= end:
                records = await txlog.read_appended(at, max_count=_STEP, upto_seq=end)
                if not records:
                    break
                hits = queue.inactive_matches(records, matches)
                window.defer(seq for seq, _ in hits)
                found.extend(hits)
                at = records[-1].seq + 1
        return removed, found

    async def close(self) -> None:
        """Shutdown: stop the refills under way."""
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            try:
                await task
            except asyncio.CancelledError:
                pass
