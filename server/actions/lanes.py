"""Lanes: the bounded queue between the events an action reacts to and the task that runs it.

An event-driven action (every trigger of it an event: a message published, a SOW record
removed, a client connecting...) is not run once per event as a scheduled action is run
once per firing: at thousands of messages a second, a run per message would skip the
messages that arrive during a run and write a history row per message. Its candidate
messages go into its lane instead, and one worker task takes them in batches, in the order
they came. Each such action's runner (:mod:`spool.server.actions.eventrunner`) owns its
lane: the publish path offers to it, the action's worker takes from it.

What a lane promises:

- **the producer is never slowed**: :meth:`EventLane.offer` neither blocks nor raises and
  costs O(1) on the event loop. What does not fit is dropped and counted, never waited
  for: a publisher must not wait for an action's side effects;
- **capacity counts messages**, not items: an item is one candidate message or a run of
  them (:class:`Candidates`), and a run of 100 takes 100 places. An item fits whole or is
  dropped whole;
- **first in, first out**: the worker sees the items in the order they were offered, so
  an action's firings follow their sources' order;
- **stopping drains**: after :meth:`EventLane.stop` offers are dropped (and counted), the
  worker takes what is queued, then :meth:`EventLane.take` returns an empty batch, its
  sign to end.

Checkpoint marks (the restart of on-publish actions): after a batch the worker records
with :meth:`EventLane.done` the source seq up to which every candidate is done (a dropped
or filtered-out candidate is done too: a drop is final) and the last seq of the messages
the batch derived. A seq may become the action's checkpoint only once it and those derived
messages are durable in the log: a restart resumes after the checkpoint, so a derived
message a crash took away would otherwise never be written again. A batch's side effects
still under way when it is done (webhook posts queued, not settled) travel with its mark
as a :class:`Hold`: the checkpoint does not pass the mark until the hold is released, so
a post a crash or a stop cut off is made again after the restart.
:meth:`EventLane.checkpoint` answers that seq for the log's durable seq and forgets the
marks it covers, so a lane keeps only the marks of what is not durable yet.

Pure asyncio: no clock, no I/O.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Final, Generic, Protocol, TypeVar

__all__ = ["DEFAULT_TAKE", "MAX_MARKS", "Candidates", "EventLane", "Hold"]

#: Most candidate messages one :meth:`EventLane.take` hands over (a batch of the worker).
DEFAULT_TAKE: Final = 256
#: Most checkpoint marks a lane keeps waiting for durability. Only reached when nobody asks
#: for the checkpoint (an instance without a log); beyond it the oldest mark is forgotten,
#: which makes the checkpoint later, never earlier than it may be.
MAX_MARKS: Final = 1024


class Candidates(Protocol):
    """What a lane holds: one candidate message for an action, or a run of them."""

    @property
    def count(self) -> int:
        """How many candidate messages the item stands for (at least 1)."""
        ...


C = TypeVar("C", bound=Candidates)


class Hold:
    """Side effects of one batch still under way (see the module docstring): each one
    :meth:`add` ed is :meth:`release` d once it settled; the batch's checkpoint mark waits
    until none is left."""

    __slots__ = ("pending",)

    def __init__(self) -> None:
        self.pending = 0

    def add(self) -> None:
        self.pending += 1

    def release(self) -> None:
        self.pending -= 1

    @property
    def settled(self) -> bool:
        return self.pending <= 0


class _Mark:
    """A checkpoint mark: ``upto`` may be the checkpoint once the log is durable through
    ``needs`` and every hold is settled."""

    __slots__ = ("holds", "needs", "upto")

    def __init__(self, upto: int, needs: int, holds: list[Hold]) -> None:
        self.upto = upto
        self.needs = needs
        self.holds = holds

    @property
    def settled(self) -> bool:
        return all(h.settled for h in self.holds)


class EventLane(Generic[C]):
    """The bounded FIFO of one event-driven action (see the module docstring).

    Args:
        action: the action's name (for the service's events and counters).
        capacity: most candidate messages queued at once (at least 1).
        checkpoint: the checkpoint the action starts from (read at start-up), answered by
            :meth:`checkpoint` until a later one is durable; None: it has none.

    Attributes:
        offered: candidate messages offered, queued or not.
        queued: candidate messages waiting for the worker now (at most ``capacity``).
        dropped: candidate messages that did not fit, or came after :meth:`stop`.
        taken: candidate messages handed to the worker (``offered`` is always
            ``taken + dropped + queued``).
        accepting: False once :meth:`stop` was called.
    """

    def __init__(self, action: str, capacity: int, *, checkpoint: int | None = None) -> None:
        if capacity < 1:
            raise ValueError(f"a lane holds at least one message, not {capacity}")
        self.action = action
        self.capacity = capacity
        self.offered = 0
        self.queued = 0
        self.dropped = 0
        self.taken = 0
        self.accepting = True
        self._items: deque[C] = deque()
        #: set when an item was queued or the lane stopped: wakes a waiting take
        self._ready = asyncio.Event()
        #: needs strictly increases along the deque, so the marks a durable seq covers
        #: are a prefix of it
        self._marks: deque[_Mark] = deque()
        self._checkpoint = checkpoint
        self._last_done = checkpoint
        self._durable = 0

    def resume(self, checkpoint: int) -> None:
        """Start from ``checkpoint`` (read at start-up, before any mark): every candidate
        up to it counts as done, and :meth:`checkpoint` answers it until a later one is
        durable."""
        self._checkpoint = checkpoint
        self._last_done = checkpoint

    # -- the producer's side ------------------------------------------------------------

    def offer(self, item: C) -> bool:
        """Queue ``item`` if it fits whole and the lane accepts; else count it dropped.

        Never blocks, never raises, O(1). Returns whether it was queued.
        """
        count = item.count
        self.offered += count
        if not self.accepting or self.queued + count > self.capacity:
            self.dropped += count
            return False
        self._items.append(item)
        self.queued += count
        self._ready.set()
        return True

    def stop(self) -> None:
        """Refuse offers from now on (they are dropped and counted); what is queued stays
        for the worker, whose :meth:`take` returns an empty batch once it is taken."""
        self.accepting = False
        self._ready.set()

    # -- the worker's side --------------------------------------------------------------

    async def take(self, limit: int = DEFAULT_TAKE) -> list[C]:
        """The next batch, oldest first: waits until an item is queued.

        A batch holds at most ``limit`` candidate messages, except that its first item is
        taken whatever its count (a run longer than ``limit`` comes alone rather than never).
        Returns an empty batch only when the lane is stopped and empty: the worker's end.
        """
        while not self._items:
            if not self.accepting:
                return []
            self._ready.clear()
            await self._ready.wait()
        return self.take_nowait(limit)

    def take_nowait(self, limit: int = DEFAULT_TAKE) -> list[C]:
        """The batch :meth:`take` would return now, empty when nothing is queued."""
        items = self._items
        batch: list[C] = []
        total = 0
        while items:
            count = items[0].count
            if batch and total + count > limit:
                break
            batch.append(items.popleft())
            total += count
        self.queued -= total
        self.taken += total
        return batch

    def done(self, upto_seq: int, derived_seq: int | None = None, hold: Hold | None = None) -> None:
        """Record a checkpoint mark: every candidate whose source seq is at most
        ``upto_seq`` is done, and the messages derived from them end at ``derived_seq``
        in the log (None: none were derived); ``hold``: side effects of theirs still
        under way (the mark waits until it is released).

        Marks come in source order (the worker's batches are), so ``upto_seq`` never goes
        back. O(1).

        Raises:
            ValueError: ``upto_seq`` is below the previous mark's or the start checkpoint.
        """
        if self._last_done is not None and upto_seq < self._last_done:
            raise ValueError(
                f"lane {self.action!r}: mark {upto_seq} is behind the previous one, "
                f"{self._last_done}"
            )
        self._last_done = upto_seq
        needs = upto_seq if derived_seq is None else max(upto_seq, derived_seq)
        marks = self._marks
        if marks and needs <= marks[-1].needs:
            # durable when the previous mark is (the checkpoint moves in order): one mark,
            # which waits for both marks' holds
            last = marks[-1]
            last.upto = upto_seq
            if hold is not None:
                last.holds.append(hold)
            return
        marks.append(_Mark(upto_seq, needs, [hold] if hold is not None else []))
        if len(marks) > MAX_MARKS:
            # the next mark covers it, once durable, and waits for its holds too
            marks[1].holds.extend(marks.popleft().holds)

    def checkpoint(self, durable_seq: int) -> int | None:
        """The highest source seq whose candidates are all done, whose derived messages
        are durable, with the log durable through ``durable_seq`` (a seq below one given
        before changes nothing: durability does not go back), and whose side effects
        settled. None: there is none yet.

        The marks it covers are forgotten; it is never ahead of a mark not recorded, not
        durable or held, and never goes back.
        """
        if durable_seq > self._durable:
            self._durable = durable_seq
        marks = self._marks
        while marks and marks[0].needs <= self._durable and marks[0].settled:
            self._checkpoint = marks.popleft().upto
        return self._checkpoint

    @property
    def marks(self) -> int:
        """How many checkpoint marks wait for durability or a hold."""
        return len(self._marks)
