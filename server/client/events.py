"""What the client's session state reports: received values and the events that carry them.

:meth:`spool.server.client.state.SessionState.receive_frame` turns the bytes of one frame into a
list of these events, in the order their messages arrived. The API layer
(:class:`spool.server.client.client.Client`) applies them in that order; an HA client applies
the same events to its own stores. The events hold no asyncio objects: a subscription is
whatever handle type ``S`` the owner registered with the state.

Values: :class:`Message` (a delivered message), :class:`Ack`, :class:`LogonInfo`.

Events: :class:`Delivered` (a run of messages for one subscription, ``oof`` notices
included), :class:`QueryRecords` and :class:`QueryEnded` (a SOW query's result),
:class:`Replied`
(the final ack of a command somebody waits for), :class:`Persisted` (the broker's last
persisted sequence advanced), :class:`Replicated` (and its replicated one, with the logon
option ``replicated``), :class:`FailoverChanged` (the safety of failing over from this
broker changed, with the logon option ``failover``), :class:`PositionReported` (a bookmark
subscription's durable
position), :class:`Completed`, :class:`Failed` (a failure no command waits for),
:class:`HeartbeatReceived` and :class:`ConnectionFailed` (the broker sent a frame that
cannot be parsed: the connection must end).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Generic, TypeAlias, TypeVar

from spool.server.protocol.errors import ProtocolFailure
from spool.server.protocol.frame import FrameError
from spool.server.protocol.message import Delivery

#: a message delivered to a subscription (topic, data, sub_ids, bookmark, timestamp,
#: correlation_id, header, json()): built by the frame splitter for clients without a
#: header dict per message (server/protocol/message.py says how).
Message = Delivery

S = TypeVar("S")


@dataclass(slots=True)
class Ack:
    """An ack from the broker.

    Attributes:
        kind: the ack type (``processed``, ``completed``, ``persisted``, ...).
        cid: the command id it answers; ``None`` on conflated persisted acks.
        status: ``success`` or ``failure``.
        reason: the failure reason string of docs/protocol.md, on failures.
        header: the whole header, short keys.
    """

    kind: str
    cid: str | None
    status: str
    reason: str | None
    header: dict[str, Any]

    @property
    def ok(self) -> bool:
        return self.status == "success"

    @classmethod
    def from_header(cls, header: dict[str, Any]) -> Ack:
        return cls(
            kind=header.get("a", ""),
            cid=header.get("cid"),
            status=header.get("status", "success"),
            reason=header.get("reason"),
            header=header,
        )


@dataclass(slots=True)
class LogonInfo:
    """What the logon ack told the client.

    Attributes:
        client_name: the name the broker registered.
        last_seq: the last sequence number the broker persisted for this client name
            (where publishing resumes after a restart).
        last_bookmark: the bookmark of that last persisted message.
        version: the broker's version string.
        heartbeat: the negotiated heartbeat interval in seconds, if any.
        failover: for a broker that replicates, ``safe`` when every destination that
            takes this client's topics holds persisted acks (effective sync type sync),
            else ``unsafe``; None from a broker that does not replicate.
        async_links: the destinations that do not hold persisted acks now (configured
            async, downgraded, or upgrading): failing over loses what they lack.
        down_links: the destinations not connected now.
        options: the logon options the broker took (docs/protocol.md "Logon options");
            empty from a broker that predates them.
    """

    client_name: str
    last_seq: int
    last_bookmark: str | None
    version: str
    heartbeat: float | None
    failover: str | None = None
    async_links: tuple[str, ...] = ()
    down_links: tuple[str, ...] = ()
    options: tuple[str, ...] = ()

    @property
    def failover_safe(self) -> bool:
        """Whether failing over from this broker keeps every persisted message."""
        return self.failover == "safe"

    @property
    def safety(self) -> FailoverSafety | None:
        """What the logon ack said of failing over (None: the broker does not replicate)."""
        if self.failover is None:
            return None
        return FailoverSafety(self.failover, self.async_links, self.down_links, "logon")


def _names(value: object) -> tuple[str, ...]:
    """A comma list of destination names as a tuple."""
    return tuple(x for x in str(value or "").split(",") if x)


@dataclass(frozen=True, slots=True)
class FailoverSafety:
    """Whether failing over from the broker keeps every persisted message, and why not.

    Attributes:
        failover: ``safe`` or ``unsafe`` (docs/protocol.md "Logon").
        async_links: destinations that do not hold persisted acks now.
        down_links: destinations not connected now.
        detail: what changed (``logon`` for the logon ack's snapshot).
    """

    failover: str
    async_links: tuple[str, ...] = ()
    down_links: tuple[str, ...] = ()
    detail: str = ""

    @property
    def safe(self) -> bool:
        return self.failover == "safe"

    @classmethod
    def from_header(cls, header: dict[str, Any]) -> FailoverSafety:
        return cls(
            str(header.get("failover", "unsafe")),
            _names(header.get("async_links")),
            _names(header.get("down_links")),
            str(header.get("detail", "")),
        )


@dataclass(slots=True)
class Delivered(Generic[S]):
    """``messages`` matched ``subscription``, in arrival order.

    Consecutive deliveries to the same subscription share one event (a frame of a
    thousand deliveries is one event, not a thousand); any other event in between starts
    a new one, so applying the events in order keeps the arrival order exactly.
    """

    subscription: S
    messages: list[Message]


@dataclass(slots=True)
class QueryRecords(Generic[S]):
    """Records of a query result (``sow`` messages) for the handle registered under their
    ``qid``, in arrival order; consecutive ones share an event like deliveries."""

    query: S
    records: list[Message]


@dataclass(slots=True)
class QueryEnded(Generic[S]):
    """The ``group_end`` of a query result: every record of it has arrived."""

    query: S


@dataclass(slots=True)
class Replied:
    """The final ack of command ``cid``, which the owner is waiting for.

    A ``completed`` success is not final (the ``processed`` ack answers the command); a
    failure of any kind is.
    """

    cid: str
    ack: Ack


@dataclass(slots=True)
class Persisted:
    """The broker persisted every publish of this connection up to ``seq``."""

    seq: int


@dataclass(slots=True)
class Replicated:
    """Every publish of this connection up to ``seq`` is durable at the broker and at
    every replication destination that takes it (the ``replicated`` ack)."""

    seq: int


@dataclass(slots=True)
class FailoverChanged:
    """The broker's ``failover`` notice: the safety of failing over from it changed."""

    safety: FailoverSafety


@dataclass(slots=True)
class PositionReported(Generic[S]):
    """The broker's periodic durable position of a bookmark subscription (its resume point)."""

    subscription: S
    bookmark: str | None


@dataclass(slots=True)
class Completed(Generic[S]):
    """The subscription's replay reached the live point or the range end."""

    subscription: S
    ack: Ack


@dataclass(slots=True)
class Failed(Generic[S]):
    """A failure ack nobody waits for: a fire-and-forget publish, or a subscription that
    cannot continue (``subscription`` is set then, and the subscription is over).

    Attributes:
        ack: the failure ack as received.
        error: the same failure as its typed exception.
        subscription: the subscription it names, if the state knows it.
    """

    ack: Ack
    error: ProtocolFailure
    subscription: S | None


@dataclass(slots=True)
class HeartbeatReceived:
    """The broker's heartbeat: the connection is alive."""


@dataclass(slots=True)
class ConnectionFailed:
    """The broker sent a frame that cannot be parsed; the stream cannot be trusted any more.

    Events of the messages before the malformed one come first. The owner must close the
    connection; the state ignores every later frame.
    """

    error: FrameError


#: the one heartbeat event (it carries nothing, so it is never allocated per beat).
HEARTBEAT: Final = HeartbeatReceived()

#: everything :meth:`~spool.server.client.state.SessionState.receive_frame` returns.
Event: TypeAlias = (
    Delivered[S]
    | QueryRecords[S]
    | QueryEnded[S]
    | Replied
    | Persisted
    | Replicated
    | FailoverChanged
    | PositionReported[S]
    | Completed[S]
    | Failed[S]
    | HeartbeatReceived
    | ConnectionFailed
)

__all__ = [
    "HEARTBEAT",
    "Ack",
    "Completed",
    "ConnectionFailed",
    "Delivered",
    "Event",
    "Failed",
    "FailoverChanged",
    "FailoverSafety",
    "HeartbeatReceived",
    "LogonInfo",
    "Message",
    "Persisted",
    "PositionReported",
    "QueryEnded",
    "QueryRecords",
    "Replicated",
    "Replied",
]
