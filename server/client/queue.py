"""Queue consumers on the Python client: explicit ``ack()`` / ``cancel()`` per message,
acks batched per loop turn, and an auto-ack iteration (docs/python-client.md "Queues").

::

    sub = await subscribe_queue(client, "work", max_backlog=10)
    async for msg in sub:                 # explicit: ack when done
        handle(msg.json())
        msg.ack()                 # or msg.cancel(), msg.expire(), msg.reject("why")
    async for msg in sub.auto_ack():      # acked when the loop asks for the next one
        handle(msg.json())

A queue message is leased to this subscription until it is acked, cancelled, or its lease
(``lease_period``) runs out; ``delivery_count`` above 1 means an earlier delivery's lease
ended unacked (a consumer crashed, disconnected or was too slow). The acks of one loop
turn leave as one ``sow_delete`` per kind; :meth:`QueueSubscription.settled` waits until
the broker processed every ack given so far.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import AsyncIterable, AsyncIterator, Callable
from typing import Any, Final, TypeVar

from spool.server.client.client import Ack, Client, Message, Subscription

__all__ = [
    "ACK",
    "QueueAcks",
    "QueueMessage",
    "QueueSubscription",
    "Settling",
    "auto_acked",
    "subscribe_queue",
]

#: the settling of a processed message (``cancel``, ``expire`` and ``reject`` are the others)
ACK: Final = ""


class Settling(ABC):
    """What a consumer may do with a leased queue message; each ends in
    ``_settle(kind, reason)`` (``ACK``, ``cancel``, ``expire`` or ``reject``), which the
    message class defines and which sets ``settled``."""

    __slots__ = ()
    settled: bool  # in the message class's slots

    def ack(self) -> None:
        """Processed: it leaves the queue (sent with the other acks of this loop turn)."""
        self._settle(ACK)

    def cancel(self) -> None:
        """Give it back to the queue now (another consumer may get it)."""
        self._settle("cancel")

    def expire(self) -> None:
        """Drop it without processing it."""
        self._settle("expire")

    def reject(self, reason: str = "") -> None:
        """Refuse it: it leaves the queue and is not delivered again (to the queue's
        dead-letter topic, with ``reason``, when the queue has one)."""
        self._settle("reject", reason)

    @abstractmethod
    def _settle(self, kind: str, reason: str = "") -> None:
        """Settle the message as ``kind`` (each message class says where it goes)."""

    @staticmethod
    def lease_of(message: Message) -> tuple[int, float]:
        """A delivery's count (1: the first) and lease in seconds (0: at-most-once)."""
        header = message.header
        return int(header.get("dc", 1)), float(header.get("lp", 0)) / 1000.0


class QueueAcks:
    """The acks, cancels and expires of one queue subscription, batched per loop turn into
    one ``sow_delete`` per kind, sent on the connection ``current()`` returns (``None``:
    dropped, the leases ended with the connection and the messages come again).

    Attributes:
        acks: the ``stats`` acks of the batches sent so far.
        errors: the exceptions of batches that failed (the leases return their messages).
    """

    def __init__(self, queue: str, current: Callable[[], Client | None]) -> None:
        self.queue = queue
        self.acks: list[Ack] = []
        self.errors: list[BaseException] = []
        self._current = current
        self._pending: dict[tuple[str, str], list[str]] = {}
        self._scheduled = False
        self._inflight: set[asyncio.Task[None]] = set()

    def add(self, kind: str, bookmark: str, reason: str = "") -> None:
        """Settle ``bookmark`` as ``kind`` (``ACK``, ``cancel``, ``expire``, ``reject``
        with ``reason``) this turn."""
        self._pending.setdefault((kind, reason), []).append(bookmark)
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._send_all)

    def _send_all(self) -> None:
        self._scheduled = False
        pending, self._pending = self._pending, {}
        client = self._current()
        if client is None:
            return
        for (kind, reason), bookmarks in pending.items():
            task = asyncio.get_running_loop().create_task(
                self._send(client, kind, reason, bookmarks)
            )
            self._inflight.add(task)
            task.add_done_callback(self._inflight.discard)

    async def _send(self, client: Client, kind: str, reason: str, bookmarks: list[str]) -> None:
        try:
            ack = await client.queue_ack(
                self.queue, bookmarks, option=kind or None, reason=reason or None
            )
        except Exception as exc:  # kept for settled(); the lease returns the messages
            self.errors.append(exc)
            return
        self.acks.append(ack)

    async def settled(self) -> None:
        """Return once every batch given so far was answered (or failed)."""
        await asyncio.sleep(0)  # let this turn's acks leave
        if self._scheduled:
            self._send_all()
        while self._inflight:
            await asyncio.gather(*list(self._inflight), return_exceptions=True)


M = TypeVar("M", bound=Settling)


async def auto_acked(messages: AsyncIterable[M]) -> AsyncIterator[M]:
    """``messages``, each acked when the loop asks for the next one (its body finished
    without raising and did not settle it). A body that raises leaves its message unacked:
    it returns to the queue when its lease ends or the connection closes."""
    async for msg in messages:
        yield msg
        if not msg.settled:
            msg.ack()


class QueueMessage(Settling):
    """One delivered queue message and what its consumer may do with it.

    Attributes:
        message: the delivery (``data``, ``json()``, ``bookmark``, ``topic``).
        delivery_count: 1 on the first delivery; more after leases ended unacked.
        lease_period: seconds this delivery's lease lasts (0: at-most-once).
    """

    __slots__ = ("_sub", "delivery_count", "lease_period", "message", "settled")

    def __init__(self, sub: QueueSubscription, message: Message) -> None:
        self._sub = sub
        self.message = message
        self.delivery_count, self.lease_period = self.lease_of(message)
        self.settled = False

    @property
    def data(self) -> bytes:
        return self.message.data

    @property
    def bookmark(self) -> str:
        return self.message.bookmark or ""

    def json(self) -> Any:
        return self.message.json()

    def _settle(self, kind: str, reason: str = "") -> None:
        if self.settled:
            raise RuntimeError(f"queue message {self.bookmark} was already acked or cancelled")
        self.settled = True
        self._sub._queue_ack(kind, self.bookmark, reason)


class QueueSubscription:
    """A subscription to a queue: iterate :class:`QueueMessage` values.

    Attributes:
        subscription: the client subscription underneath.
        queue: the queue's name.
        max_backlog: the backlog asked for (the broker grants the smaller of it and the
            queue's ``MaxPerSubscriptionBacklog``; its processed ack says which).
        acks: the ``stats`` acks of the acks sent so far.
        errors: acks that failed (their exceptions).
    """

    def __init__(
        self, client: Client, queue: str, subscription: Subscription, backlog: int
    ) -> None:
        self.client = client
        self.queue = queue
        self.subscription = subscription
        self.max_backlog = backlog
        self._out = QueueAcks(queue, lambda: client)
        self.acks = self._out.acks
        self.errors = self._out.errors

    def __aiter__(self) -> AsyncIterator[QueueMessage]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[QueueMessage]:
        async for message in self.subscription:
            yield QueueMessage(self, message)

    def auto_ack(self) -> AsyncIterator[QueueMessage]:
        """The messages, each acked when the loop asks for the next one (:func:`auto_acked`)."""
        return auto_acked(self)

    async def get(self, timeout: float | None = None) -> QueueMessage:
        """The next message (TimeoutError after ``timeout``)."""
        return QueueMessage(self, await self.subscription.get(timeout))

    def _queue_ack(self, kind: str, bookmark: str, reason: str = "") -> None:
        self._out.add(kind, bookmark, reason)

    async def settled(self) -> None:
        """Return once the broker processed every ack, cancel and expire given so far."""
        await self._out.settled()

    async def unsubscribe(self) -> None:
        """Send the acks given so far, then end the subscription (messages still leased
        return to the queue)."""
        await self.settled()
        await self.subscription.unsubscribe()


async def subscribe_queue(
    client: Client,
    queue: str,
    *,
    max_backlog: int | None = None,
    filter: str | None = None,
    sub_id: str | None = None,
    timeout: float = 30.0,
) -> QueueSubscription:
    """Subscribe to queue ``queue`` (``max_backlog``: most messages leased at once; the
    broker grants at most the queue's ``MaxPerSubscriptionBacklog``, 1 when not given)."""
    sub = await client.subscribe(
        queue, filter=filter, sub_id=sub_id, timeout=timeout,
        options=f"max_backlog={max_backlog}" if max_backlog is not None else None,
    )  # fmt: skip
    return QueueSubscription(client, queue, sub, max_backlog or 1)
