"""What the Python client raises when the failure is not a broker failure ack.

A broker refusal (a failure ack) is raised as its typed
:class:`~server.protocol.errors.ProtocolFailure` subclass, the same classes the broker
itself uses, so a caller matches ``except errors.NotEntitled`` on both sides of the wire.
Everything else the client raises is rooted here::

    ClientError             a client-side failure that is not a broker failure ack
    └── Disconnected        the connection ended; carries the broker's close reason and code

When the connection ends because the broker sent a frame the client cannot parse, the
:class:`Disconnected` is chained (``__cause__``) to the
:class:`~server.protocol.frame.FrameError` that says what was wrong with it.
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


__all__ = ["ClientError", "Disconnected"]
