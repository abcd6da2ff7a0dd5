"""The replicated half of an instance's queues: ownership changes on the links.

:class:`Transfers` drives the ownership (server/queues/ownership.py) of every replicated
queue of an instance (a ``Queue`` or ``GroupLocalQueue`` on an instance that replicates;
docs/queues.md "Replicated queues"); :class:`~spool.server.queues.service.QueueService` owns it
and calls it from its timer and its admin surface:

- the link state: an instance with a live replication link into this one is online,
  every other owner is offline (:meth:`Transfers.tick`);
- transfer requests: every :data:`REQUEST_INTERVAL` the timer asks for messages owned
  elsewhere that waited longer than the typical publish-to-ack time, at most as many as
  the consumers here have room for (:meth:`Transfers.tick`);
- proxied transfer (REST, actions): this instance takes over what offline owners own
  (:meth:`Transfers.set_proxied`), and hands it back when the owner is online again
  (events ``proxied_transfer_handed_back``);
- acks and grants kept for messages not seen yet beyond the ownership's cap are
  reported (event ``queue_early_changes_dropped``);
- ownership changes this instance made are logged as ``QUEUE_TRANSFER`` / ``QUEUE_ACK``
  records with the broker's publisher identity, so replication sends them
  (:meth:`Transfers.send`).

It is kept apart from the service so the rules of the replicated part (which move as the
ownership rules grow) do not sit in the command / delivery code of every queue.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Final

from spool.server.clock import Clock, time_us
from spool.server.protocol.errors import ProtocolFailure
from spool.server.queues.errors import ProxiedTransferUnavailable, QueueNotFound
from spool.server.queues.ownership import Grant, OwnershipAck, Request, Wire
from spool.server.queues.records import encode_ack_bookmarks, encode_transfers
from spool.server.queues.stage import QueueRuntime
from spool.server.stats.source import EventSink
from spool.server.txlog.format.record import RecordKind

__all__ = ["DEFAULT_TYPICAL_US", "REQUEST_INTERVAL", "Append", "Transfers"]

#: replicated queues: how often the timer looks for messages to ask for and for owners
#: that went offline (seconds)
REQUEST_INTERVAL: Final = 0.05
#: the publish-to-ack time assumed before the first ack was measured (microseconds)
DEFAULT_TYPICAL_US: Final = 100_000

#: appends one record of a queue's events to the log (the service's): the failure, if
#: the log refused it
Append = Callable[[QueueRuntime, RecordKind, bytes, str], ProtocolFailure | None]


class Transfers:
    """The ownership traffic of an instance's replicated queues. Owned by the event loop.

    Args:
        queues: every queue of the instance (the replicated ones are taken).
        append: logs one record of a queue's events (and so replicates it).
        kick: the queue changed: deliver (and send its outgoing changes) this turn.
        events: the event log.
        clock: the time of proxied takeovers and hand-backs.
    """

    def __init__(
        self,
        queues: Iterable[QueueRuntime],
        append: Append,
        kick: Callable[[QueueRuntime], None],
        events: EventSink,
        clock: Clock,
    ) -> None:
        self._by_name = {q.config.name: q for q in queues}
        self.queues: list[QueueRuntime] = [
            q for q in self._by_name.values() if q.ownership is not None
        ]
        self._append = append
        self._kick = kick
        self._events = events
        self._clock = clock
        #: the instances with a live link into this one (set by the broker when it
        #: replicates): every other owner is offline
        self.peers: Callable[[], Iterable[str]] | None = None
        self._known_peers: set[str] = set()
        #: early changes dropped by each queue's cap, as last reported
        self._dropped: dict[str, int] = {}
        #: ownership changes the log refused, per queue: logged again at the next pass
        #: (decided here, so they must reach the others: a grant kept only in memory
        #: would leave the message owned by nobody that knows it)
        self._unlogged: dict[str, list[Wire]] = {}
        self._refusing: set[str] = set()
        self.log_failures = 0

    def __bool__(self) -> bool:
        return bool(self.queues)

    @property
    def interval_us(self) -> int:
        return int(REQUEST_INTERVAL * 1_000_000)

    # -- the log ------------------------------------------------------------------------

    def send(self, queue: QueueRuntime, changes: Sequence[Wire]) -> None:
        """Log (and so replicate) ownership changes this instance made."""
        if not changes:
            return
        transfers = [c for c in changes if type(c) is Request or type(c) is Grant]
        acks = [c.bookmark for c in changes if type(c) is OwnershipAck]
        failure = None
        if transfers:
            failure = self._append(queue, RecordKind.QUEUE_TRANSFER,
                                   encode_transfers(transfers), "")  # fmt: skip
            if failure is None:
                queue.logged(transfers)  # counted as logged: the counters follow the log
                self._refusing.discard(queue.config.name)
        if acks:
            failure = self._append(queue, RecordKind.QUEUE_ACK, encode_ack_bookmarks(acks),
                                   "acked") or failure  # fmt: skip
        if failure is not None:
            self.log_failures += 1
            if transfers:
                self._unlogged.setdefault(queue.config.name, []).extend(transfers)
                if queue.config.name in self._refusing:
                    return  # still refused: reported once, until it is logged
                self._refusing.add(queue.config.name)
            self._events.emit("error", "queue", "queue_transfer_unlogged",
                              queue=queue.config.name, reason=str(failure))  # fmt: skip

    # -- the timer ----------------------------------------------------------------------

    def tick(self, now: int) -> None:
        """Owners gone offline (or back), and requests for messages owned elsewhere that
        waited longer than the typical publish-to-ack time, at most as many as consumers
        here have room for."""
        for queue in self.queues:
            own = queue.ownership
            assert own is not None
            changes = self._offline_changes(queue, now)
            unlogged = self._unlogged.pop(queue.config.name, None)
            if unlogged:
                changes.extend(unlogged)  # the log refused them: again, in order
            # requests held here that can be answered now (a lease ended; the first
            # pass after start-up answers what the log read back)
            changes.extend(own.answer(now))
            if own.returning():
                changes.extend(self._handed_back(queue, own.hand_back(now)))
            spare = sum(c.room for c in queue.machine.consumers if c.room > 0)
            if spare:
                changes.extend(own.want(now, spare, queue.typical_us or DEFAULT_TYPICAL_US))
            if own.early_dropped > self._dropped.get(queue.config.name, 0):
                self._events.emit(
                    "warning", "queue", "queue_early_changes_dropped", queue=queue.config.name,
                    dropped=own.early_dropped - self._dropped.get(queue.config.name, 0),
                    limit=own.max_early,
                )  # fmt: skip
                self._dropped[queue.config.name] = own.early_dropped
            if changes:
                queue.outgoing.extend(changes)
                self._kick(queue)

    def _offline_changes(self, queue: QueueRuntime, now: int) -> list[Wire]:
        """Tell ``queue``'s ownership which owners have no live link into this instance
        (offline) and which came back (what was taken from those by proxy is handed
        back)."""
        own = queue.ownership
        assert own is not None
        online = set(self.peers()) if self.peers is not None else set()
        self._known_peers |= online
        changes: list[Wire] = []
        for inst in (own.owners() | self._known_peers) - {queue.instance}:
            offline = inst not in online
            if offline != own.is_offline(inst):
                found = own.owner_offline(inst, offline, now)
                changes.extend(found if offline else self._handed_back(queue, found))
        return changes

    def _handed_back(self, queue: QueueRuntime, grants: list[Wire]) -> list[Wire]:
        """Report a hand-back (messages taken by proxy returned to their owner)."""
        if grants:
            owners = sorted({g.owner for g in grants if type(g) is Grant})
            self._events.emit("info", "queue", "proxied_transfer_handed_back",
                              queue=queue.config.name, messages=len(grants),
                              owners=owners)  # fmt: skip
        return grants

    # -- admin --------------------------------------------------------------------------

    def set_proxied(self, name: str, enabled: bool, by: str | None = None) -> int:
        """``enable_proxied_transfer`` / ``disable_proxied_transfer``: while enabled,
        this instance takes over the messages of owners that are offline (now and when
        one goes offline later). Returns how many messages it took over now.

        Raises:
            QueueNotFound: no queue of that name.
            ProxiedTransferUnavailable: the queue is not replicated (a ``LocalQueue``, or
                this instance does not replicate): every message is owned here.
        """
        queue = self._by_name.get(name)
        if queue is None:
            raise QueueNotFound(name)
        own = queue.ownership
        if own is None:
            raise ProxiedTransferUnavailable(name)
        changes = self._offline_changes(queue, time_us(self._clock))
        changes.extend(own.set_proxied(enabled))
        taken = sum(1 for c in changes if type(c) is Grant and c.proxied)
        if changes:
            queue.outgoing.extend(changes)
            self._kick(queue)
        self._events.emit(
            "warning" if enabled else "info", "queue",
            "proxied_transfer_enabled" if enabled else "proxied_transfer_disabled",
            queue=name, user=by, taken_over=taken,
        )  # fmt: skip
        return taken
