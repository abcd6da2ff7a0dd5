"""The messages of one subscription that its consumer has not taken yet.

Deliveries arrive in runs (:class:`~spool.server.client.events.Delivered`: the consecutive
messages of one frame for one subscription), and the buffer keeps them as those runs: a
frame of a thousand deliveries is one append, not a thousand queue puts, and
:meth:`MessageBuffer.get_batch` hands a whole run to a consumer that wants batches
(``async for batch in sub.batches()``). It is bounded by messages, like the queue it
replaces: once ``maxsize`` messages wait, :meth:`MessageBuffer.put_run` waits for the
consumer, the client stops reading and TCP backpressure reaches the broker. A run is
admitted whole (at most one run beyond the bound).

The end of a subscription (a marker or the exception that ended it) is queued after the
messages with :meth:`MessageBuffer.put_end`, which never waits.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Final

from spool.server.client.events import Message

#: what :meth:`MessageBuffer.take` returns when nothing waits.
EMPTY: Final = object()


class MessageBuffer:
    """A bounded FIFO of runs of messages (asyncio; the owner's loop only).

    Keeps the read side of ``asyncio.Queue`` the tests and users relied on: ``empty``,
    ``full``, ``qsize`` (in messages) and ``get``.
    """

    def __init__(self, maxsize: int) -> None:
        self._max = maxsize
        self._items: deque[list[Message] | object] = deque()
        self._pos = 0  # messages already taken from the first run
        self._count = 0  # messages waiting
        self._readable = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()

    def qsize(self) -> int:
        """Messages waiting."""
        return self._count

    def empty(self) -> bool:
        """Nothing waits (no message, no end)."""
        return not self._items

    def full(self) -> bool:
        """As many messages wait as the bound allows (0: unbounded)."""
        return 0 < self._max <= self._count

    async def put_run(self, run: list[Message]) -> None:
        """Queue a run of messages, once there is room."""
        while self.full():
            self._room.clear()
            await self._room.wait()
        self._items.append(run)
        self._count += len(run)
        self._readable.set()

    def put_end(self, item: object) -> None:
        """Queue what ends the subscription (after every message), without waiting."""
        self._items.append(item)
        self._readable.set()

    async def _first(self) -> list[Message] | object:
        while not self._items:
            self._readable.clear()
            await self._readable.wait()
        return self._items[0]

    def _taken(self, n: int) -> None:
        self._count -= n
        if not self.full():
            self._room.set()

    def take(self) -> Message | object:
        """The next message or end item when one waits, else :data:`EMPTY` (no await:
        the per-message iteration takes what is buffered without a coroutine each)."""
        if not self._items:
            return EMPTY
        first = self._items[0]
        if type(first) is not list:
            return self._items.popleft()
        msg: Message = first[self._pos]
        self._pos += 1
        if self._pos == len(first):
            self._items.popleft()
            self._pos = 0
        self._count -= 1
        if self._max > self._count:
            self._room.set()
        return msg

    async def get(self) -> Message | object:
        """The next message, or the end item."""
        first = await self._first()
        if type(first) is not list:
            return self._items.popleft()
        msg: Message = first[self._pos]
        self._pos += 1
        if self._pos == len(first):
            self._items.popleft()
            self._pos = 0
        self._taken(1)
        return msg

    async def get_batch(self) -> list[Message] | object:
        """The messages of the next run not taken yet (at least one), or the end item."""
        first = await self._first()
        self._items.popleft()
        if type(first) is not list:
            return first
        batch: list[Message] = first
        if self._pos:
            batch = batch[self._pos :]
            self._pos = 0
        self._taken(len(batch))
        return batch


__all__ = ["EMPTY", "MessageBuffer"]
