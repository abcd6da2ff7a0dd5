"""Quotas: what one connection and one user may hold at once.

Every subscription, replay and queued SOW query costs the broker memory and work on
behalf of one client; without a bound, one client's 5,000 subscriptions made every other
client's publishes wait behind their fan-out. The quotas come from ``<Tuning>``
(docs/configuration.md), each per connection and per user (all the connections of one
authenticated user together; without ``<Users>`` there is no user to count against):

- **subscriptions** (``MaxSubscriptionsPerConnection`` / ``...PerUser``): live, bookmark,
  SOW and queue subscriptions;
- **replays** (``MaxReplaysPerConnection`` / ``...PerUser``): bookmark subscriptions still
  reading history (replaying, or paused before they caught up);
- **pending queries** (``MaxPendingQueriesPerConnection`` / ``...PerUser``): SOW queries and
  the snapshots of ``sow_and_subscribe`` queued or streaming.

The command that would pass one fails with ``limit exceeded`` and a detail naming the
limit, its element and the count; nothing else of the connection changes. A
``replace`` of an existing subscription does not count twice.

Owned by the event loop; the counts are taken from the sessions themselves when a
command asks (a subscribe is not the hot path), so no counter can drift.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Final

from spool.server.config import TuningConfig
from spool.server.protocol.errors import LimitExceeded
from spool.server.session import Session
from spool.server.subscription import SessionSubscription

__all__ = ["Quotas"]

#: a bookmark subscription's states while it reads history
_REPLAYING: Final = frozenset({"replaying", "paused"})


class Quotas:
    """The quotas of one instance.

    Args:
        tuning: the limits.
        sessions_of: the open sessions of a user name (the client registry's index).
    """

    def __init__(
        self, tuning: TuningConfig, sessions_of: Callable[[str], Iterable[Session]]
    ) -> None:
        self._tuning = tuning
        self._sessions_of = sessions_of

    def _peers(self, session: Session) -> Iterable[Session]:
        """The connections the per-user limits count over (none without a user)."""
        user = session.user
        return self._sessions_of(user.name) if user is not None else ()

    def admit_subscription(
        self, session: Session, replacing: SessionSubscription | None = None
    ) -> None:
        """Refuse a subscription that would pass the connection's or the user's quota.

        Raises:
            LimitExceeded: naming the limit.
        """
        t = self._tuning
        held = len(session.subs) - (replacing is not None)
        _check(held, t.max_subscriptions_per_connection, "subscriptions", "this connection",
               "MaxSubscriptionsPerConnection")  # fmt: skip
        peers = self._peers(session)
        if peers:
            held = sum(len(s.subs) for s in peers) - (replacing is not None)
            _check(held, t.max_subscriptions_per_user, "subscriptions", _of_user(session),
                   "MaxSubscriptionsPerUser")  # fmt: skip

    def admit_replay(self, session: Session, replacing: SessionSubscription | None = None) -> None:
        """Refuse a bookmark subscription that would pass the replay quotas.

        Raises:
            LimitExceeded: naming the limit.
        """
        t = self._tuning
        busy = replacing is not None and replacing.progress.state in _REPLAYING
        held = _replaying(session) - busy
        _check(held, t.max_replays_per_connection, "replays", "this connection",
               "MaxReplaysPerConnection")  # fmt: skip
        peers = self._peers(session)
        if peers:
            held = sum(_replaying(s) for s in peers) - busy
            _check(held, t.max_replays_per_user, "replays", _of_user(session),
                   "MaxReplaysPerUser")  # fmt: skip

    def admit_query(self, session: Session, pending: Callable[[Session], int]) -> None:
        """Refuse a SOW query that would pass the pending-query quotas (``pending``: a
        connection's queries queued or streaming).

        Raises:
            LimitExceeded: naming the limit.
        """
        t = self._tuning
        _check(pending(session), t.max_pending_queries_per_connection, "pending queries",
               "this connection", "MaxPendingQueriesPerConnection")  # fmt: skip
        peers = self._peers(session)
        if peers:
            _check(sum(pending(s) for s in peers), t.max_pending_queries_per_user,
                   "pending queries", _of_user(session), "MaxPendingQueriesPerUser")  # fmt: skip


def _replaying(session: Session) -> int:
    return sum(
        1
        for sub in session.subs.values()
        if sub.bookmark is not None and sub.progress.state in _REPLAYING
    )


def _of_user(session: Session) -> str:
    return f"user {session.user_name!r}"


def _check(held: int, limit: int, what: str, whose: str, element: str) -> None:
    if held >= limit:
        raise LimitExceeded(
            f"{whose} holds {held} {what}, the most Tuning/{element} allows ({limit})"
        )
