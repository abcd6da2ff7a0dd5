"""Queue consumers on the HA client: a queue subscription that outlives connections.

``sub = await ha.subscribe_queue("work", max_backlog=10)``; ``async for msg in sub``,
then ``msg.ack()`` (or ``cancel()``, ``expire()``, ``reject(reason)``), as on the plain client
(server/client/queue.py). After a reconnect (a broker restart, a failover) the HA client
subscribes again under the same ``sub_id``, and the broker's at-least-once rule applies
(docs/queues.md): what was leased on the lost connection and not acked goes back to the
queue and is delivered again, here or to another consumer, with a higher delivery count.

What this class adds, so that the application sees each message once as long as this
client lives:

- **nothing settled for good comes back**: it remembers the bookmarks the application
  acked, expired or rejected (the last ``acked_memory`` of them, with the reason of a
  reject). A redelivery of one (the settlement did not reach the broker before the
  connection was lost, or reached an instance that failed before it replicated) is
  settled again the same way at once and not handed to the application: an ack again,
  or the same reject, so a rejected message reaches the dead-letter topic with the
  application's reason, not processed a second time. A cancelled message was given back
  on purpose: its redelivery is handed over;
- **nothing is handed twice while it is held**: a redelivery of a message the application
  has not settled yet (it is in the buffer or being processed) is not handed again; the
  application's ack of the first copy, sent on the current connection, settles the new
  lease.

What it cannot do: a message whose ack was lost may have been delivered to *another*
consumer meanwhile, which then processes it too (at least once); and a restarted process
has forgotten what it acked.

Acks, cancels, expires and rejects of one loop turn leave as one ``sow_delete`` per kind
on the current connection. One given while disconnected, or lost with its connection, is
not resent: the lease it was for ended with the connection (the broker answers an ack
from another connection with ``refused``), and the redelivery is settled again (or
handed back, for a cancel) when it comes.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from typing import Any, Final

from spool.server.client.client import Client
from spool.server.client.events import Message
from spool.server.client.ha.subscription import HAMessage, HASubscription, SubscriptionSpec
from spool.server.client.queue import ACK, QueueAcks, Settling, auto_acked

__all__ = ["HAQueueMessage", "HAQueueSubscription"]

#: settled bookmarks remembered per subscription unless told otherwise
ACKED_MEMORY: Final = 100_000
#: the settlements a redelivery gets again without reaching the application (a cancel
#: gives the message back on purpose: its redelivery is handed over)
_FOR_GOOD: Final = frozenset({ACK, "expire", "reject"})


class HAQueueMessage(HAMessage, Settling):
    """A delivered queue message: :class:`HAMessage`'s fields, its lease, and what the
    consumer may do with it (``ack``, ``cancel``, ``expire``).

    Attributes:
        delivery_count: 1 on the first delivery; more after leases ended unacked.
        lease_period: seconds this delivery's lease lasts (0: at-most-once).
    """

    __slots__ = ("delivery_count", "lease_period", "settled")

    def __init__(self, message: Message, subscription: HAQueueSubscription) -> None:
        super().__init__(message, subscription)
        self.delivery_count, self.lease_period = self.lease_of(message)
        self.settled = False

    def discard(self) -> None:
        """The same as :meth:`ack` (the application is done with it)."""
        self.ack()

    def _settle(self, kind: str, reason: str = "") -> None:
        if self.settled:
            raise RuntimeError(f"queue message {self.bookmark} was already acked or cancelled")
        self.settled = True
        sub = self.subscription
        assert isinstance(sub, HAQueueSubscription)
        sub.settle(kind, self.bookmark or "", reason)


class HAQueueSubscription(HASubscription):
    """One queue subscription across connections (module docstring).

    Attributes:
        queue: the queue's name.
        acks: the ``stats`` acks of the acks sent so far.
        errors: acks that could not be sent or failed (their exceptions).
        reacked: redeliveries of messages acked, expired or rejected, settled again the
            same way without reaching the application.
    """

    def __init__(
        self,
        sub_id: str,
        spec: SubscriptionSpec,
        maxsize: int,
        *,
        current: Callable[[], Client | None],
        unsubscribe: Callable[[str], Any],
        acked_memory: int = ACKED_MEMORY,
    ) -> None:
        if acked_memory < 1:
            raise ValueError(f"acked_memory must be at least 1, not {acked_memory}")
        super().__init__(
            sub_id, spec, maxsize, receive=self._admit, discard=_no_discard,
            unsubscribe=unsubscribe,
        )  # fmt: skip
        self.queue_name = spec.topic
        self._out = QueueAcks(spec.topic, current)
        self.acks = self._out.acks
        self.errors = self._out.errors
        self.reacked = 0
        #: bookmark -> how the application settled it for good (kind, reject reason)
        self._done: OrderedDict[str, tuple[str, str]] = OrderedDict()
        self._memory = acked_memory
        self._held: set[str] = set()

    # -- deliveries ---------------------------------------------------------------------

    def _admit(self, _sub_id: str, bookmarks: list[str]) -> list[bool]:
        """Which deliveries reach the application: not one it settled for good (settled
        again here, the same way), not one it holds already."""
        flags = []
        done = self._done
        for bm in bookmarks:
            settled = done.get(bm)
            if settled is not None:
                kind, reason = settled
                self.reacked += 1
                self._queue_ack(kind, bm, reason)
                flags.append(False)
            elif bm in self._held:
                flags.append(False)
            else:
                if bm:
                    self._held.add(bm)
                flags.append(True)
        return flags

    def _wrap(self, message: Message) -> HAMessage:
        return HAQueueMessage(message, self)

    def __aiter__(self) -> AsyncIterator[HAQueueMessage]:
        return self._iterate_queue()

    async def _iterate_queue(self) -> AsyncIterator[HAQueueMessage]:
        async for msg in self._iterate():
            assert isinstance(msg, HAQueueMessage)
            yield msg

    def auto_ack(self) -> AsyncIterator[HAQueueMessage]:
        """The messages, each acked when the loop asks for the next one (:func:`auto_acked`)."""
        return auto_acked(self)

    async def get(self, timeout: float | None = None) -> HAQueueMessage:
        msg = await super().get(timeout)
        assert isinstance(msg, HAQueueMessage)
        return msg

    # -- acks ---------------------------------------------------------------------------

    def settle(self, kind: str, bookmark: str, reason: str = "") -> None:
        """The application acked (``""``), cancelled, expired or rejected ``bookmark``
        (``reason``: why it rejected it); all but a cancel are remembered."""
        self._held.discard(bookmark)
        if kind in _FOR_GOOD and bookmark:
            done = self._done
            done[bookmark] = (kind, reason)
            if len(done) > self._memory:
                done.popitem(last=False)
        self._queue_ack(kind, bookmark, reason)

    def _queue_ack(self, kind: str, bookmark: str, reason: str = "") -> None:
        self._out.add(kind, bookmark, reason)

    async def settled(self) -> None:
        """Return once every ack, cancel, expire and reject given so far was answered by the
        broker (or lost with its connection: the message comes again, module docstring)."""
        await self._out.settled()

    async def unsubscribe(self) -> None:
        """Send the acks given so far, then end the subscription (messages still leased
        return to the queue)."""
        await self.settled()
        await super().unsubscribe()


def _no_discard(_sub_id: str, _bookmark: str) -> None:
    """Queue messages are settled by ack, cancel or expire (no bookmark store)."""
