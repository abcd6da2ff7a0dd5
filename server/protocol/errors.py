"""The one catalog of failure reasons, as typed exceptions.

Every failure a client can see is one of the reason strings of docs/protocol.md ("Failure
reasons"). Each reason has exactly one exception class here, so code raises a *kind* of
failure and the session turns it into a failure ack with the exact wire string; the REST
layer maps the same classes to 4xx JSON bodies.

Hierarchy::

    SpoolError                      root of everything Spool raises on purpose
    └── ProtocolFailure             has a wire ``reason`` (docs/protocol.md)
        ├── LogonRequired           "logon required"
        ├── NameInUse               "name in use"
        ├── NameInUseElsewhere      "name in use elsewhere" (another instance of the fabric)
        ├── AuthFailure             "auth failure"
        ├── NotEntitled             "not entitled"
        ├── InvalidTopic            "invalid topic"
        ├── BadRegexTopic           "bad regex topic"
        ├── BadFilter               "bad filter"
        ├── InvalidBookmark         "invalid bookmark"
        ├── BookmarkNotFound        "bookmark not found"
        ├── InvalidOptions          "invalid options"
        ├── SubIdInUse              "subid in use"
        ├── SubIdNotFound           "subid not found"
        ├── InvalidCommand          "invalid command"
        ├── InvalidMessage          "invalid message"
        ├── Duplicate               "duplicate"
        ├── TxlogFull               "txlog full"
        ├── SlowClient              "slow client"
        ├── HeartbeatTimeout        "heartbeat"
        └── ShuttingDown            "shutting down"
"""

from __future__ import annotations

from typing import ClassVar, Final


class SpoolError(Exception):
    """Root of every exception Spool raises on purpose."""


class ProtocolFailure(SpoolError):
    """A failure with a reason string from docs/protocol.md.

    Attributes:
        reason: the exact wire string clients match on.
        detail: a human explanation (never contains secrets); may be empty.
    """

    reason: ClassVar[str] = "invalid message"

    def __init__(self, detail: str = "") -> None:
        super().__init__(detail or self.reason)
        self.detail = detail

    def __str__(self) -> str:
        return f"{self.reason}: {self.detail}" if self.detail else self.reason

    def ack_fields(self) -> dict[str, str | int | float]:
        """Extra header fields of the failure ack (none for most reasons)."""
        return {}


class LogonRequired(ProtocolFailure):
    reason = "logon required"


class NameInUse(ProtocolFailure):
    reason = "name in use"


class NameInUseElsewhere(ProtocolFailure):
    """A client of this name is logged on at another instance of the replication fabric
    (docs/replication.md "Client names"): two publishers with one name would share a
    publisher identity, and replication would take one's messages for the other's."""

    reason = "name in use elsewhere"


class AuthFailure(ProtocolFailure):
    """``auth failure``; with ``retry_after`` (seconds) when the logon was refused unchecked
    because of the throttle or a full password-check pool (docs/protocol.md)."""

    reason = "auth failure"

    def __init__(self, detail: str = "", retry_after: float | None = None) -> None:
        super().__init__(detail)
        self.retry_after = retry_after

    def ack_fields(self) -> dict[str, str | int | float]:
        if self.retry_after is None:
            return {}
        # whole seconds, rounded up, at least 1 (like HTTP Retry-After)
        return {"retry_after": max(1, int(self.retry_after + 0.999))}


class NotEntitled(ProtocolFailure):
    reason = "not entitled"


class InvalidTopic(ProtocolFailure):
    reason = "invalid topic"


class BadRegexTopic(ProtocolFailure):
    reason = "bad regex topic"


class BadFilter(ProtocolFailure):
    reason = "bad filter"


class InvalidBookmark(ProtocolFailure):
    reason = "invalid bookmark"


class BookmarkNotFound(ProtocolFailure):
    reason = "bookmark not found"


class InvalidOptions(ProtocolFailure):
    reason = "invalid options"


class SubIdInUse(ProtocolFailure):
    reason = "subid in use"


class SubIdNotFound(ProtocolFailure):
    reason = "subid not found"


class InvalidCommand(ProtocolFailure):
    reason = "invalid command"


class InvalidMessage(ProtocolFailure):
    reason = "invalid message"


class Duplicate(ProtocolFailure):
    reason = "duplicate"


class TxlogFull(ProtocolFailure):
    reason = "txlog full"


class SlowClient(ProtocolFailure):
    reason = "slow client"


class HeartbeatTimeout(ProtocolFailure):
    reason = "heartbeat"


class LimitExceeded(ProtocolFailure):
    """A connection or user already holds as many subscriptions, replays or pending
    queries as ``Tuning`` allows (the detail names the limit and its element)."""

    reason = "limit exceeded"


class ShuttingDown(ProtocolFailure):
    reason = "shutting down"


ALL_FAILURES: Final[tuple[type[ProtocolFailure], ...]] = (
    LogonRequired,
    NameInUse,
    NameInUseElsewhere,
    AuthFailure,
    NotEntitled,
    InvalidTopic,
    BadRegexTopic,
    BadFilter,
    InvalidBookmark,
    BookmarkNotFound,
    InvalidOptions,
    SubIdInUse,
    SubIdNotFound,
    InvalidCommand,
    InvalidMessage,
    Duplicate,
    TxlogFull,
    SlowClient,
    HeartbeatTimeout,
    ShuttingDown,
    LimitExceeded,
)

BY_REASON: Final[dict[str, type[ProtocolFailure]]] = {cls.reason: cls for cls in ALL_FAILURES}


def failure_for(reason: str, detail: str = "", retry_after: float | None = None) -> ProtocolFailure:
    """Rebuild the typed exception for a reason string received on the wire (client side);
    ``retry_after`` is the ack's field of that name (an ``auth failure`` of the throttle)."""
    cls = BY_REASON.get(reason)
    if cls is None:
        err = InvalidMessage(detail or reason)
        return err
    if cls is AuthFailure:
        return AuthFailure(detail, retry_after)
    return cls(detail)
