"""HA subscriptions: one ``async for`` that outlives connections.

An :class:`HASubscription` has its own bounded buffer. For every connection the HA client
subscribes again under the **same** ``sub_id`` and a *pump* moves the messages of that
connection's :class:`~spool.server.client.client.Subscription` into the buffer, asking the
bookmark store about each run first: a message the subscription already received (replayed
again after a resubscription from the resume point) is dropped there, so the iteration
sees every message once, in order, across failovers. When the connection is lost the pump
stops after the last message that arrived; the iteration just waits for the next
connection. It ends on ``unsubscribe()`` or ``close()``, and raises when reconnection gives
up (:class:`~spool.server.client.ha.errors.ReconnectGaveUp`) or the broker refuses the
resubscription.

Messages come wrapped as :class:`HAMessage` (the fields of
:class:`~spool.server.client.events.Message`, plus :meth:`HAMessage.discard`). Before it hands
out a message, the iteration makes sure the discards made so far are where the bookmark
store keeps them (a file store writes each one at once, but holds them in memory during
a compaction: the iteration then waits), so a killed process repeats at most the message
it was processing.

A resumed bookmark subscription whose server lacks its resume point (a failover over an
unsafe link) is *catching up* (:attr:`HASubscription.state`): the HA client retries until
the server has it or ``catch_up_timeout`` runs out (server/client/ha/haclient.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from spool.server.client.buffer import EMPTY, MessageBuffer
from spool.server.client.client import Subscription
from spool.server.client.errors import Disconnected
from spool.server.client.events import Message
from spool.server.client.ha.bookmarkstore import BookmarkStore

#: the queue item that ends an iteration.
END: Final = object()
#: messages handed out from the buffer between two yields to the event loop
YIELD_EVERY: Final = 256

#: the states of an HA subscription (:attr:`HASubscription.state`)
ACTIVE: Final = "active"
CATCHING_UP: Final = "catching_up"
ENDED: Final = "ended"


@dataclass(frozen=True, slots=True)
class SubscriptionSpec:
    """How to enter a subscription again (the arguments it was made with).

    Attributes:
        command: ``subscribe``, ``delta_subscribe`` or ``sow_and_subscribe``.
        bookmark: the starting bookmark, for a bookmark subscription (it then resumes from
            the bookmark store), else None.
    """

    command: str
    topic: str
    filter: str | None
    options: str | None
    bookmark: str | None
    extra: tuple[tuple[str, Any], ...] = ()


class HAMessage:
    """A delivered message of an HA subscription: :class:`~spool.server.client.events.Message`'s
    fields, and :meth:`discard` to tell the bookmark store the application is done."""

    __slots__ = ("message", "subscription")

    def __init__(self, message: Message, subscription: HASubscription) -> None:
        self.message = message
        self.subscription = subscription

    @property
    def topic(self) -> str:
        return self.message.topic

    @property
    def data(self) -> bytes:
        return self.message.data

    @property
    def bookmark(self) -> str | None:
        return self.message.bookmark

    @property
    def sub_ids(self) -> tuple[str, ...]:
        return self.message.sub_ids

    @property
    def timestamp(self) -> str | None:
        return self.message.timestamp

    @property
    def correlation_id(self) -> str | None:
        return self.message.correlation_id

    @property
    def header(self) -> dict[str, Any]:
        return self.message.header

    @property
    def command(self) -> str:
        return self.message.command

    @property
    def key(self) -> str | None:
        return self.message.key

    @property
    def reason(self) -> str | None:
        return self.message.reason

    def json(self) -> Any:
        return self.message.json()

    def discard(self) -> None:
        """The application is done with this message: it will not come again."""
        self.subscription.discard(self)

    def __repr__(self) -> str:
        return f"HAMessage({self.message!r}, sub_id={self.subscription.sub_id!r})"


class HASubscription:
    """An iterator of one subscription's messages across reconnects (module docstring).

    Attributes:
        sub_id: the same on every connection.
        spec: what re-enters it.
        current: the subscription on the current connection, if any.
        state: :data:`ACTIVE`; :data:`CATCHING_UP` while its server lacks its resume
            point; :data:`ENDED`.
        waited: seconds it has been catching up (0 while active).
    """

    def __init__(
        self,
        sub_id: str,
        spec: SubscriptionSpec,
        maxsize: int,
        *,
        receive: Callable[[str, list[str]], list[bool]] | None,
        discard: Callable[[str, str], None],
        unsubscribe: Callable[[str], Any],
        store: BookmarkStore | None = None,
    ) -> None:
        self.sub_id = sub_id
        self.spec = spec
        self.queue = MessageBuffer(maxsize)
        self.current: Subscription | None = None
        self.ended = False
        self.state = ACTIVE
        self.waited = 0.0
        self._receive = receive
        self._discard = discard
        self._unsubscribe = unsubscribe
        #: the bookmark store whose discards must be written before the next message
        self._store = store
        self._pump: asyncio.Task[None] | None = None

    # -- the application's side ---------------------------------------------------------

    def __aiter__(self) -> AsyncIterator[HAMessage]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[HAMessage]:
        taken = 0
        store = self._store
        while True:
            if store is not None and store.holding_discards():
                await store.discards_written()  # before the next message: the discards
            item = self.queue.take()
            if item is EMPTY:
                item = await self.queue.get()
                taken = 0
            else:
                taken += 1
                if taken >= YIELD_EVERY:
                    # A buffered run is handed out without awaiting; let the loop run now
                    # and then (other tasks; a batched bookmark store's writes).
                    taken = 0
                    await asyncio.sleep(0)
            if item is END:
                return
            if isinstance(item, BaseException):
                raise item
            assert isinstance(item, HAMessage)
            yield item

    async def get(self, timeout: float | None = None) -> HAMessage:
        """The next message (TimeoutError after ``timeout``)."""
        store = self._store
        if store is not None and store.holding_discards():
            await store.discards_written()
        item = await asyncio.wait_for(self.queue.get(), timeout)
        if item is END:
            raise Disconnected("subscription ended")
        if isinstance(item, BaseException):
            raise item
        assert isinstance(item, HAMessage)
        return item

    def discard(self, message: HAMessage | Message) -> None:
        bm = message.bookmark
        if bm is not None and self.spec.bookmark is not None:
            self._discard(self.sub_id, bm)

    async def unsubscribe(self) -> None:
        await self._unsubscribe(self.sub_id)

    # -- the HA client's side -----------------------------------------------------------

    def attach(self, current: Subscription) -> None:
        """Follow ``current`` (this connection's subscription) from now on."""
        self.current = current
        self._pump = asyncio.get_running_loop().create_task(self._run(current))

    async def _run(self, current: Subscription) -> None:
        receive = self._receive
        put = self.queue.put_run
        try:
            async for batch in current.batches():
                msgs: Sequence[Message] = batch
                if receive is not None:
                    flags = receive(self.sub_id, [m.bookmark or "" for m in batch])
                    msgs = [m for m, ok in zip(batch, flags, strict=True) if ok]
                if msgs:
                    await put([self._wrap(m) for m in msgs])  # type: ignore[misc]
        except Disconnected:
            return  # the connection is gone: the next one attaches a new subscription
        except Exception as exc:  # the broker ended it (a failure ack): the iteration raises
            self.end(exc)

    def _wrap(self, message: Message) -> HAMessage:
        """What the application gets for ``message``."""
        return HAMessage(message, self)

    async def detached(self) -> None:
        """Wait for the pump to move the last messages of the lost connection."""
        if self._pump is not None:
            await asyncio.gather(self._pump, return_exceptions=True)
            self._pump = None

    def end(self, item: BaseException | object = END) -> None:
        """End the iteration after the messages already buffered (``item``: END or the
        exception it raises)."""
        if not self.ended:
            self.ended = True
            self.state = ENDED
            self.queue.put_end(item)
            if self._pump is not None and self._pump is not asyncio.current_task():
                self._pump.cancel()


__all__ = [
    "ACTIVE",
    "CATCHING_UP",
    "END",
    "ENDED",
    "HAMessage",
    "HASubscription",
    "SubscriptionSpec",
]
