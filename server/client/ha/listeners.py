"""What the HA client tells its listeners, and its replaceable subscription manager.

Connection states (``HAClient.add_connection_state_listener``), in the order the reconnect
handler goes through them::

    DISCONNECTED -> RECONNECTING (per attempt, with the URI) -> CONNECTED -> LOGGED_ON
    -> FAILED_OVER (when the URI differs from the last one) -> PUBLISH_REPLAYED
    -> RESUBSCRIBED ... -> CLOSED (close() or giving up)

and, for one bookmark subscription whose server lacks its resume point (``detail`` is its
``sub_id``): CATCHING_UP -> CAUGHT_UP (the server has it now, or the catch-up policy
resumed it elsewhere after ``catch_up_timeout``).

The subscription manager holds the subscriptions to re-enter after a reconnect, in the
order they were made; the HA client asks it to run a callable per subscription. Replace it
(``HAClient(subscription_manager=...)``) to, e.g., re-enter only some subscriptions.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar


class ConnectionState(enum.Enum):
    DISCONNECTED = "disconnected"
    RECONNECTING = "reconnecting"
    CONNECTED = "connected"
    LOGGED_ON = "logged_on"
    FAILED_OVER = "failed_over"
    PUBLISH_REPLAYED = "publish_replayed"
    RESUBSCRIBED = "resubscribed"
    CATCHING_UP = "catching_up"
    CAUGHT_UP = "caught_up"
    CLOSED = "closed"


@dataclass(frozen=True, slots=True)
class ConnectionStateEvent:
    """A state change; ``uri`` is the server concerned (the new one for FAILED_OVER),
    ``detail`` what caused a DISCONNECTED."""

    state: ConnectionState
    uri: str | None = None
    detail: str = ""


ConnectionStateListener = Callable[[ConnectionStateEvent], None]
ExceptionListener = Callable[[BaseException], None]

T = TypeVar("T")


class SubscriptionManager(Protocol[T]):
    """Keeps the subscriptions to re-enter after a reconnect."""

    def add(self, sub_id: str, subscription: T) -> None: ...

    def remove(self, sub_id: str) -> T | None: ...

    def get(self, sub_id: str) -> T | None: ...

    def all(self) -> list[T]: ...

    async def resubscribe(self, enter: Callable[[T], Awaitable[None]]) -> None:
        """Re-enter every subscription (``enter`` subscribes one on the new connection)."""
        ...


class DefaultSubscriptionManager(Generic[T]):
    """Re-enters every subscription, in the order they were made."""

    def __init__(self) -> None:
        self._subs: dict[str, T] = {}

    def add(self, sub_id: str, subscription: T) -> None:
        self._subs[sub_id] = subscription

    def remove(self, sub_id: str) -> T | None:
        return self._subs.pop(sub_id, None)

    def get(self, sub_id: str) -> T | None:
        return self._subs.get(sub_id)

    def all(self) -> list[T]:
        return list(self._subs.values())

    async def resubscribe(self, enter: Callable[[T], Awaitable[None]]) -> None:
        for sub in list(self._subs.values()):
            await enter(sub)


__all__ = [
    "ConnectionState",
    "ConnectionStateEvent",
    "ConnectionStateListener",
    "DefaultSubscriptionManager",
    "ExceptionListener",
    "SubscriptionManager",
]
