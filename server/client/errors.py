"""What the Python client raises when the failure is not a broker failure ack.

A broker refusal (a failure ack) is raised as its typed
:class:`~spool.server.protocol.errors.ProtocolFailure` subclass, the same classes the broker
itself uses, so a caller matches ``except errors.NotEntitled`` on both sides of the wire.
Everything else the client raises is rooted here::

    ClientError             a client-side failure that is not a broker failure ack
    ├── Disconnected        the connection ended; carries the broker's close reason and code
    ├── InvalidOption       a client option out of its range (also a ``ValueError``)
    └── ReusedSequence      a hand-set sequence the broker would drop (``reused_seq="refuse"``)

and :class:`ReusedSequenceWarning`, the warning of the same case (``reused_seq="warn"``).

When the connection ends because the broker sent a frame the client cannot parse, the
:class:`Disconnected` is chained (``__cause__``) to the
:class:`~spool.server.protocol.frame.FrameError` that says what was wrong with it.
"""

from __future__ import annotations


class ClientError(Exception):
    """A client-side failure that is not a broker failure ack."""


class Disconnected(ClientError):
    """The connection closed.

    Attributes:
        reason: the close reason the broker gave (``"name in use"``, ``"shutting down"``,
            ...), or the client's own (``"invalid message"`` for a malformed frame); empty
            when the connection ended without one.
        code: the WebSocket close code, when there was a close frame.
    """

    def __init__(self, reason: str = "", code: int | None = None) -> None:
        super().__init__(reason or "disconnected")
        self.reason = reason
        self.code = code


class InvalidOption(ClientError, ValueError):
    """A client option out of its range, or given twice (``options=`` and a keyword):
    raised when the options are made, before anything connects."""


def reused_text(seq: int, highest: int) -> str:
    """What a reused hand-set sequence means."""
    return (
        f"publish sequence {seq} is not above {highest}, the highest this client name used "
        "or the broker persisted: the broker acks it as a duplicate and drops it (let the "
        "client number publishes, or resume after LogonInfo.last_seq)"
    )


class ReusedSequence(ClientError):
    """A publish was given a sequence number at or below the highest this client name
    already used: the broker would drop it as a duplicate (``reused_seq="refuse"``).

    Attributes:
        seq: the number given.
        highest: the highest number already used (or persisted by the broker).
    """

    def __init__(self, seq: int, highest: int) -> None:
        super().__init__(reused_text(seq, highest))
        self.seq = seq
        self.highest = highest


class ReusedSequenceWarning(UserWarning):
    """The warning of :class:`ReusedSequence` (``reused_seq="warn"``, the default)."""


__all__ = [
    "ClientError",
    "Disconnected",
    "InvalidOption",
    "ReusedSequence",
    "ReusedSequenceWarning",
    "reused_text",
]
