"""Subscriptions to SOW topics and what each one receives of a change.

Every subscription to a SOW topic by name (``subscribe``, ``delta_subscribe``, the live
part of ``sow_and_subscribe``) and every ``sow_and_subscribe`` / ``delta_subscribe`` with a
regex topic sits in this module's own index, not in the live router of plain topics: the
SOW stage hands it every change *with the record's state before and after*, which is what
a SOW subscription needs beyond a plain one:

- ``k`` on every delivery (unless ``no_sowkey``);
- ``oof`` notices: for a subscriber that asked, a record it holds that stops matching its
  filter (reason ``match``), is deleted (``deleted``), expires (``expired``), or that it
  may no longer read (``entitlement``);
- deltas: a delta subscriber receives only the fields that changed, plus the key fields,
  when it holds the previous state of the record (otherwise the whole record);
- select lists (server/protocol/selection.py): what a subscriber with one receives is
  the projection of what it would receive without (a record, a delta, an ``oof``
  notice's body), made once per list and body whatever the number of subscribers; a
  delta in which no selected field changed is not sent (the subscriber's copy of the
  selected fields is still current). Filters and deltas read the whole records;
- conflation (server/sow/conflate.py);
- the updates that arrive while a ``sow_and_subscribe`` snapshot is being sent wait in
  the subscriber's ``pending`` list and follow its ``group_end``, so that nothing is lost
  or doubled between the snapshot and the live stream.

"Holds" is tracked exactly, per subscriber that needs it (``oof`` or delta): the keys
whose current state the client has, i.e. it was sent (in a snapshot or live) and nothing
that changed it since was withheld. Every decision above is a set lookup; no filter is
ever evaluated on a record's old state.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import orjson

from spool.server.bookmarks import format_timestamp_us
from spool.server.expr import MessageView
from spool.server.ports import Change, Entitlements
from spool.server.protocol.errors import SlowClient
from spool.server.protocol.selection import EMPTY_OBJECT, SelectList
from spool.server.router import Router
from spool.server.session import Session
from spool.server.sow.conflate import SowConflation
from spool.server.sow.delta import diff
from spool.server.stats.source import EventSink
from spool.server.subscription import SessionSubscription
from spool.server.wire import encode_keyed, encode_oof

__all__ = ["SowDelivery", "SowSubscriber"]

#: updates held back during a snapshot: (topic, topic literal, changes, deletion reason)
Pending = tuple[str, bytes, list[Change], str | None]

#: most projections kept between two changes (they are shared by the subscribers of a
#: change that have the same select list)
_PROJECTIONS_KEPT: Final = 1024

#: oof reasons (docs/protocol.md "Messages from the server")
DELETED: Final = "deleted"
EXPIRED: Final = "expired"
MATCH: Final = "match"
ENTITLEMENT: Final = "entitlement"


@dataclass(eq=False, slots=True)
class SowSubscriber:
    """One subscription to SOW topics, with what its delivery needs.

    Attributes:
        sub: the subscription (topic or regex, filter, options, connection).
        session: its connection (closed when its held-back updates overflow).
        delta: it receives deltas (``delta_subscribe``, ``sow_and_delta_subscribe``).
        oof: it asked for out-of-focus notices.
        send_key: deliveries carry ``k`` (no ``no_sowkey``).
        held: for ``oof`` and delta subscribers, by topic, the keys whose current state
            it holds; None for a subscriber that needs no such record.
        pending: updates held back while its snapshot is being sent (None: live).
        pending_bytes: body bytes held back.
        conflation: its conflation windows, when it asked for ``conflation``.
        qid: the query id of its snapshot, as a JSON literal.
    """

    sub: SessionSubscription
    session: Session
    delta: bool
    oof: bool
    send_key: bool
    held: dict[str, set[str]] | None
    pending: list[Pending] | None = None
    pending_bytes: int = 0
    conflation: SowConflation | None = None
    qid: bytes = b""

    def holds(self, topic: str) -> set[str] | None:
        """The held keys of ``topic`` (made on first use), or None when not tracked."""
        held = self.held
        if held is None:
            return None
        keys = held.get(topic)
        if keys is None:
            keys = held[topic] = set()
        return keys


class SowDelivery:
    """Every SOW subscription of an instance, and the delivery of changes to them.

    Args:
        key_steps: the key paths (as steps) of a topic, kept in every delta.
        entitlements: read entitlements of regex subscriptions, checked per topic.
        buffer_limit: body bytes a subscriber may have held back during its snapshot
            before it is disconnected as a slow client (``SlowClientBufferLimit``).
        events: where such disconnections are reported.
    """

    def __init__(
        self,
        key_steps: Callable[[str], tuple[tuple[str, ...], ...]],
        entitlements: Entitlements,
        buffer_limit: int,
        events: EventSink,
    ) -> None:
        self._key_steps = key_steps
        self._auth = entitlements
        self._limit = buffer_limit
        self._events = events
        self.router = Router()
        self.subscribers: dict[SessionSubscription, SowSubscriber] = {}
        #: projections of bodies, by select list and body (equal bytes project alike)
        self._projected: dict[tuple[SelectList, bytes], bytes] = {}

    def add(self, ss: SowSubscriber) -> None:
        """Start delivering to ``ss`` (held back while ``ss.pending`` is a list)."""
        self.subscribers[ss.sub] = ss
        self.router.add(ss.sub)

    def remove(self, sub: SessionSubscription) -> SowSubscriber | None:
        """Stop delivering to ``sub``."""
        ss = self.subscribers.pop(sub, None)
        if ss is not None:
            self.router.remove(sub)
            if ss.conflation is not None:
                ss.conflation.close()
            ss.pending = None
        return ss

    def get(self, sub: SessionSubscription) -> SowSubscriber | None:
        return self.subscribers.get(sub)

    def __len__(self) -> int:
        return len(self.subscribers)

    # -- changes in ---------------------------------------------------------------------

    def changed(
        self, topic: str, literal: bytes, changes: list[Change], reason: str | None = None
    ) -> None:
        """Changes of one topic (puts, or deletions for ``reason``) to every subscriber."""
        subs = self.router.match(topic)
        if not subs:
            return
        if self._projected:
            self._projected.clear()
        for sub in subs:
            ss = self.subscribers.get(sub)
            if ss is not None:
                self.feed(ss, topic, literal, changes, reason)

    def feed(
        self,
        ss: SowSubscriber,
        topic: str,
        literal: bytes,
        changes: list[Change],
        reason: str | None,
    ) -> None:
        """Changes to one subscriber: held back, conflated, or sent now."""
        pending = ss.pending
        if pending is not None:
            pending.append((topic, literal, changes, reason))
            ss.pending_bytes += sum(len(c.new.body) for c in changes if c.new is not None)
            if ss.pending_bytes > self._limit and not ss.session.closed:
                self._events.emit(
                    "warning",
                    "session",
                    "slow_client",
                    client=ss.sub.client,
                    sub_id=ss.sub.sub_id,
                    held_back=ss.pending_bytes,
                    limit=self._limit,
                )
                ss.pending = None
                ss.session.close_soon(SlowClient.reason)
            return
        if ss.conflation is not None:
            ss.conflation.add(topic, literal, changes, reason)
            return
        self.send(ss, topic, literal, changes, reason)

    def send(
        self,
        ss: SowSubscriber,
        topic: str,
        literal: bytes,
        changes: list[Change],
        reason: str | None,
    ) -> int:
        """Encode and queue what ``changes`` mean to ``ss``; returns messages queued."""
        data, n = self.encode(ss, topic, literal, changes, reason)
        if n:
            sub = ss.sub
            sub.outbound.send_messages(data, n)
            sub.progress.delivered += n
        return n

    # -- what a change means to one subscriber ------------------------------------------

    def _project(self, select: SelectList, body: bytes) -> bytes:
        """``body`` projected onto ``select``, once per list and body."""
        key = (select, body)
        out = self._projected.get(key)
        if out is None:
            if len(self._projected) >= _PROJECTIONS_KEPT:
                self._projected.clear()
            out = self._projected[key] = select.project(body)
        return out

    def encode(
        self,
        ss: SowSubscriber,
        topic: str,
        literal: bytes,
        changes: list[Change],
        reason: str | None,
    ) -> tuple[bytes, int]:
        """The messages ``changes`` give ``ss``, joined, and how many there are."""
        sub = ss.sub
        sids = sub.sid_bytes
        held = ss.holds(topic)
        auth = self._auth
        if auth.enabled and sub.pattern is not None and not auth.can_read(sub.user, topic):
            return self._lost_entitlement(ss, topic, literal, held)
        flt = sub.filter
        want_ts = sub.want_ts
        send_key = ss.send_key
        select = sub.select
        if flt is None and held is None and select is None:
            # the common case: every put goes out whole, deletions mean nothing to it
            parts = [
                encode_keyed(
                    literal,
                    sids,
                    c.key if send_key else None,
                    c.new.body,
                    c.new.bookmark,
                    format_timestamp_us(c.new.timestamp_us) if want_ts else None,
                )
                for c in changes
                if c.new is not None
            ]
            return b"".join(parts), len(parts)
        parts = []
        oof = ss.oof
        key_steps: tuple[tuple[str, ...], ...] | None = None
        for c in changes:
            key = c.key
            new = c.new
            if new is None:
                if held is not None and key in held:
                    held.discard(key)
                    if oof and c.old is not None:
                        last = c.old.body
                        parts.append(
                            encode_oof(
                                literal,
                                sids,
                                key if send_key else None,
                                reason or DELETED,
                                last if select is None else self._project(select, last),
                            )
                        )
                continue
            ts = (
                format_timestamp_us(new.timestamp_us)
                if want_ts or (flt is not None and "TIMESTAMP" in flt.functions)
                else ""
            )
            if flt is not None and not flt.matches(
                MessageView(topic, new.body, bookmark=new.bookmark, timestamp=ts)
            ):
                if held is not None and key in held:
                    held.discard(key)
                    if oof:
                        parts.append(
                            encode_oof(
                                literal,
                                sids,
                                key if send_key else None,
                                MATCH,
                                new.body if select is None else self._project(select, new.body),
                                new.bookmark,
                            )
                        )
                continue
            body = new.body
            if ss.delta and held is not None and key in held and c.old is not None:
                if key_steps is None:
                    key_steps = self._key_steps(topic)
                delta = _delta(c.old.body, body, key_steps)
                if delta is not None:
                    if delta == b"{}":
                        continue  # nothing changed
                    if select is not None and not self._selected_change(select, c.old.body, body):
                        continue  # nothing it selects changed: its copy is current
                    body = delta
            if select is not None:
                body = self._project(select, body)
            if held is not None:
                held.add(key)
            parts.append(
                encode_keyed(
                    literal,
                    sids,
                    key if send_key else None,
                    body,
                    new.bookmark,
                    ts if want_ts else None,
                )
            )
        return b"".join(parts), len(parts)

    def _selected_change(self, select: SelectList, old: bytes, new: bytes) -> bool:
        """Whether a field ``select`` delivers changed from ``old`` to ``new`` (records
        whose delta, without the key fields, is an object)."""
        changes = _delta(old, new, ())
        return changes is None or select.project(changes) != EMPTY_OBJECT

    def _lost_entitlement(
        self, ss: SowSubscriber, topic: str, literal: bytes, held: set[str] | None
    ) -> tuple[bytes, int]:
        """``ss`` may no longer read ``topic``: what it holds there goes out of focus."""
        if not held:
            return b"", 0
        keys = sorted(held)
        held.clear()
        if not ss.oof:
            return b"", 0
        sids = ss.sub.sid_bytes
        parts = [
            encode_oof(literal, sids, k if ss.send_key else None, ENTITLEMENT, b"") for k in keys
        ]
        return b"".join(parts), len(parts)

    def revoke(self, topic_literal: Callable[[str], bytes]) -> int:
        """Entitlements changed: every subscriber that may no longer read a topic it
        holds records of gets ``entitlement`` notices for them now. Returns how many."""
        auth = self._auth
        sent = 0
        for ss in list(self.subscribers.values()):
            if ss.held is None:
                continue
            for topic, keys in list(ss.held.items()):
                if keys and auth.enabled and not auth.can_read(ss.sub.user, topic):
                    data, n = self._lost_entitlement(ss, topic, topic_literal(topic), keys)
                    if n:
                        ss.sub.outbound.send_messages(data, n)
                        ss.sub.progress.delivered += n
                        sent += n
        return sent


def _delta(old: bytes, new: bytes, key_steps: tuple[tuple[str, ...], ...]) -> bytes | None:
    """The delta body from ``old`` to ``new`` (``b"{}"``: no change), or None to send
    ``new`` whole (not JSON objects, or a field was dropped)."""
    try:
        before = orjson.loads(old)
        after = orjson.loads(new)
    except orjson.JSONDecodeError:
        return None
    if type(before) is not dict or type(after) is not dict:
        return None
    d = diff(before, after, key_steps)
    return None if d is None else orjson.dumps(d)
