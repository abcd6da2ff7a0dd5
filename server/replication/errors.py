"""Failures of replication, one class per reason.

A link that is refused or fails carries its reason to both sides: the side that found it
sends a ``refuse`` message with the reason string (:attr:`LinkRefused.reason`, stable, a
peer may match on it) and a detail meant for an operator, logs it, and closes. Every
refusal is a :class:`LinkRefused` subclass; :class:`ReplicationProtocolError` is a peer
that does not speak the protocol, :class:`BootstrapFailed` a bootstrap that cannot
complete. The admin surface raises the others; web/admin.py maps them to 404 and 409. The
reasons and when each is sent are listed in docs/replication.md "Refusal reasons".
"""

from __future__ import annotations

from typing import ClassVar, Final

from spool.server.protocol.errors import SpoolError

__all__ = [
    "REASONS",
    "AuthRefused",
    "BootstrapFailed",
    "BootstrapNotAllowed",
    "DestinationNotFound",
    "GroupMismatch",
    "LinkRefused",
    "LinkReplaced",
    "MutualBootstrap",
    "NameConflict",
    "NotAccepting",
    "NotEntitledToReplicate",
    "PeerShuttingDown",
    "ProtocolRefusal",
    "ReconnectRequested",
    "RecordRefused",
    "ReplicationError",
    "ReplicationNotConfigured",
    "ReplicationProtocolError",
    "SourceBootstrapping",
    "SyncChangeRefused",
    "ValidationFailed",
    "ValidationReported",
    "VersionMismatch",
    "refusal_for",
]


class ReplicationError(SpoolError):
    """Root of replication failures."""


class ReplicationProtocolError(ReplicationError):
    """The peer sent bytes that are not the replication protocol (or not now)."""

    reason: ClassVar[str] = "protocol error"


class LinkRefused(ReplicationError):
    """A link that cannot go on.

    Attributes:
        reason: the stable reason string sent to the peer.
        detail: what an operator needs to know (and do).
    """

    reason: ClassVar[str] = "refused"

    def __init__(self, detail: str) -> None:
        super().__init__(f"{self.reason}: {detail}")
        self.detail = detail


class VersionMismatch(LinkRefused):
    reason = "version mismatch"


class AuthRefused(LinkRefused):
    reason = "auth failure"


class NotAccepting(LinkRefused):
    reason = "not accepting"


class NameConflict(LinkRefused):
    reason = "name conflict"


class GroupMismatch(LinkRefused):
    reason = "group mismatch"


class ValidationFailed(LinkRefused):
    """A validation check failed (docs/replication.md "Validation").

    Attributes:
        check: the check's name (``txlog``, ``replicate``, ...).
        topic: the topic (or topic block) it failed for.
        fix: the exact change that makes it pass.
    """

    reason = "validation failed"

    def __init__(self, check: str, topic: str, problem: str, fix: str) -> None:
        super().__init__(f"[{check}] {topic!r}: {problem}; fix: {fix}")
        self.check = check
        self.topic = topic
        self.fix = fix


class ValidationReported(LinkRefused):
    """The peer's validation failed (its detail names the check and the fix)."""

    reason = "validation failed"


class NotEntitledToReplicate(LinkRefused):
    reason = "not entitled"


class RecordRefused(LinkRefused):
    """The destination's pipeline refused a replicated record (e.g. its log is full)."""

    reason = "record refused"


class LinkReplaced(LinkRefused):
    reason = "replaced"


class ReconnectRequested(LinkRefused):
    reason = "reconnect"


class PeerShuttingDown(LinkRefused):
    reason = "shutting down"


class SourceBootstrapping(LinkRefused):
    """The instance asked for a bootstrap is bootstrapping itself (the requester retries,
    unless it finds the two are waiting on each other: :class:`MutualBootstrap`)."""

    reason = "bootstrapping"


class BootstrapNotAllowed(LinkRefused):
    """The source cannot serve this bootstrap (e.g. its log records none of the topics)."""

    reason = "bootstrap refused"


class SourceDamaged(LinkRefused):
    """The source's log holds damaged records waiting for a repair: it does not serve a
    copy that would miss them (the requester tries another source, or later)."""

    reason = "source damaged"


class ProtocolRefusal(LinkRefused):
    """The peer broke the protocol (sent as a refusal so the other side logs why)."""

    reason = ReplicationProtocolError.reason


#: reason string -> class, for a refusal received from a peer
REASONS: Final[dict[str, type[LinkRefused]]] = {
    cls.reason: cls
    for cls in (
        VersionMismatch,
        AuthRefused,
        NotAccepting,
        NameConflict,
        GroupMismatch,
        NotEntitledToReplicate,
        RecordRefused,
        LinkReplaced,
        ReconnectRequested,
        PeerShuttingDown,
        ProtocolRefusal,
        ValidationReported,
        SourceBootstrapping,
        BootstrapNotAllowed,
        SourceDamaged,
    )
}


def refusal_for(reason: str, detail: str) -> LinkRefused:
    """The refusal a peer sent, as its class (unknown reasons keep their text)."""
    cls = REASONS.get(reason)
    return cls(detail) if cls is not None else LinkRefused(f"{reason}: {detail}")


class BootstrapFailed(ReplicationError):
    """A bootstrap that cannot complete: the instance must not serve (it would serve an
    incomplete state); start-up stops with the reason."""


class MutualBootstrap(BootstrapFailed):
    """Two instances, both empty, are each configured to bootstrap from the other: neither
    can ever finish."""


class ReplicationNotConfigured(ReplicationError):
    """The instance does not replicate (REST 404 "not configured")."""


class DestinationNotFound(ReplicationError):
    """No destination of that name is configured."""

    def __init__(self, name: str) -> None:
        super().__init__(f"no replication destination named {name!r}")
        self.name = name


class SyncChangeRefused(ReplicationError):
    """A downgrade or upgrade that cannot be done (already so, configured async, or a
    downgrade below ``Tuning/MinimumSyncDestinations``)."""
