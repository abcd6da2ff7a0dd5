"""The queues' own errors (the admin surface turns them into 404 / 409)."""

from __future__ import annotations

from spool.server.protocol.errors import SpoolError

__all__ = ["ProxiedTransferUnavailable", "QueueError", "QueueNotEntitled", "QueueNotFound"]


class QueueError(SpoolError):
    """Something about a queue that is not a protocol failure."""


class QueueNotFound(QueueError):
    """No queue of that name is configured."""

    def __init__(self, name: str) -> None:
        super().__init__(f"no queue named {name!r}")


class QueueNotEntitled(QueueError):
    """A user asked to see a queue's messages without the entitlement to read them."""

    def __init__(self, user: str | None, name: str) -> None:
        super().__init__(
            f"user {user!r} is not entitled to read queue {name!r} (its messages need the "
            "Read entitlement a consumer of the queue needs)"
        )


class ProxiedTransferUnavailable(QueueError):
    """Proxied transfer moves ownership of messages from an offline instance to this one;
    a queue that is not replicated has every message owned here and nothing to take
    over (refused instead of a switch that does nothing)."""

    def __init__(self, name: str) -> None:
        super().__init__(
            f"queue {name!r} is not replicated (a LocalQueue, or this instance does not "
            "replicate): every message is owned by this instance, so there is no offline "
            "owner to take over from"
        )
