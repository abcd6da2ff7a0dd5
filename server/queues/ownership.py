"""Who may deliver each message of a replicated queue: ownership, transfers, proxied
transfer. A pure state machine per instance and queue (no I/O, time passed in), wired by
server/queues/stage.py (replicated ``QUEUE_ACK`` / ``QUEUE_TRANSFER`` records in, the
delivery gate) and server/queues/service.py (requests from the timer, link state,
proxied transfer); tests/unit/queues/test_ownership.py runs several of them over a fake
link.

The rules (the public AMPS model of replicated queues, issue 17):

- every message has exactly one **owner**: the instance where it was published, or the
  queue's ``InitialOwner``; only the owner delivers it;
- an instance with spare backlog **requests** a message owned elsewhere once it waited
  longer than the typical publish-to-ack time; the owner **grants the first request
  only**, and only while it has not leased the message itself; the grant is broadcast so
  every copy converges;
- acks are broadcast: every copy drops the message;
- **proxied transfer**: an operator lets this instance take over the messages owned by an
  instance that is offline; it broadcasts the takeover. The offline owner may have
  delivered some of them before it went down: those can be processed twice (the
  documented duplicate risk).

Every ownership change carries an epoch (one more than the message's previous one); a
copy applies a change only with a higher epoch (ties broken by instance name), so
changes that cross on the links converge to the same owner everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

__all__ = ["Ack", "Grant", "Ownership", "Request", "Wire"]


class Request(NamedTuple):
    """``requester`` asks ``owner`` for ``bookmark``, as owned at ``epoch``: a request
    that reaches an instance that is not that owner at that epoch (ownership moved since)
    is ignored, so a message is granted once per epoch, to the first asker."""

    bookmark: str
    requester: str
    owner: str
    epoch: int


class Grant(NamedTuple):
    """``bookmark`` is now owned by ``owner`` from ``epoch`` on (a granted request, or a
    proxied takeover)."""

    bookmark: str
    owner: str
    epoch: int
    proxied: bool = False


class Ack(NamedTuple):
    """``bookmark`` was processed: every copy drops it."""

    bookmark: str


Wire = Request | Grant | Ack


@dataclass(slots=True)
class _Entry:
    owner: str
    epoch: int
    arrived_us: int
    leased: bool = False
    asked_epoch: int = -1  # the epoch this instance last asked for it at (once per epoch)
    granted_to: str | None = None  # the owner granted it (the first request only)


@dataclass(slots=True)
class Ownership:
    """One instance's view of one replicated queue's ownership.

    Args:
        instance: this instance's name.
        initial_owner: ``GroupLocalQueue/InitialOwner`` (None: the publishing instance).
    """

    instance: str
    initial_owner: str | None = None
    _entries: dict[str, _Entry] = field(default_factory=dict)
    _offline: set[str] = field(default_factory=set)
    #: changes that arrived before the message itself (links are ordered per pair only:
    #: a grant from one instance may overtake the publish replicated by another)
    _early_grants: dict[str, Grant] = field(default_factory=dict)
    _early_acks: set[str] = field(default_factory=set)
    proxied: bool = False
    transferred_in: int = 0
    transferred_out: int = 0

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
        return {e.owner for e in self._entries.values()}

    def is_offline(self, instance: str) -> bool:
        return instance in self._offline

    def owned(self) -> int:
        return sum(1 for e in self._entries.values() if e.owner == self.instance)

    def __len__(self) -> int:
        return len(self._entries)

    # -- local events -------------------------------------------------------------------

    def message(self, bookmark: str, published_on: str, now_us: int) -> None:
        """A message entered the queue here (published here or replicated)."""
        if bookmark in self._entries:
            return
        if bookmark in self._early_acks:
            self._early_acks.discard(bookmark)
            return
        owner = self.initial_owner or published_on
        entry = self._entries[bookmark] = _Entry(owner, 0, now_us)
        early = self._early_grants.pop(bookmark, None)
        if early is not None:
            self._apply_grant(early, entry)

    def leased(self, bookmark: str, leased: bool) -> None:
        """This instance leased (or got back) a message it owns: while leased it grants
        no transfer."""
        entry = self._entries.get(bookmark)
        if entry is not None:
            entry.leased = leased

    def acked(self, bookmark: str) -> list[Wire]:
        """A consumer here acked the message: drop it and tell the others."""
        if self._entries.pop(bookmark, None) is None:
            return []
        return [Ack(bookmark)]

    def want(self, now_us: int, spare: int, typical_wait_us: int) -> list[Wire]:
        """Requests for messages owned elsewhere that waited longer than
        ``typical_wait_us``, at most ``spare`` (this instance's free backlog)."""
        out: list[Wire] = []
        if spare <= 0:
            return out
        for bm, e in self._entries.items():
            if (
                e.owner != self.instance
                and e.asked_epoch != e.epoch
                and e.owner not in self._offline
                and now_us - e.arrived_us > typical_wait_us
            ):
                e.asked_epoch = e.epoch
                out.append(Request(bm, self.instance, e.owner, e.epoch))
                if len(out) >= spare:
                    break
        return out

    def owner_offline(self, instance: str, offline: bool) -> list[Wire]:
        """The link to ``instance`` went down (or came back). With proxied transfer on,
        this instance takes over what the offline instance owns."""
        if offline:
            self._offline.add(instance)
        else:
            self._offline.discard(instance)
        return self._take_over() if self.proxied else []

    def set_proxied(self, enabled: bool) -> list[Wire]:
        """``enable_proxied_transfer`` / ``disable_proxied_transfer``."""
        self.proxied = enabled
        return self._take_over() if enabled else []

    def _take_over(self) -> list[Wire]:
        out: list[Wire] = []
        for bm, e in self._entries.items():
            if e.owner in self._offline:
                e.owner = self.instance
                e.epoch += 1
                self.transferred_in += 1
                out.append(Grant(bm, self.instance, e.epoch, proxied=True))
        return out

    # -- from the other instances -------------------------------------------------------

    def receive(self, msg: Wire) -> list[Wire]:
        """Apply one message from another instance; returns what to send in answer."""
        if type(msg) is Ack:
            if self._entries.pop(msg.bookmark, None) is None:
                self._early_acks.add(msg.bookmark)
                self._early_grants.pop(msg.bookmark, None)
            return []
        entry = self._entries.get(msg.bookmark)
        if type(msg) is Request:
            return self._request(msg, entry) if entry is not None else []
        assert type(msg) is Grant
        if entry is None:
            if msg.bookmark not in self._early_acks:
                held = self._early_grants.get(msg.bookmark)
                if held is None or (msg.epoch, msg.owner) > (held.epoch, held.owner):
                    self._early_grants[msg.bookmark] = msg
            return []
        self._apply_grant(msg, entry)
        return []

    def _apply_grant(self, msg: Grant, entry: _Entry) -> None:
        """A later epoch wins (ties: the higher instance name), the same everywhere."""
        if (msg.epoch, msg.owner) > (entry.epoch, entry.owner):
            if entry.owner == self.instance and msg.owner != self.instance:
                self.transferred_out += 1
            entry.owner = msg.owner
            entry.epoch = msg.epoch
            entry.granted_to = None
            if msg.owner == self.instance and not msg.proxied:
                self.transferred_in += 1

    def _request(self, msg: Request, entry: _Entry) -> list[Wire]:
        if (
            msg.owner != self.instance
            or entry.owner != self.instance
            or msg.epoch != entry.epoch
            or entry.leased
            or entry.granted_to is not None
        ):
            return []  # not ours (any more), ours and in use, or already promised
        entry.granted_to = msg.requester
        entry.owner = msg.requester
        entry.epoch += 1
        self.transferred_out += 1
        return [Grant(msg.bookmark, msg.requester, entry.epoch)]
