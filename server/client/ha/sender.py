"""The publish path of the HA client: number, store, and send what the store wrote.

:class:`PublishSender` owns the publish sequence and what was sent on the current
connection. ``add`` numbers a publish and stores it; a sender task sends what the store
holds above what was sent, **once the store has written it** (``await store.sync()``), so a
message is in a :class:`~spool.server.client.ha.publishstore.FilePublishStore` before it is on
the wire. After each logon, :meth:`PublishSender.logged_on` trims the store to the
broker's ``s`` when failover from that broker is safe (what it persisted is on every sync
destination) and rewinds what counts as sent, and :meth:`PublishSender.send` (awaited by
the reconnect handler) resends the rest in order with the same sequence numbers. Every
publish asks for a persisted ack (the store is trimmed by them, or by the replicated acks
when failover is unsafe: docs/ha-client.md "Failover safety").

A publish the broker refuses for now (``txlog full``: its log refuses writes) stays in the
store: :meth:`PublishSender.refuse` notes the lowest such sequence, no ack discards it or
anything after it (:meth:`PublishSender.confirmed`), and :meth:`PublishSender.resend_refused`
sends the store again from it, in order, on the same connection. The broker writes nothing
of this publisher above a refused sequence until that sequence comes again
(docs/protocol.md "When the transaction log refuses writes"), so the resend keeps the
publisher's order and leaves no gap.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from spool.server.client.client import Client
from spool.server.client.errors import ClientError
from spool.server.client.ha.errors import PublishGap
from spool.server.client.ha.publishstore import PublishStore, StoredPublish


class PublishSender:
    """Numbers, stores and sends publishes (module docstring).

    Args:
        store: the publish store.
        latest: the HA client's current connection, if any (connected or resuming).
        connected: the connection when it is fully resumed (new publishes go out on it).

    Attributes:
        seq: the last sequence number given.
        sent: every stored publish up to this number was sent on the current connection.
        refused: the lowest stored sequence the current broker refused for now (``txlog
            full``) and that was not sent again since (None: none).
    """

    def __init__(
        self,
        store: PublishStore,
        latest: Callable[[], Client | None],
        connected: Callable[[], Client | None],
    ) -> None:
        self.store = store
        self._latest = latest
        self._connected = connected
        self.seq = 0
        self.sent = 0
        self.refused: int | None = None
        self._task: asyncio.Task[None] | None = None

    def opened(self) -> None:
        """The store was loaded: number after what it holds."""
        self.seq = max(self.seq, self.store.last_seq)
        self.sent = self.store.last_discarded

    def gap(self, last_seq: int) -> PublishGap | None:
        """The gap a broker that persisted up to ``last_seq`` for this client name would
        leave: it lacks publishes the store already discarded as persisted (None: none)."""
        discarded = self.store.last_discarded
        return PublishGap(last_seq, discarded) if last_seq < discarded else None

    def logged_on(self, last_seq: int, *, trim: bool = True) -> None:
        """A logon ack said the broker persisted up to ``last_seq`` for this client name:
        number on after it; with ``trim``, drop what it persisted from the store (else
        everything the store holds is sent again: the broker acks what it has as
        duplicates, and confirms them once they are replicated)."""
        store = self.store
        if trim:
            store.discard_up_to(last_seq)
        self.seq = max(self.seq, last_seq, store.last_seq)
        self.sent = max(last_seq, store.last_discarded) if trim else store.last_discarded
        self.refused = None  # everything above ``sent`` goes again on this connection

    def refuse(self, seq: int) -> bool:
        """The broker refused ``seq`` for now (``txlog full``): it stays in the store and no
        ack discards it until it was sent again. Returns whether the store holds it."""
        if seq <= self.store.last_discarded or seq > self.seq:
            return False
        self.refused = seq if self.refused is None else min(self.refused, seq)
        return True

    def confirmed(self, seq: int) -> int:
        """What an ack saying ``seq`` is persisted (or replicated) may discard: never a
        refused publish not sent again, nor anything after it."""
        refused = self.refused
        return seq if refused is None else min(seq, refused - 1)

    def resend_refused(self) -> int | None:
        """Send the store again from the lowest refused sequence, in order, on the current
        connection; returns that sequence (None: nothing was refused)."""
        refused = self.refused
        if refused is None:
            return None
        self.refused = None
        self.sent = min(self.sent, refused - 1)
        self.kick()
        return refused

    def add(self, topic: str, body: bytes, extra: dict[str, Any] | None) -> int:
        """Number and store one publish; returns its sequence number."""
        self.seq += 1
        self.store.store(StoredPublish(self.seq, topic, body, extra))
        self.kick()
        return self.seq

    def add_many(self, topic: str, bodies: list[bytes]) -> int:
        """Number and store plain publishes to one topic; returns the last number."""
        store = self.store
        seq = self.seq
        for body in bodies:
            seq += 1
            store.store(StoredPublish(seq, topic, body))
        self.seq = seq
        self.kick()
        return seq

    def kick(self) -> None:
        """Send what is new, soon, if a resumed connection is there."""
        if (self._task is None or self._task.done()) and self._connected() is not None:
            self._task = asyncio.get_running_loop().create_task(self._loop())

    async def _loop(self) -> None:
        while True:
            c = self._connected()
            if c is None or c.closed.is_set() or self.store.last_seq <= self.sent:
                return
            try:
                await self.send(c)
            except (OSError, TimeoutError, ClientError):
                return  # the connection is gone: the reconnect handler resends

    async def send(self, client: Client) -> None:
        """Send on ``client`` what the store holds above :attr:`sent`, once it is written.

        Raises:
            StoreIOError: the store failed: nothing is sent until it recovers.
        """
        store = self.store
        upto = store.last_seq
        if upto <= self.sent:
            return
        await store.sync()
        if client is not self._latest() or client.closed.is_set():
            return
        entries = store.entries_after(self.sent, upto)
        i = 0
        while i < len(entries):
            e = entries[i]
            if e.extra is None:
                # a run of plain publishes to one topic with consecutive numbers: one pass
                j = i + 1
                while (j < len(entries) and entries[j].extra is None
                       and entries[j].topic == e.topic and entries[j].seq == entries[j - 1].seq + 1):  # fmt: skip
                    j += 1
                client.seq = e.seq - 1
                client.publish_many(e.topic, [x.body for x in entries[i:j]], persisted=True)
                i = j
                continue
            x = e.extra
            if x.get("delta"):
                client.delta_publish(e.topic, e.body, sow_key=x.get("k"), expiration=x.get("e"),
                                     persisted=True, seq=e.seq, correlation_id=x.get("x"))  # fmt: skip
            else:
                client.publish(e.topic, e.body, seq=e.seq, persisted=True, sow_key=x.get("k"),
                               expiration=x.get("e"), correlation_id=x.get("x"),
                               options=x.get("o"))  # fmt: skip
            i += 1
        self.sent = max(self.sent, upto)

    async def stop(self) -> None:
        task = self._task
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


__all__ = ["PublishSender"]
