"""One queue as a pure state machine: messages, leases, acks, fairness, barriers.

No I/O, no clock of its own: every call that depends on time takes ``now_us`` (the
injected clock's wall time in microseconds), and the one random choice (proportional
fairness) uses the ``random.Random`` it is given. The service (server/queues/service.py)
feeds it what the publish pipeline appends and what consumers send, logs what it removes
and sends what it delivers; a hypothesis state-machine test runs it against a small
oracle (tests/unit/queues/test_machine.py).

A message is in exactly one of three states: *ready* (waiting for a consumer), *leased*
(delivered to one consumer, whose lease ends at ``lease_until_us``) or gone (removed: acked,
expired, rejected, past ``MaxDeliveries`` or ``MaxCancels``, or delivered under
at-most-once).

- **Order**: ready messages go out by priority (higher first), then in log order.
- **Barrier**: a message the ``BarrierExpression`` matched is delivered only when no
  message ahead of it in log order is still in the queue (ready or leased); messages behind
  it are not held up.
- **Backlog**: a consumer holds at most ``backlog`` leases (the smaller of its
  ``max_backlog`` and the queue's ``MaxPerSubscriptionBacklog``); at-most-once delivery
  takes no lease and is not limited by it, but a consumer whose ``backlog`` is 0 gets
  nothing (the service holds consumers whose connection is full that way).
- **Fairness** among consumers with room that accept a message (their filter matches):
  ``fast`` the first in subscription order, ``round-robin`` the one given a message least
  recently (so filters that send some messages to some consumers only do not skew it),
  ``proportional`` a random one weighted by its free backlog.
- **Leasing**: an ack is taken from the consumer that holds the lease; under ``sublet``
  also from the last holder of a lease that ran out, as long as nobody else leased the
  message since; under ``strict`` a lease that ran out cannot be acked any more.
"""

from __future__ import annotations

import random
from bisect import bisect_right
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from typing import Final, Literal, NamedTuple

from spool.server.queues.runheap import RunHeap

__all__ = [
    "ACKED",
    "CANCEL_LIMIT",
    "DELIVERED",
    "DELIVERY_LIMIT",
    "EXPIRED",
    "REJECTED",
    "AckResult",
    "Consumer",
    "QueueDelivery",
    "QueueMachine",
    "QueuePolicy",
    "QueuedMessage",
    "Removal",
]

Fairness = Literal["proportional", "round-robin", "fast"]
Leasing = Literal["sublet", "strict"]
Semantics = Literal["at-least-once", "at-most-once"]
RemovalReason = Literal[
    "acked", "expired", "max_deliveries", "max_cancels", "rejected", "delivered", "elsewhere"
]

ACKED: Final = "acked"
EXPIRED: Final = "expired"
DELIVERY_LIMIT: Final = "max_deliveries"
CANCEL_LIMIT: Final = "max_cancels"
#: the consumer refused the message (``reject``): it is not to be delivered again
REJECTED: Final = "rejected"
#: at-most-once: a message leaves the queue when it is delivered
DELIVERED: Final = "delivered"
#: a replicated queue's message another instance removed (acked, delivered, ...)
ELSEWHERE: Final = "elsewhere"


@dataclass(frozen=True, slots=True)
class QueuePolicy:
    """How one queue delivers (its configuration, already validated).

    Attributes:
        semantics: ``at-least-once`` (leases, acks) or ``at-most-once``.
        lease_period_us: how long a consumer holds a delivered message before it goes back
            to the queue.
        max_backlog: ``MaxPerSubscriptionBacklog``: most leases one subscription holds.
        max_deliveries: a message delivered this many times whose lease ends unacked
            leaves the queue (0: no limit).
        max_cancels: a message cancelled this many times leaves the queue (0: no limit).
        fairness: how a message picks among consumers with room.
        leasing: ``sublet`` or ``strict`` (module docstring).
        expiration_us: how long a message stays in the queue (0: for ever).
    """

    semantics: Semantics = "at-least-once"
    lease_period_us: int = 300_000_000
    max_backlog: int = 1
    max_deliveries: int = 0
    max_cancels: int = 0
    fairness: Fairness = "proportional"
    leasing: Leasing = "sublet"
    expiration_us: int = 0


@dataclass(slots=True, eq=False)
class QueuedMessage:
    """One message of the queue.

    Attributes:
        seq: its local log sequence (the queue's order and its id in ``QUEUE_ACK`` records).
        bookmark: its bookmark text (``H|S|``): how consumers name it in acks.
        topic: the underlying topic it was published to.
        body: its body.
        enqueued_us: when it was recorded.
        priority: higher goes first.
        barrier: the ``BarrierExpression`` matched it.
        expires_us: when it leaves the queue unread (0: never).
        deliveries: how many times it was delivered.
        cancels: how many times a consumer gave it back.
        holder: the consumer holding its lease, or None.
        last_holder: the consumer that held its last lease (``sublet`` acks).
        lease_until_us: when the current lease ends.
        lease_no: bumped at every lease, so a stale timer entry is recognised.
        corr_id: the publisher's correlation id ("" when none), delivered as ``x``.
    """

    seq: int
    bookmark: str
    topic: str
    body: bytes
    enqueued_us: int
    priority: int = 0
    barrier: bool = False
    expires_us: int = 0
    deliveries: int = 0
    cancels: int = 0
    holder: Consumer | None = None
    last_holder: Consumer | None = None
    lease_until_us: int = 0
    lease_no: int = 0
    corr_id: str = ""


@dataclass(slots=True, eq=False)
class Consumer:
    """One queue subscription.

    Attributes:
        name: for listings and events (``client/sub_id``).
        backlog: most leases it holds at once (already the smaller of what it asked and
            the queue's limit).
        accepts: its filter over a message (None: every message).
        leased: the messages it holds, by seq.
        delivered: how many messages it was given.
        token: whatever the service ties to it (its connection and subscription).
    """

    name: str
    backlog: int
    accepts: Callable[[QueuedMessage], bool] | None = None
    leased: dict[int, QueuedMessage] = field(default_factory=dict)
    delivered: int = 0
    token: object = None
    #: when it was last given a message (the machine's delivery counter; round-robin)
    turn: int = 0

    @property
    def room(self) -> int:
        """Leases it may take now."""
        return self.backlog - len(self.leased)


class QueueDelivery(NamedTuple):
    """A message to send: to whom, which, its delivery number (1: first) and lease period."""

    consumer: Consumer
    message: QueuedMessage
    number: int
    lease_us: int


class Removal(NamedTuple):
    """A message that left the queue, and why."""

    message: QueuedMessage
    reason: RemovalReason


#: how far :meth:`QueueMachine.oldest_waiting` walks the log order before it takes the
#: smallest ready seq instead (past the leases of 65 consumers holding 1,000 each; a walk
#: of that length is ~2 ms, the ready set's minimum over 1,000,000 messages ~15 ms)
_WAITING_WALK: Final = 65_536

#: ``QueueDelivery`` / ``Removal`` built from a tuple without the generated ``__new__`` (which
#: is a Python-level function call per message, on the delivery hot path)
_make = tuple.__new__


class AckResult(NamedTuple):
    """What an ack, cancel or expire did: the messages removed, the ones given back, and
    the bookmarks it could not apply (unknown, or not leased to that consumer)."""

    removed: list[Removal]
    returned: list[QueuedMessage]
    refused: list[str]


class QueueMachine:
    """One queue's messages and leases. Owned by one event loop; no I/O.

    Args:
        name: the queue's name (listings).
        policy: how it delivers.
        rng: the random source of proportional fairness (tests inject a seeded one).
    """

    def __init__(self, name: str, policy: QueuePolicy, rng: random.Random | None = None) -> None:
        self.name = name
        self.policy = policy
        self._rng = rng if rng is not None else random.Random()
        #: every message still in the queue, by seq (insertion order is log order)
        self._messages: dict[int, QueuedMessage] = {}
        #: seqs in log order, the ones gone dropped lazily from the left: the oldest
        #: message in O(1) amortised (``next(iter(dict))`` walks every deleted slot at the
        #: front of a dict that is consumed first-in first-out, so it grows with the queue)
        self._order: deque[int] = deque()
        self._by_bookmark: dict[str, QueuedMessage] = {}
        #: ready messages: (-priority, seq) (a RunHeap: made ready in log order, they
        #: never reach its heap)
        self._ready: RunHeap[tuple[int, int]] = RunHeap()
        self._ready_set: set[int] = set()
        #: lease ends: (until_us, seq, lease_no)
        self._leases: RunHeap[tuple[int, int, int]] = RunHeap()
        #: message deadlines: (expires_us, seq)
        self._deadlines: RunHeap[tuple[int, int]] = RunHeap()
        self._consumers: list[Consumer] = []
        self._turns = 0
        #: the latest time the machine was told (tick, dispatch)
        self._now_us = 0
        #: replicated queues: whether this instance may deliver a message now (its
        #: ownership, server/queues/ownership.py); a message it may not stays ready here,
        #: parked out of the ready heap (a dispatch does not walk it again) until
        #: :meth:`unpark` says this instance owns it now
        self.gate: Callable[[QueuedMessage], bool] | None = None
        self._parked: set[int] = set()
        #: messages this instance may not deliver yet, whoever owns them: those with a
        #: seq up to :attr:`hold_through` (0: none), and the seqs of :attr:`_held`
        #: (messages that came back from a range this instance lost); set by
        #: :meth:`hold`, server/queues/hold.py says why
        self.hold_through = 0
        self._held: set[int] = set()
        #: ready entries a dispatch met while they were held: back in the ready heap when
        #: the hold ends (:meth:`hold`)
        self._withheld: list[tuple[int, int]] = []
        self.enqueued = 0
        self.removed: dict[str, int] = {}

    # -- views --------------------------------------------------------------------------

    @property
    def depth(self) -> int:
        """Messages in the queue (ready and leased)."""
        return len(self._messages)

    @property
    def ready(self) -> int:
        """Messages waiting for a consumer."""
        return len(self._ready_set)

    @property
    def leased(self) -> int:
        """Messages delivered and not acked yet."""
        return len(self._messages) - len(self._ready_set)

    @property
    def consumers(self) -> list[Consumer]:
        """The subscriptions, in subscription order."""
        return list(self._consumers)

    def oldest_seq(self) -> int:
        """The seq of the oldest message still in the queue (0: empty)."""
        order = self._order
        messages = self._messages
        while order and order[0] not in messages:
            order.popleft()
        return order[0] if order else 0

    def oldest_lease_us(self) -> int:
        """When the oldest current lease began (0: none). Every lease of a queue lasts
        one lease period, so the oldest is the first to end: the head of the lease heap
        (its stale entries dropped first), not a walk over the messages."""
        self._trim()
        if not self._leases:
            return 0
        return self._leases.peek()[0] - self.policy.lease_period_us

    def oldest_waiting(self) -> QueuedMessage | None:
        """The first message in log order that waits for a consumer (ready: not leased;
        one owned by another instance counts). Usually found within the leased messages
        ahead of it (what the consumers hold: the messages gone from the front are
        dropped first); past :data:`_WAITING_WALK` places of the order, the smallest ready
        seq is taken in one C-speed pass over the ready set instead."""
        ready = self._ready_set
        if not ready:
            return None
        self.oldest_seq()  # drops the seqs gone from the front of the order
        for seq in islice(self._order, _WAITING_WALK):
            if seq in ready:
                return self._messages.get(seq)
        return self._messages.get(min(ready))

    def page_after(self, seq: int, limit: int, scan: int) -> tuple[list[QueuedMessage], int]:
        """At most ``limit`` messages after ``seq`` in log order, looking at no more than
        ``scan`` places of the order (ones gone are skipped), and the seq to continue
        after (0: the end was reached). A bisection finds where to start: the order is
        in ascending seq (messages enter in log order), so a page deep in a long queue
        costs the skip in C, not a walk in Python."""
        order = self._order
        messages = self._messages
        out: list[QueuedMessage] = []
        start = bisect_right(order, seq)
        last = seq
        for looked, s in enumerate(islice(order, start, None)):
            if len(out) >= limit or looked >= scan:
                return out, last
            last = s
            m = messages.get(s)
            if m is not None:
                out.append(m)
        return out, 0

    def oldest_enqueued_us(self) -> int:
        """When the oldest message in the queue was recorded (0: empty)."""
        oldest = self.oldest_seq()
        return self._messages[oldest].enqueued_us if oldest else 0

    def get(self, bookmark: str) -> QueuedMessage | None:
        return self._by_bookmark.get(bookmark)

    def messages(self) -> Iterator[QueuedMessage]:
        """Every message still in the queue, in log order."""
        return iter(self._messages.values())

    # -- input --------------------------------------------------------------------------

    def add(self, message: QueuedMessage) -> None:
        """A message entered the queue (appended to its underlying topic, or recovered).

        ``expires_us`` is set from the policy when the message has none of its own.
        """
        self.add_many((message,))

    def add_many(self, messages: Iterable[QueuedMessage], gated: bool = False) -> None:
        """:meth:`add` for each of ``messages`` in turn (a run of publishes enters in one
        call: the attribute lookups ``add`` would repeat per message are done once).

        ``gated``: the messages are likely owned by another instance (replicated here):
        the :attr:`gate` is asked now and the ones it holds back are parked at once,
        instead of going through the ready heap for :meth:`dispatch` to park them."""
        known = self._messages
        order = self._order.append
        by_bookmark = self._by_bookmark
        ready_add = self._ready_set.add
        gate = self.gate if gated else None
        park = self._parked.add
        expiration = self.policy.expiration_us
        keys: list[tuple[int, int]] = []
        ready = keys.append
        n = 0
        for message in messages:
            seq = message.seq
            if seq in known:
                continue
            n += 1
            if not message.expires_us and expiration:
                message.expires_us = message.enqueued_us + expiration
            known[seq] = message
            order(seq)
            by_bookmark[message.bookmark] = message
            if message.expires_us:
                self._deadlines.push((message.expires_us, seq))
            # _make_ready, inlined: a new message cannot be parked yet
            ready_add(seq)
            if gate is not None and not gate(message):
                park(seq)  # what dispatch would do when it reached it
            else:
                ready((-message.priority, seq))
        self._ready.extend(keys)
        self.enqueued += n

    def forget(self, seqs: Iterable[int]) -> None:
        """Recovery: messages a ``QUEUE_ACK`` record says left the queue."""
        for seq in seqs:
            m = self._messages.get(seq)
            if m is not None:
                self._drop(m)

    def drop(self, bookmarks: Iterable[str], reason: RemovalReason) -> list[QueuedMessage]:
        """Replicated queues: messages another instance says left the queue (acked
        there); a lease held here on one of them ends (the documented duplicate risk of
        a proxied transfer). Returns the messages dropped."""
        out: list[QueuedMessage] = []
        for bm in bookmarks:
            m = self._by_bookmark.get(bm)
            if m is not None:
                self._drop(m)
                self._count(Removal(m, reason))
                out.append(m)
        return out

    def unpark(self, bookmark: str) -> None:
        """A message the gate held back may be deliverable now (this instance came to
        own it): offered again at the next :meth:`dispatch`."""
        m = self._by_bookmark.get(bookmark)
        if m is not None and m.seq in self._parked:
            self._parked.discard(m.seq)
            self._ready.push((-m.priority, m.seq))

    @property
    def parked(self) -> int:
        """Ready messages the gate holds back (owned by another instance)."""
        return len(self._parked)

    def hold(self, through: int) -> None:
        """Hold back (never dispatch) the messages with a seq up to ``through`` (0: none)
        until the hold ends; a smaller ``through`` than before frees the messages
        between."""
        narrower = through < self.hold_through
        self.hold_through = through
        if narrower:
            self._unwithhold()

    def hold_seqs(self, seqs: Iterable[int]) -> None:
        """Hold back these messages too, until :meth:`release_hold`."""
        self._held.update(seqs)

    def release_hold(self) -> None:
        """Every held message may go again (the hold ended)."""
        self.hold_through = 0
        self._held.clear()
        self._unwithhold()

    def _unwithhold(self) -> None:
        through = self.hold_through
        held = self._held
        keep: list[tuple[int, int]] = []
        ready = self._ready
        for entry in self._withheld:
            seq = entry[1]
            if seq <= through or seq in held:
                keep.append(entry)
            elif seq in self._ready_set:
                ready.push(entry)
        self._withheld = keep

    def is_held(self, seq: int) -> bool:
        """Whether the hold keeps message ``seq`` back (:meth:`hold`)."""
        return seq <= self.hold_through or seq in self._held

    @property
    def holding(self) -> bool:
        """Whether a hold is on (:meth:`hold`)."""
        return bool(self.hold_through or self._held)

    def held(self) -> int:
        """Ready messages the hold keeps back (a pass over the ready set while a hold
        is on; 0 at once otherwise)."""
        through = self.hold_through
        held = self._held
        if not through and not held:
            return 0
        return sum(1 for seq in self._ready_set if seq <= through or seq in held)

    def subscribe(self, consumer: Consumer) -> None:
        """A consumer joins (the next :meth:`dispatch` may give it messages)."""
        self._consumers.append(consumer)

    def unsubscribe(self, consumer: Consumer) -> list[Removal]:
        """A consumer leaves (unsubscribe, disconnect): its leases end now; each message
        goes back to the queue, or leaves it when it reached ``MaxDeliveries``."""
        if consumer in self._consumers:
            self._consumers.remove(consumer)
        removed: list[Removal] = []
        for m in list(consumer.leased.values()):
            self._end_lease(m, removed)
        return removed

    # -- acks ---------------------------------------------------------------------------

    def _held_by(self, consumer: Consumer, m: QueuedMessage) -> bool:
        if m.holder is consumer:
            return True
        return self.policy.leasing == "sublet" and m.holder is None and m.last_holder is consumer

    def ack(self, consumer: Consumer, bookmarks: Iterable[str]) -> AckResult:
        """The consumer processed these messages: they leave the queue."""
        return self._settle(consumer, bookmarks, ACKED)

    def expire(self, consumer: Consumer, bookmarks: Iterable[str]) -> AckResult:
        """The consumer says these messages are not to be processed (``expire``)."""
        return self._settle(consumer, bookmarks, EXPIRED)

    def reject(self, consumer: Consumer, bookmarks: Iterable[str]) -> AckResult:
        """The consumer refuses these messages (``reject``): they leave the queue, as
        dead letters where the queue has a dead-letter topic."""
        return self._settle(consumer, bookmarks, REJECTED)

    def cancel(self, consumer: Consumer, bookmarks: Iterable[str]) -> AckResult:
        """The consumer gives these back (``cancel``): ready again, unless the message
        reached ``MaxCancels``."""
        result = AckResult([], [], [])
        limit = self.policy.max_cancels
        for bm in bookmarks:
            m = self._by_bookmark.get(bm)
            if m is None or m.holder is not consumer:
                result.refused.append(bm)
                continue
            self._release(m)
            m.cancels += 1
            if limit and m.cancels >= limit:
                self._drop(m)
                result.removed.append(self._count(Removal(m, CANCEL_LIMIT)))
            else:
                self._make_ready(m)
                result.returned.append(m)
        return result

    def _settle(
        self, consumer: Consumer, bookmarks: Iterable[str], reason: RemovalReason
    ) -> AckResult:
        result = AckResult([], [], [])
        removed = result.removed
        by_bookmark = self._by_bookmark
        for bm in bookmarks:
            m = by_bookmark.get(bm)
            if m is None or not (m.holder is consumer or self._held_by(consumer, m)):
                result.refused.append(bm)
                continue
            self._drop(m)
            removed.append(_make(Removal, (m, reason)))
        if removed:
            self.removed[reason] = self.removed.get(reason, 0) + len(removed)
        return result

    def remove_where(self, matches: Callable[[QueuedMessage], bool]) -> list[Removal]:
        """Remove every message in the queue that ``matches`` (``sow_delete`` with a
        filter), leased or not."""
        gone = [m for m in self._messages.values() if matches(m)]
        for m in gone:
            self._drop(m)
        return [self._count(Removal(m, ACKED)) for m in gone]

    # -- time ---------------------------------------------------------------------------

    def next_deadline_us(self) -> int:
        """When :meth:`tick` next has something to do (0: nothing pending)."""
        soon = 0
        self._trim()
        if self._leases:
            soon = self._leases.peek()[0]
        if self._deadlines:
            d = self._deadlines.peek()[0]
            soon = d if not soon or d < soon else soon
        return soon

    def _trim(self) -> None:
        leases = self._leases
        while leases:
            _, seq, no = leases.peek()
            m = self._messages.get(seq)
            if m is not None and m.holder is not None and m.lease_no == no:
                break
            leases.pop()
        # a leased message's deadline is checked when its lease ends (and pushed again if
        # it goes back to the queue): left here, a passed one would look due for ever
        deadlines = self._deadlines
        while deadlines:
            m = self._messages.get(deadlines.peek()[1])
            if m is not None and m.holder is None:
                break
            deadlines.pop()

    def tick(self, now_us: int) -> list[Removal]:
        """Time moved to ``now_us``: leases that ended give their message back (or remove
        it past ``MaxDeliveries``); messages past their expiration leave the queue (a
        leased one when its lease ends)."""
        removed: list[Removal] = []
        self._now_us = now_us
        leases = self._leases
        while leases and leases.peek()[0] <= now_us:
            _, seq, no = leases.pop()
            m = self._messages.get(seq)
            if m is None or m.holder is None or m.lease_no != no:
                continue
            self._end_lease(m, removed)
        deadlines = self._deadlines
        while deadlines and deadlines.peek()[0] <= now_us:
            _, seq = deadlines.pop()
            m = self._messages.get(seq)
            if m is None or m.holder is not None:
                continue  # gone; or leased: it leaves when its lease ends (_end_lease)
            self._drop(m)
            removed.append(self._count(Removal(m, EXPIRED)))
        return removed

    def _end_lease(self, m: QueuedMessage, removed: list[Removal]) -> None:
        """A lease ended unacked (expiry, disconnect)."""
        self._release(m)
        limit = self.policy.max_deliveries
        if limit and m.deliveries >= limit:
            self._drop(m)
            removed.append(self._count(Removal(m, DELIVERY_LIMIT)))
        elif m.expires_us and m.expires_us <= self._now_us:
            self._drop(m)
            removed.append(self._count(Removal(m, EXPIRED)))
        else:
            self._make_ready(m)
            if m.expires_us:
                self._deadlines.push((m.expires_us, m.seq))

    # -- delivery -----------------------------------------------------------------------

    def dispatch(self, now_us: int, limit: int = 1 << 30) -> list[QueueDelivery]:
        """Give ready messages to consumers with room, in priority and log order, while
        any consumer can take one (at most ``limit`` deliveries).

        A message no consumer with room accepts (filters), and a barrier with messages
        ahead of it, stay ready; the ones behind them go on.
        """
        out: list[QueueDelivery] = []
        self._now_us = max(self._now_us, now_us)
        if not self._ready or not self._consumers:
            return out
        at_most_once = self.policy.semantics == "at-most-once"
        lease_us = 0 if at_most_once else self.policy.lease_period_us
        held: list[tuple[int, int]] = []
        gate = self.gate
        ready = self._ready
        ready_set = self._ready_set
        messages = self._messages
        leases = self._leases
        # leases the consumers may still take (at-most-once: consumers not held), kept
        # as a count instead of asking every consumer at every message
        if at_most_once:
            free = sum(1 for c in self._consumers if c.backlog > 0)
        else:
            free = sum(c.room for c in self._consumers if c.room > 0)
        # proportional fairness among consumers without a filter (the usual case): the
        # candidates and their weights (free backlog) are kept here as leases are taken
        # instead of being rebuilt from every consumer at every message (O(consumers) per
        # message in _choose); the same picks as _choose for the same numbers. Fast twin
        # of _choose's proportional pick: tests/unit/queues/test_machine.py checks them
        # against each other (same picks, same random numbers drawn)
        weighed: list[Consumer] | None = None
        weights: list[int] = []
        if (
            not at_most_once
            and self.policy.fairness == "proportional"
            and all(c.accepts is None for c in self._consumers)
        ):
            weighed = [c for c in self._consumers if c.room > 0]
            weights = [c.room for c in weighed]
        rng = self._rng
        through = self.hold_through
        holding = self._held if through or self._held else None
        # the entries left to look at: a count, not a call of ``RunHeap.__bool__`` per
        # message (held entries go back only after the loop)
        left = len(ready)
        while left and len(out) < limit and free > 0:
            left -= 1
            entry = ready.pop()
            seq = entry[1]
            m = messages.get(seq)
            if m is None or seq not in ready_set:
                continue
            if holding is not None and (seq <= through or seq in holding):
                self._withheld.append(entry)  # until the hold ends (_unwithhold)
                continue
            if m.barrier and self.oldest_seq() != seq:
                held.append(entry)
                continue
            if gate is not None and not gate(m):
                self._parked.add(seq)  # owned by another instance: until unpark()
                continue
            if weighed is not None:
                i = 0
                if len(weighed) > 1:
                    point = rng.random() * free
                    for w in weights:
                        point -= w
                        if point < 0:
                            break
                        i += 1
                    else:
                        i -= 1
                consumer: Consumer | None = weighed[i]
                if weights[i] > 1:
                    weights[i] -= 1
                else:
                    del weighed[i], weights[i]
            else:
                consumer = self._choose(m, at_most_once)
            if consumer is None:
                held.append(entry)
                continue
            ready_set.discard(seq)
            m.deliveries += 1
            consumer.delivered += 1
            out.append(_make(QueueDelivery, (consumer, m, m.deliveries, lease_us)))
            if at_most_once:
                self._drop(m)
                self._count(Removal(m, DELIVERED))
                continue
            free -= 1
            m.holder = consumer
            m.last_holder = consumer
            m.lease_no += 1
            m.lease_until_us = now_us + lease_us
            consumer.leased[seq] = m
            leases.push((m.lease_until_us, seq, m.lease_no))
        for entry in held:
            ready.push(entry)
        return out

    def _choose(self, m: QueuedMessage, unlimited: bool) -> Consumer | None:
        """The consumer with room that gets ``m`` under the queue's fairness (None: no
        consumer with room accepts it; ``unlimited``: at-most-once, only held consumers
        are skipped).

        Readable twin of the proportional pick inlined in :meth:`dispatch` for consumers
        without a filter: tests/unit/queues/test_machine.py checks them against each
        other."""
        consumers = self._consumers
        fairness = self.policy.fairness
        if fairness == "proportional" and not unlimited:
            weights: list[int] = []
            candidates: list[Consumer] = []
            for c in consumers:
                room = c.room
                if room > 0 and (c.accepts is None or c.accepts(m)):
                    candidates.append(c)
                    weights.append(room)
            if not candidates:
                return None
            if len(candidates) == 1:
                return candidates[0]
            # a weighted pick without random.choices' per-call setup (paid per message)
            point = self._rng.random() * sum(weights)
            for c, w in zip(candidates, weights, strict=True):
                point -= w
                if point < 0:
                    return c
            return candidates[-1]
        chosen: Consumer | None = None
        for c in consumers:
            # at-most-once takes no lease: a consumer is limited only when held (backlog 0)
            has_room = c.backlog > 0 if unlimited else c.room > 0
            if has_room and (c.accepts is None or c.accepts(m)):
                if fairness == "fast":
                    return c
                if chosen is None or c.turn < chosen.turn:
                    chosen = c
        if chosen is not None:
            self._turns += 1
            chosen.turn = self._turns
        return chosen

    # -- internals ----------------------------------------------------------------------

    def _make_ready(self, m: QueuedMessage) -> None:
        if self._parked:
            self._parked.discard(m.seq)
        self._ready_set.add(m.seq)
        self._ready.push((-m.priority, m.seq))

    def _release(self, m: QueuedMessage) -> None:
        holder = m.holder
        if holder is not None:
            holder.leased.pop(m.seq, None)
            m.holder = None

    def _drop(self, m: QueuedMessage) -> None:
        seq = m.seq
        holder = m.holder  # _release, inlined (once per message that leaves)
        if holder is not None:
            holder.leased.pop(seq, None)
            m.holder = None
        self._messages.pop(seq, None)
        self._by_bookmark.pop(m.bookmark, None)
        self._ready_set.discard(seq)
        if self._parked:
            self._parked.discard(seq)

    def count_removed(self, reason: RemovalReason, n: int) -> None:
        """``n`` messages left the queue without having entered this machine (a bounded
        queue's inactive ones, removed by filter while they waited in the log): counted
        with the others in :attr:`removed`."""
        if n:
            self.removed[reason] = self.removed.get(reason, 0) + n

    def _count(self, removal: Removal) -> Removal:
        self.removed[removal.reason] = self.removed.get(removal.reason, 0) + 1
        return removal
