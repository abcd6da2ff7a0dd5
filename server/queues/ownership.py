"""Who may deliver each message of a replicated queue: ownership, transfers, proxied
transfer and its hand-back.

A pure state machine per instance and queue (no I/O, time passed in), wired by
server/queues/stage.py (replicated ``QUEUE_ACK`` / ``QUEUE_TRANSFER`` records in, the
delivery gate) and server/queues/transfers.py (requests from the timer, link state,
proxied transfer). It keeps the public AMPS model of replicated queues: one owner per
message, requests granted by the owner only, every change ordered by epoch (then instance
name) so the copies converge, decisions logged before anyone relies on them (a replay
decides nothing), and changes that arrive before their message kept until it can no
longer arrive. tests/unit/queues/test_ownership.py runs several of them over a fake link.
See docs/queues.md "Replicated queues" and "The protocol's invariants".
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final, NamedTuple

from spool.server.queues.runheap import RunHeap

__all__ = [
    "MAX_EARLY",
    "MAX_REASK_US",
    "REASK_US",
    "Grant",
    "OwnerView",
    "Ownership",
    "OwnershipAck",
    "Request",
    "RequestState",
    "Wire",
]  # fmt: skip

#: most acks and grants kept for messages this copy has not seen yet (a safety net: the
#: position rule prunes them long before, unless a publisher stops for good)
MAX_EARLY: Final = 100_000
#: a request not answered yet is asked again after this long (µs), twice as long after
#: each further time, up to :data:`MAX_REASK_US` (the owner keeps what it was asked: the
#: repeat is a safety net for a request that could not reach it, not the way it is heard)
REASK_US: Final = 1_000_000
MAX_REASK_US: Final = 60_000_000


class Request(NamedTuple):
    """``requester`` asks ``owner`` for ``bookmark``, as owned at ``epoch``: a request
    that reaches an instance that is not that owner at that epoch (ownership moved since)
    is ignored, so a message is granted once per epoch, to the first asker."""

    bookmark: str
    requester: str
    owner: str
    epoch: int


class Grant(NamedTuple):
    """``bookmark`` is now owned by ``owner`` from ``epoch`` on (a granted request, a
    proxied takeover, or a hand-back; at epoch 0, a first-owner claim: the message was
    published on ``owner`` too, :meth:`Ownership.claim`)."""

    bookmark: str
    owner: str
    epoch: int
    proxied: bool = False


class OwnershipAck(NamedTuple):
    """``bookmark`` was processed: every copy drops it."""

    bookmark: str


Wire = Request | Grant | OwnershipAck


class OwnerView(NamedTuple):
    """What this copy knows of one message's owner (read-only, for the message browser).

    Attributes:
        owner: the instance that may deliver it.
        epoch: the epoch of that ownership.
        granted_to: the instance this owner granted it to (the grant is on its way).
        owner_offline: the owner has no live link into this instance.
    """

    owner: str
    epoch: int
    granted_to: str | None
    owner_offline: bool


class RequestState(NamedTuple):
    """What one copy knows of the transfer requests of one message (read-only, for the
    admin surface: why a message is not delivered here).

    ``asked``: this instance asked ``owner`` for it at ``epoch``, first at ``since_us``,
    ``times`` times so far, and has no answer yet. ``waiting``: this instance owns it and
    holds ``requester``'s request (asked at ``epoch``, received at ``since_us``) until
    the lease of a consumer here ends."""

    bookmark: str
    asked: bool
    owner: str
    epoch: int
    since_us: int
    times: int
    requester: str | None = None


@dataclass(slots=True)
class _Entry:
    owner: str
    epoch: int
    arrived_us: int
    leased: bool = False  # set by :meth:`Ownership.leased` (the pure tests; else ``busy``)
    asked_epoch: int = -1  # the epoch this instance last asked for it at
    asks: int = 0  # how many times it asked at that epoch (the back-off of the repeats)
    asked_us: int = 0  # when it first asked at that epoch
    granted_to: str | None = None  # the owner granted it (the first request only)
    due: int = 0  # the token of its live place in the request heap (0: none)
    #: a request held until it can be answered: by this owner once no consumer here has
    #: the message out, or (a later epoch) once this instance learns it owns it then
    wanted_by: str | None = None
    wanted_epoch: int = -1
    wanted_us: int = 0


def _position(bookmark: str) -> tuple[int, int] | None:
    """``(publisher hash, sequence)`` of a bookmark ``H|S|`` (None: another form)."""
    head, sep, rest = bookmark.partition("|")
    seq, sep2, _ = rest.partition("|")
    if not sep or not sep2 or not head.isdigit() or not seq.isdigit():
        return None
    return int(head), int(seq)


class _ByPosition:
    """Bookmarks ``H|S|`` by publisher ``H``, taken out in sequence order up to a
    position. A bookmark that left its dict by another way stays here until then (the
    caller skips it); :meth:`rebuild` drops those."""

    __slots__ = ("_heaps", "_size")

    def __init__(self) -> None:
        self._heaps: dict[int, list[tuple[int, str]]] = {}
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def add(self, bookmark: str) -> None:
        pos = _position(bookmark)
        if pos is not None:
            heapq.heappush(self._heaps.setdefault(pos[0], []), (pos[1], bookmark))
            self._size += 1

    def upto(self, pub_hash: int, seq: int) -> Sequence[str]:
        """Take out publisher ``pub_hash``'s bookmarks at or below ``seq``."""
        heap = self._heaps.get(pub_hash)
        if not heap or heap[0][0] > seq:
            return ()
        out: list[str] = []
        while heap and heap[0][0] <= seq:
            out.append(heapq.heappop(heap)[1])
        self._size -= len(out)
        if not heap:
            del self._heaps[pub_hash]
        return out

    def rebuild(self, bookmarks: Iterable[str]) -> None:
        self._heaps.clear()
        self._size = 0
        for bm in bookmarks:
            self.add(bm)


@dataclass(slots=True)
class Ownership:
    """One instance's view of one replicated queue's ownership.

    Args:
        instance: this instance's name.
        initial_owner: ``GroupLocalQueue/InitialOwner`` (None: the publishing instance).
        max_early: most acks and grants kept for messages not seen yet.

    Attributes:
        busy: whether this instance has a message out to a consumer now (the state
            machine's lease; None: only what :meth:`leased` said).
        on_gained: told of each message this instance came to own after it entered
            (the state machine offers it to consumers again).
    """

    instance: str
    initial_owner: str | None = None
    max_early: int = MAX_EARLY
    busy: Callable[[str], bool] | None = None
    on_gained: Callable[[str], None] | None = None
    #: how many changes may be kept beyond :attr:`max_early` (a bounded queue: its
    #: inactive messages, each of which may have one kept until its activation)
    extra_early: Callable[[], int] | None = None
    #: changes made when a message entered (a proxied takeover at activation), for the
    #: caller to log and send
    pending: list[Wire] = field(default_factory=list)
    _entries: dict[str, _Entry] = field(default_factory=dict)
    #: how many messages each owner has here (owners() and owned() without a scan)
    _owned_by: dict[str, int] = field(default_factory=dict)
    _offline: set[str] = field(default_factory=set)
    #: candidates for requests: (waiting since, token, bookmark), the oldest first (a
    #: RunHeap: messages arrive in time order, so almost every push and pop is O(1),
    #: where a binary heap's are O(log n) on every message)
    _due: RunHeap[tuple[int, int, str]] = field(default_factory=RunHeap)
    _tokens: int = 0
    #: candidates whose owner was offline when they came due, per owner
    _parked: dict[str, list[str]] = field(default_factory=dict)
    #: messages taken over by proxy here, and the owner each was taken from
    _taken: dict[str, str] = field(default_factory=dict)
    #: taken messages to hand back at the next pass (their owner is not known offline)
    _returning: set[str] = field(default_factory=set)
    #: changes that arrived before the message itself, oldest first: its grant with
    #: the highest epoch, or None for an ack (an ack replaces a grant)
    _early: dict[str, Grant | None] = field(default_factory=dict)
    #: the early ones by publisher position, pruned by :meth:`passed`
    _early_index: _ByPosition = field(default_factory=_ByPosition)
    #: the highest sequence seen per publisher on the queue's topics
    _seen: dict[int, int] = field(default_factory=dict)
    #: a bounded queue: the highest sequence per publisher appended here (active or not)
    _arrived: dict[int, int] | None = None
    #: acks among :attr:`_early`
    _early_acks: int = 0
    #: messages this instance asked for and got no answer yet (at their current epoch)
    _asked: set[str] = field(default_factory=set)
    #: messages with a request held here (:attr:`_Entry.wanted_by`), answered by
    #: :meth:`answer`
    _waiting: set[str] = field(default_factory=set)
    #: requests for inactive messages in this copy's log (a bounded queue), answered
    #: by :meth:`answer` at the next pass: read back from the log at start-up, or kept
    #: here until the message reached the log (:meth:`arrived`)
    _held_inactive: dict[str, Request] = field(default_factory=dict)
    #: requests to this instance that arrived before their message (module docstring):
    #: the request and when it was received, oldest first
    _early_requests: dict[str, tuple[Request, int]] = field(default_factory=dict)
    #: :attr:`_early_requests` by publisher position (:meth:`passed`, :meth:`arrived`)
    _early_request_index: _ByPosition = field(default_factory=_ByPosition)
    proxied: bool = False
    handed_back: int = 0
    early_dropped: int = 0

    # -- views --------------------------------------------------------------------------

    def owner(self, bookmark: str) -> str | None:
        entry = self._entries.get(bookmark)
        return entry.owner if entry is not None else None

    def can_deliver(self, bookmark: str) -> bool:
        """Whether this instance may deliver the message now."""
        entry = self._entries.get(bookmark)
        return entry is not None and entry.owner == self.instance and entry.granted_to is None

    def owners(self) -> set[str]:
        """Every instance that owns a message of this copy."""
        return {o for o, n in self._owned_by.items() if n}

    def is_offline(self, instance: str) -> bool:
        return instance in self._offline

    def owned(self) -> int:
        return self._owned_by.get(self.instance, 0)

    def taken(self) -> int:
        """Messages this instance holds by a proxied takeover (not handed back yet)."""
        return len(self._taken)

    def early(self) -> int:
        """Acks and grants kept for messages this copy has not seen (or, bounded, not
        activated) yet."""
        return len(self._early)

    def is_early(self, bookmark: str) -> bool:
        """Whether an ack, grant or request is kept for this message (not seen, or not
        activated, here yet): its record must stay in what a restart reads."""
        return (
            bookmark in self._early
            or bookmark in self._early_requests
            or bookmark in self._held_inactive
        )

    def early_acks(self) -> int:
        """Acks among :meth:`early` (a bounded queue: acks of inactive messages)."""
        return self._early_acks

    def requests_open(self) -> int:
        """Messages this instance asked their owner for and has no answer for yet."""
        return len(self._asked)

    def requests_waiting(self) -> int:
        """Requests of other instances this instance holds: it owns the message and a
        consumer here has it out (answered when that lease ends), the request names an
        epoch this instance has not heard of yet, or the message has not arrived here
        yet."""
        return len(self._waiting) + len(self._early_requests) + len(self._held_inactive)

    def oldest_request_us(self) -> int:
        """When the oldest open request of this instance was first asked (0: none)."""
        entries = self._entries
        return min((entries[bm].asked_us for bm in self._asked), default=0)

    def view(self, bookmark: str) -> OwnerView | None:
        """The message's owner as this copy sees it (None: not a message here)."""
        e = self._entries.get(bookmark)
        if e is None:
            return None
        return OwnerView(e.owner, e.epoch, e.granted_to, e.owner in self._offline)

    def request_state(self, bookmark: str) -> RequestState | None:
        """The open request of this instance for ``bookmark``, or the request it holds
        for it (None: neither)."""
        e = self._entries.get(bookmark)
        if e is None:
            return None
        if bookmark in self._asked:
            return RequestState(bookmark, True, e.owner, e.asked_epoch, e.asked_us, e.asks)
        if bookmark in self._waiting and e.wanted_by is not None:
            return RequestState(bookmark, False, self.instance, e.wanted_epoch, e.wanted_us,
                                1, e.wanted_by)  # fmt: skip
        return None

    def unreachable(self) -> int:
        """Messages here owned by an instance that is offline: this instance can neither
        deliver them nor ask for them (a bounded queue does not count them against its
        target, so they cannot fill its window for the length of an outage)."""
        owned_by = self._owned_by
        return sum(owned_by.get(o, 0) for o in self._offline)

    def reachable(self, bookmark: str) -> bool:
        """Whether the message's owner is this instance or one that is online."""
        entry = self._entries.get(bookmark)
        return entry is not None and entry.owner not in self._offline

    def __len__(self) -> int:
        return len(self._entries)

    def first_owner(self, published_on: str) -> str:
        """Who owns a message published on ``published_on`` when it enters: the queue's
        ``InitialOwner``, else the publishing instance."""
        return self.initial_owner or published_on

    # -- local events -------------------------------------------------------------------

    def message(self, bookmark: str, published_on: str, now_us: int) -> bool:
        """A message entered the queue here (published here or replicated). False: it
        was acked elsewhere already (it does not enter).

        Readable twin of :meth:`messages`: tests/unit/queues/test_ownership_runs.py
        checks them against each other."""
        if bookmark in self._entries:
            return True
        early: Grant | None = None
        if bookmark in self._early:
            early = self._early.pop(bookmark)
            if early is None:
                self._early_acks -= 1
                return False  # acked before it arrived (or, bounded, before activation)
        owner = self.first_owner(published_on)
        entry = self._entries[bookmark] = _Entry(owner, 0, now_us)
        self._owned_by[owner] = self._owned_by.get(owner, 0) + 1
        if owner != self.instance:
            self._queue_request(bookmark, entry, now_us)
        if early is not None:
            self._apply_grant(early, entry)
        if self._early_requests:
            kept = self._early_requests.pop(bookmark, None)
            if kept is not None:
                self._hold(bookmark, entry, kept[0], kept[1])  # answered at the next pass
        if self.proxied and entry.owner in self._offline:
            self.pending.extend(self._take(bookmark, entry, entry.owner))
        return True

    def messages(
        self, bookmarks: Sequence[str], published_on: str, now_us: Sequence[int]
    ) -> list[bool] | None:
        """:meth:`message` for a run of messages published on ``published_on``
        (``now_us[i]`` for ``bookmarks[i]``): which entered (None: every one did). The
        usual message (nothing kept for it, its owner online) is done here without a
        call each: :meth:`message` per message was the largest part of a replicated
        queue's admission.

        Fast twin of :meth:`message`: tests/unit/queues/test_ownership_runs.py checks
        them against each other (the same answers and the same view of every message;
        the request heap is compacted once per run, so it may hold other stale places,
        which are skipped when they come due)."""
        entries = self._entries
        early = self._early
        requests = self._early_requests
        owner = self.first_owner(published_on)
        foreign = owner != self.instance
        if self.proxied and owner in self._offline:
            entered = [
                self.message(bm, published_on, t) for bm, t in zip(bookmarks, now_us, strict=True)
            ]
            return None if all(entered) else entered
        tokens = self._tokens
        due: list[tuple[int, int, str]] = []  # request candidates, pushed in one call
        added = 0
        out: list[bool] | None = None
        keep = entries.setdefault
        for i, bm in enumerate(bookmarks):
            if (early or requests) and (bm in early or bm in requests) and bm not in entries:
                # a change kept for it: message() applies it (its tokens and heap too)
                self._tokens = tokens
                self._due.extend(due)
                due = []
                if not self.message(bm, published_on, now_us[i]):
                    if out is None:
                        out = [True] * len(bookmarks)
                    out[i] = False
                tokens = self._tokens
                continue
            t = now_us[i]
            entry = _Entry(owner, 0, t, due=tokens + 1) if foreign else _Entry(owner, 0, t)
            if keep(bm, entry) is not entry:
                continue  # here already (one lookup for both questions)
            added += 1
            if foreign:
                tokens += 1
                due.append((t, tokens, bm))
        self._tokens = tokens
        if added:
            self._owned_by[owner] = self._owned_by.get(owner, 0) + added
        if due:
            self._due.extend(due)
            self._compact_due()
        return out

    def claim(self, bookmark: str, published_on: str, held_on: str | None = None) -> list[Wire]:
        """The message reached this copy again, from instance ``published_on``, where it
        was published too (a publisher that failed over sent it again before the first
        copy reached that instance): the log kept the first copy and dropped this one.
        Each instance took itself as the first owner of its copy, so the copies meet
        here: a first owner is a claim at epoch 0, and the higher claim wins (ties of
        an epoch go to the higher instance name, as for grants). A winning claim moves
        the owner here and is returned to be logged, as a grant at epoch 0: the log then
        keeps what the dropped copy taught (a restart replays it), and every copy applies
        it as it applies a grant, so all agree. A losing or known claim changes
        nothing; nor does one for a message whose ownership already moved by a grant
        (a later epoch wins whatever the claim), or that is not in the queue here.

        A bounded queue's inactive message is not known here: ``held_on`` is where the
        copy in the log was published (None: not known). A claim of another instance
        than that one is kept with the early changes, applied at activation like a
        grant (the higher claim wins there), and logged; one that may lose is logged
        too (harmless: it changes nothing where it loses), so only another route's copy
        of the same publication (the usual duplicate) is skipped without a record."""
        owner = self.first_owner(published_on)
        entry = self._entries.get(bookmark)
        if entry is None:
            return self._claim_inactive(bookmark, owner, held_on)
        if entry.epoch or owner <= entry.owner:
            return []
        grant = Grant(bookmark, owner, 0)
        self._apply_grant(grant, entry)
        return [grant]

    def _claim_inactive(self, bm: str, owner: str, held_on: str | None) -> list[Wire]:
        """:meth:`claim` of a message this copy may hold inactive (a bounded queue)."""
        arrived = self._arrived
        pos = _position(bm)
        if (
            arrived is None
            or pos is None
            or pos[1] > arrived.get(pos[0], 0)  # not in this copy's log
            or self._passed(bm)  # activated and gone (or not in the queue)
            or (held_on is not None and self.first_owner(held_on) == owner)
        ):
            return []
        early = self._early
        if bm in early:
            kept = early[bm]
            if kept is None or (kept.epoch, kept.owner) >= (0, owner):
                return []  # acked while inactive, or known
        grant = Grant(bm, owner, 0)
        new = bm not in early
        early[bm] = grant
        if new:
            self._index_early(bm)
        return [grant]

    def seen(self) -> dict[int, int]:
        """Per publisher, the position its messages passed (:meth:`passed`): what a
        checkpoint keeps, for a replay that starts after them."""
        return dict(self._seen)

    def passed(self, pub_hash: int, seq: int) -> None:
        """This copy recorded publisher ``pub_hash``'s messages up to ``seq`` on the
        queue's topics: no message of that publisher at or below ``seq`` can enter any
        more, so acks and grants kept for one are dropped."""
        if seq > self._seen.get(pub_hash, 0):
            self._seen[pub_hash] = seq
        early = self._early
        for bm in self._early_index.upto(pub_hash, seq):
            if bm in early and early.pop(bm) is None:
                self._early_acks -= 1
        for bm in self._early_request_index.upto(pub_hash, seq):
            self._early_requests.pop(bm, None)

    def arrived(self, pub_hash: int, seq: int) -> None:
        """A bounded queue: publisher ``pub_hash``'s messages up to ``seq`` are in this
        copy's log (active or inactive; :meth:`passed` follows the activation)."""
        arrived = self._arrived
        if arrived is None:
            arrived = self._arrived = {}
        if seq > arrived.get(pub_hash, 0):
            arrived[pub_hash] = seq
        # requests kept until their (inactive) message reached the log: the next pass
        # answers them as for any inactive message
        for bm in self._early_request_index.upto(pub_hash, seq):
            kept = self._early_requests.pop(bm, None)
            if kept is not None:
                self._held_inactive[bm] = kept[0]

    def leased(self, bookmark: str, leased: bool) -> None:
        """This instance leased (or got back) a message it owns: while leased it grants
        no transfer and hands nothing back (without :attr:`busy`)."""
        entry = self._entries.get(bookmark)
        if entry is not None:
            entry.leased = leased

    def acked(self, bookmark: str) -> list[Wire]:
        """A consumer here acked the message: drop it and tell the others."""
        return [OwnershipAck(bookmark)] if self.acked_many((bookmark,)) else []

    def acked_many(self, bookmarks: Iterable[str]) -> int:
        """:meth:`acked` for each of ``bookmarks`` (the ``QUEUE_ACK`` record written for
        them tells the others); returns how many were known here."""
        entries = self._entries
        forget = self._forget
        n = 0
        for bm in bookmarks:
            entry = entries.pop(bm, None)
            if entry is not None:
                forget(bm, entry)
                n += 1
        return n

    def want(self, now_us: int, spare: int, typical_wait_us: int) -> list[Wire]:
        """Requests for messages owned elsewhere that waited longer than
        ``typical_wait_us``, at most ``spare`` (this instance's free backlog). Costs what
        is due: the candidates are a heap by arrival."""
        out: list[Wire] = []
        heap = self._due
        while heap and len(out) < spare:
            since, token, bm = heap.peek()
            if now_us - since <= typical_wait_us:
                break
            heap.pop()
            e = self._entries.get(bm)
            if e is None or e.due != token or e.owner == self.instance:
                continue  # gone, queued again since, or ours now
            if e.owner in self._offline:
                e.due = 0
                self._parked.setdefault(e.owner, []).append(bm)
                continue
            if e.asked_epoch != e.epoch:
                e.asked_epoch, e.asks, e.asked_us = e.epoch, 0, now_us
            e.asks += 1
            self._asked.add(bm)
            out.append(Request(bm, self.instance, e.owner, e.epoch))
            # the owner keeps the request until it can answer it; asked again only in
            # case it could not reach the owner, less and less often
            again = min(REASK_US << min(e.asks - 1, 16), MAX_REASK_US)
            self._queue_request(bm, e, now_us + max(0, again - typical_wait_us))
        return out

    def answer(self, now_us: int = 0) -> list[Wire]:
        """Grants for the requests held here that can be answered now: this instance
        owns the message at the asked epoch and no consumer here has it out. A request
        whose message left, or whose epoch ownership moved past, is superseded (the
        requester hears of the move and asks the new owner). Costs the requests held."""
        out: list[Wire] = []
        entries = self._entries
        if self._held_inactive:
            held, self._held_inactive = self._held_inactive, {}
            for bm, msg in held.items():
                e = entries.get(bm)
                if e is not None:
                    self._hold(bm, e, msg, now_us)  # activated since: answered below
                else:
                    out.extend(self._request_inactive(msg))
        for bm in list(self._waiting):
            e = entries.get(bm)
            if e is None or e.wanted_by is None:
                self._waiting.discard(bm)
                continue
            if e.wanted_epoch > e.epoch:
                continue  # asked of this instance at an epoch it has not heard of yet
            if e.wanted_epoch < e.epoch or e.owner != self.instance or e.granted_to:
                self._unwant(bm, e)  # superseded: ownership moved on since
                continue
            if self._is_leased(bm, e):
                continue
            requester = e.wanted_by
            self._unwant(bm, e)
            out.extend(self._grant(bm, e, requester, now_us))
        return out

    def owner_offline(self, instance: str, offline: bool, now_us: int = 0) -> list[Wire]:
        """The link to ``instance`` went down (or came back). Down: with proxied transfer
        on, this instance takes over what the offline instance owns. Back: what was taken
        from it by proxy is handed back, and requests to it resume."""
        if offline:
            self._offline.add(instance)
            return self._take_over() if self.proxied else []
        self._offline.discard(instance)
        for bm in self._parked.pop(instance, []):
            e = self._entries.get(bm)
            if e is not None and e.owner == instance and not e.due:
                self._queue_request(bm, e, e.arrived_us)
        self._returning.update(bm for bm, o in self._taken.items() if o == instance)
        return self.hand_back(now_us)

    def set_proxied(self, enabled: bool) -> list[Wire]:
        """``enable_proxied_transfer`` / ``disable_proxied_transfer``. Disabling takes
        nothing back: what was taken goes back when its owner is online again."""
        self.proxied = enabled
        return self._take_over() if enabled else []

    def hand_back(self, now_us: int) -> list[Wire]:
        """Hand back taken messages whose owner is online and that no consumer here has
        out (the others wait for their lease to end: handing back a message a consumer is
        processing would let the owner deliver it a second time)."""
        out: list[Wire] = []
        for bm in list(self._returning):
            orig = self._taken.get(bm)
            e = self._entries.get(bm)
            if orig is None or e is None or e.owner != self.instance:
                self._returning.discard(bm)
                self._taken.pop(bm, None)
                continue
            if orig in self._offline:
                self._returning.discard(bm)  # again when it is back (owner_offline)
                continue
            if self._is_leased(bm, e):
                continue
            self._returning.discard(bm)
            del self._taken[bm]
            self._set_owner(bm, e, orig, e.epoch + 1)
            # this instance asks again only after the owner had a typical wait to deliver
            self._queue_request(bm, e, max(now_us, e.arrived_us))
            self.handed_back += 1
            out.append(Grant(bm, orig, e.epoch))
        return out

    def returning(self) -> bool:
        """Whether a hand-back waits for a lease here to end."""
        return bool(self._returning)

    def _take_over(self) -> list[Wire]:
        out: list[Wire] = []
        entries = self._entries
        for inst in sorted(self._offline):
            for bm in sorted(bm for bm, e in entries.items() if e.owner == inst):
                out.extend(self._take(bm, entries[bm], inst))
        return out

    def _take(self, bm: str, e: _Entry, inst: str) -> list[Wire]:
        """A proxied takeover of one message owned by offline ``inst``."""
        self._set_owner(bm, e, self.instance, e.epoch + 1)
        self._taken[bm] = inst
        return [Grant(bm, self.instance, e.epoch, proxied=True)]

    # -- from the other instances -------------------------------------------------------

    def receive_acks(self, bookmarks: Iterable[str]) -> None:
        """:meth:`receive` of an :class:`OwnershipAck` for each of ``bookmarks`` (a replicated
        ``QUEUE_ACK`` record names a run of them)."""
        entries = self._entries
        forget = self._forget
        for bm in bookmarks:
            entry = entries.pop(bm, None)
            if entry is not None:
                forget(bm, entry)
            else:
                self.receive(OwnershipAck(bm))  # one that did not arrive yet, or cannot any more

    def receive(self, msg: Wire, now_us: int = 0, replay: bool = False) -> list[Wire]:
        """Apply one message from another instance (or, ``replay``, one read back from
        the log at start-up); returns what to send in answer.

        Replaying decides nothing: a request read back is held (:meth:`answer` answers
        it once the instance runs), never granted there and then. Whether a request
        could be granted depends on the leases, which the log does not keep, and a grant
        made while replaying would never be logged: the owner would think the message
        given away while the requester never heard of it, and each would ask the other
        for it for ever."""
        bm = msg.bookmark
        if type(msg) is OwnershipAck:
            entry = self._entries.pop(bm, None)
            if entry is not None:
                self._forget(bm, entry)
            elif not self._passed(bm):
                if self._early_requests:
                    self._early_requests.pop(bm, None)  # superseded
                if bm not in self._early:
                    self._early[bm] = None
                    self._early_acks += 1
                    self._index_early(bm)
                elif self._early[bm] is not None:  # an ack replaces a kept grant (indexed)
                    del self._early[bm]
                    self._early[bm] = None
                    self._early_acks += 1
            return []
        entry = self._entries.get(bm)
        if type(msg) is Request:
            if entry is not None:
                return self._request(msg, entry, now_us, replay)
            return self._request_absent(msg, now_us, replay)
        assert type(msg) is Grant
        if entry is None:
            if self._passed(bm):
                return []  # it can no longer arrive
            if bm not in self._early:
                self._early[bm] = msg
                self._index_early(bm)
                return []
            held = self._early[bm]
            if held is not None and (msg.epoch, msg.owner) > (held.epoch, held.owner):
                self._early[bm] = msg
            return []
        self._apply_grant(msg, entry)
        return []

    def _apply_grant(self, msg: Grant, entry: _Entry) -> None:
        """A later epoch wins (ties: the higher instance name), the same everywhere."""
        if (msg.epoch, msg.owner) <= (entry.epoch, entry.owner):
            return
        old = entry.owner
        self._set_owner(msg.bookmark, entry, msg.owner, msg.epoch)
        if msg.owner == self.instance and msg.proxied:
            # this instance's own takeover, read back from its log at start-up
            self._taken[msg.bookmark] = old
            self._returning.add(msg.bookmark)

    def _request(self, msg: Request, entry: _Entry, now_us: int, replay: bool) -> list[Wire]:
        bm = msg.bookmark
        if msg.requester == self.instance:
            # this instance's own request, read back from its log at start-up: asked
            if replay and msg.epoch == entry.epoch and entry.owner == msg.owner != self.instance:
                if entry.asked_epoch != msg.epoch:
                    entry.asked_epoch, entry.asks, entry.asked_us = msg.epoch, 0, now_us
                entry.asks += 1
                self._asked.add(bm)
            return []
        if msg.owner != self.instance or msg.epoch < entry.epoch:
            return []  # addressed to another owner, or superseded (ownership moved since)
        if msg.epoch == entry.epoch and (
            entry.owner != self.instance or entry.granted_to is not None
        ):
            return []  # another instance won this epoch, or promised to the first asker
        if msg.epoch == entry.epoch and not replay and not self._is_leased(bm, entry):
            if entry.wanted_by is not None:
                self._unwant(bm, entry)  # an older request held here is superseded
            return self._grant(bm, entry, msg.requester, now_us)
        # held: a consumer here has it out, the owner is replaying its log, or the
        # request names an epoch this instance has not heard of yet
        self._hold(bm, entry, msg, now_us)
        return []

    def _hold(self, bm: str, entry: _Entry, msg: Request, since_us: int) -> None:
        """Hold ``msg`` until :meth:`answer` can answer it (or finds it superseded): the
        first asker of the highest epoch is kept (a repeat changes nothing)."""
        if entry.wanted_by is None or msg.epoch > entry.wanted_epoch:
            entry.wanted_by, entry.wanted_epoch = msg.requester, msg.epoch
            entry.wanted_us = since_us
            self._waiting.add(bm)

    def _request_absent(self, msg: Request, now_us: int, replay: bool) -> list[Wire]:
        """A request for a message with no entry here: not arrived yet, or (a bounded
        queue) inactive, or gone. One to this instance for a message that can still
        come is kept until it is here (module docstring); a bounded queue's inactive
        message in the log is granted at once (:meth:`_request_inactive`), or, read back
        at start-up, by the running instance."""
        bm = msg.bookmark
        if msg.owner != self.instance or msg.requester == self.instance or self._passed(bm):
            return []  # not asked of this instance, or it can no longer come
        if bm in self._early and self._early[bm] is None:
            return []  # acked before it came: superseded
        arrived = self._arrived
        pos = _position(bm)
        if arrived is not None and pos is not None and pos[1] <= arrived.get(pos[0], 0):
            if replay:
                self._held_inactive[bm] = msg
                return []
            return self._request_inactive(msg)
        requests = self._early_requests
        kept = requests.get(bm)
        if kept is None:
            requests[bm] = (msg, now_us)
            self._early_request_index.add(bm)
            limit = self._early_limit()
            if len(requests) > limit:
                del requests[next(iter(requests))]  # the oldest: its requester asks again
            if len(self._early_request_index) > 2 * limit:
                self._early_request_index.rebuild(requests)
        elif msg.epoch > kept[0].epoch:
            requests[bm] = (msg, now_us)
        return []

    def _grant(self, bm: str, entry: _Entry, requester: str, now_us: int) -> list[Wire]:
        self._set_owner(bm, entry, requester, entry.epoch + 1)
        entry.granted_to = requester
        # this instance asks for it back only after the new owner had a typical wait to
        # deliver it (else two instances with room would pass it to and fro)
        self._queue_request(bm, entry, max(now_us, entry.arrived_us))
        return [Grant(bm, requester, entry.epoch)]

    def _unwant(self, bm: str, entry: _Entry) -> None:
        entry.wanted_by = None
        entry.wanted_epoch = -1
        self._waiting.discard(bm)

    def _request_inactive(self, msg: Request) -> list[Wire]:
        """A request for a message this copy has inactive (a bounded queue): granted if
        this instance owns it at the asked epoch, kept like a received grant until the
        message is activated (module docstring)."""
        bm = msg.bookmark
        pos = _position(bm)
        arrived = self._arrived
        if (
            msg.owner != self.instance
            or arrived is None
            or pos is None
            or pos[1] > arrived.get(pos[0], 0)  # not in this copy's log (yet)
            or self._passed(bm)  # activated and gone
        ):
            return []
        early = self._early
        if bm in early:
            held = early[bm]
            if held is None or (held.owner, held.epoch) != (self.instance, msg.epoch):
                return []  # acked while inactive, or not ours at that epoch
            grant = early[bm] = Grant(bm, msg.requester, msg.epoch + 1)
        else:
            if msg.epoch != 0:
                return []  # no change kept: it is at its initial epoch
            grant = early[bm] = Grant(bm, msg.requester, msg.epoch + 1)
            self._index_early(bm)
        return [grant]

    # -- internals ----------------------------------------------------------------------

    def _is_leased(self, bookmark: str, entry: _Entry) -> bool:
        busy = self.busy
        return entry.leased or (busy is not None and busy(bookmark))

    def _set_owner(self, bm: str, entry: _Entry, owner: str, epoch: int) -> None:
        old = entry.owner
        if old != owner:
            self._disown(old)
            self._owned_by[owner] = self._owned_by.get(owner, 0) + 1
        entry.owner = owner
        entry.epoch = epoch
        entry.granted_to = None
        if self._asked:
            self._asked.discard(bm)  # answered (granted here) or superseded (moved on)
        if owner == self.instance:
            entry.due = 0
            if old != owner and self.on_gained is not None:
                self.on_gained(bm)
            return
        if old == self.instance:
            self._taken.pop(bm, None)
            self._returning.discard(bm)
        self._queue_request(bm, entry, entry.arrived_us)

    def _queue_request(self, bm: str, entry: _Entry, since_us: int) -> None:
        self._tokens += 1
        entry.due = self._tokens
        self._due.push((since_us, self._tokens, bm))
        self._compact_due()

    def _compact_due(self) -> None:
        """Drop the heap's stale places (messages acked, owned here, or queued again
        since): they leave only when they come due, and a busy instance asks for nothing
        for a long time. Rebuilt when it is twice the live candidates: amortised O(1)."""
        entries = self._entries
        if len(self._due) <= 2 * (len(entries) - self.owned()) + 1024:
            return

        def live(key: tuple[int, int, str]) -> bool:
            e = entries.get(key[2])
            return e is not None and e.due == key[1]

        self._due.retain(live)

    def _disown(self, owner: str) -> None:
        """``owner`` has one message fewer here."""
        owned_by = self._owned_by
        n = owned_by[owner] - 1
        if n:
            owned_by[owner] = n
        else:
            del owned_by[owner]

    def _forget(self, bm: str, entry: _Entry) -> None:
        self._disown(entry.owner)
        entry.due = 0
        if self._asked:
            self._asked.discard(bm)
        if self._waiting:
            self._waiting.discard(bm)
        if self._taken:
            self._taken.pop(bm, None)
        if self._returning:
            self._returning.discard(bm)

    def _passed(self, bm: str) -> bool:
        """Whether the message can no longer enter this copy (module docstring)."""
        pos = _position(bm)
        return pos is not None and pos[1] <= self._seen.get(pos[0], 0)

    def _early_limit(self) -> int:
        return self.max_early + (self.extra_early() if self.extra_early is not None else 0)

    def _index_early(self, bm: str) -> None:
        self._early_index.add(bm)
        limit = self._early_limit()
        while len(self._early) > limit:
            oldest = next(iter(self._early))
            if self._early.pop(oldest) is None:
                self._early_acks -= 1
            self.early_dropped += 1
        if len(self._early_index) > 2 * limit:
            # the index keeps entries the cap dropped until their publisher moves on
            self._early_index.rebuild(self._early)
