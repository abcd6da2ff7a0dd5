"""A subscription of one client: what it asked for, and how far it got.

The value part (topic, filter, options, bookmark...) is fixed when the subscription is
made (a ``replace`` makes a new one); :class:`SubscriptionProgress` is the part its delivery moves
(state, position, counts). Runtime handles (the replay cursor, its task, its sink) are
kept by their owner, server/subscriptions.py, not here. A connection's subscriptions of
every kind are in its :class:`SubscriptionTable`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, ValuesView
from dataclasses import dataclass, field
from typing import Literal

from spool.server.backpressure import LiveFeed
from spool.server.bookmarks import SpecKind
from spool.server.config import UserConfig
from spool.server.expr import Filter
from spool.server.ports import Outbound, SubscriptionEnd
from spool.server.protocol.options import SubscribeOptions
from spool.server.protocol.selection import SelectList
from spool.server.regex import Regex

State = Literal["live", "replaying", "paused"]
#: how a subscription is fed: the router (live), a replay cursor (bookmark), the SOW's
#: delivery (sow) or a queue
SubKind = Literal["live", "bookmark", "sow", "queue"]


@dataclass(slots=True)
class SubscriptionProgress:
    """Where a subscription stands (moved by its delivery; read by admin views).

    Attributes:
        state: ``live`` (receiving as published or, for a bookmark subscription, caught
            up), ``replaying`` (reading the log behind the live point: a bookmark
            subscription's replay, or a live one catching up after a burst) or ``paused``.
        position: bookmark of the last record its replay cursor (or catch-up read) passed.
        position_seq: local sequence of that record.
        position_time_us: record time of that record.
        delivered: messages delivered to it, whatever the path: the live fan-out,
            its replay cursor or catch-up reads, a SOW snapshot and SOW updates
            (out-of-focus notices included), queue deliveries (redeliveries included).
            A message one delivery names several subscriptions in (``sids``) counts
            for each of them.
        feed: a live subscription's path: fed by the fan-out, or catching up from the log
            (server/backpressure.py; moved by server/spills.py).
    """

    state: State = "live"
    position: str = ""
    position_seq: int = 0
    position_time_us: int = 0
    delivered: int = 0
    feed: LiveFeed = field(default_factory=LiveFeed)


@dataclass(frozen=True, eq=False, slots=True)
class SessionSubscription:
    """One subscription of one client connection.

    Live subscriptions sit in the :class:`~spool.server.router.Router` and get messages as they
    are published; bookmark subscriptions are fed by a replay cursor over the transaction
    log for their whole life (server/replay) and never enter the router.

    Attributes:
        outbound: where its messages go (the client's connection).
        client: the client's name (admin views, events).
        user: whose read entitlements apply (None without users).
        sub_id: its id on that connection.
        topic: the topic, or a regular expression of topics.
        pattern: the compiled expression when ``topic`` is one.
        filter: the content filter, compiled.
        filter_text: the filter as given.
        options: the subscribe options.
        bookmark: the bookmark as given (bookmark subscriptions only).
        bookmark_kind: what kind of bookmark it is.
        cid: the subscribe command's id (for later acks and failures).
        acks: the acks the subscribe asked for.
        sid_bytes: ``sub_id`` as a JSON literal (encoded once).
        kind: how it is fed.
        command: the command that made it (``subscribe``, ``sow_and_subscribe``, ...).
        progress: where it stands.
        select: its select list (``options.select``, kept here for the delivery loops),
            None when it takes whole messages.
    """

    outbound: Outbound
    client: str
    user: UserConfig | None
    sub_id: str
    topic: str
    pattern: Regex | None
    filter: Filter | None
    filter_text: str | None
    options: SubscribeOptions
    bookmark: str | None = None
    bookmark_kind: SpecKind | Literal["none"] = "none"
    cid: str | None = None
    acks: frozenset[str] = frozenset()
    sid_bytes: bytes = b""
    kind: SubKind = "live"
    command: str = "subscribe"
    progress: SubscriptionProgress = field(default_factory=SubscriptionProgress)
    select: SelectList | None = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "select", self.options.select)

    @property
    def want_ts(self) -> bool:
        """Whether delivered messages carry ``ts`` (the ``timestamp`` option)."""
        return self.options.timestamp


#: told of each change of a :class:`SubscriptionTable`: ``added`` (reason None) or
#: ``removed`` with why
TableListener = Callable[
    [Literal["added", "removed"], SessionSubscription, SubscriptionEnd | None], None
]


class SubscriptionTable(Mapping[str, SessionSubscription]):
    """A connection's subscriptions of every kind, by sub id.

    The one place a subscription is added to a connection or removed from it (plain,
    bookmark, SOW and queue subscriptions alike): a read-only mapping with :meth:`add`,
    :meth:`remove` and :meth:`clear`, so whoever wants to know of each change (the
    subscription happenings) hears of every one through :attr:`listener`.

    Attributes:
        listener: told of each change after it is made; None when nobody wants to know.
    """

    __slots__ = ("_subs", "listener")

    def __init__(self) -> None:
        self._subs: dict[str, SessionSubscription] = {}
        self.listener: TableListener | None = None

    def __getitem__(self, sub_id: str) -> SessionSubscription:
        return self._subs[sub_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._subs)

    def __len__(self) -> int:
        return len(self._subs)

    def __contains__(self, sub_id: object) -> bool:
        return sub_id in self._subs

    def values(self) -> ValuesView[SessionSubscription]:
        return self._subs.values()

    def add(self, sub: SessionSubscription) -> None:
        """``sub`` joins the connection; one of the same sub id it replaces is removed
        (``replaced``) first."""
        listener = self.listener
        old = self._subs.get(sub.sub_id)
        self._subs[sub.sub_id] = sub
        if listener is not None:
            if old is not None:
                listener("removed", old, "replaced")
            listener("added", sub, None)

    def remove(self, sub_id: str, reason: SubscriptionEnd) -> SessionSubscription | None:
        """Take subscription ``sub_id`` away (None when there is none)."""
        sub = self._subs.pop(sub_id, None)
        if sub is not None and self.listener is not None:
            self.listener("removed", sub, reason)
        return sub

    def clear(self, reason: SubscriptionEnd) -> list[SessionSubscription]:
        """Take every subscription away; returns them, in the order they were added."""
        subs = list(self._subs.values())
        self._subs.clear()
        listener = self.listener
        if listener is not None:
            for sub in subs:
                listener("removed", sub, reason)
        return subs
