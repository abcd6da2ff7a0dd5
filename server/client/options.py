"""The options of one client connection: :class:`ClientOptions`.

:class:`~spool.server.client.client.Client` and
:class:`~spool.server.client.ha.HAClient` take the same options, documented and checked
here once. Each takes them as ``options=ClientOptions(...)`` or as keyword arguments of
the same names (:class:`ClientKeywords`), not both; :func:`resolve` makes one object of
either. The HA client hands its options to the client of every connection it makes, so an
option added here reaches both clients (docs/python-client.md "Options").
"""

from __future__ import annotations

import ssl as _ssl
from dataclasses import dataclass, field, fields
from typing import Final, TypedDict

from spool.server.client.connection import Connector, connect_websocket
from spool.server.client.errors import InvalidOption

#: what ``reused_seq`` may be
REUSED_SEQ_POLICIES: Final = ("warn", "refuse", "allow")


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientOptions:
    """How a client connects and logs on (docs/python-client.md "Options").

    Raises:
        InvalidOption: a value out of its range (at construction).
    """

    user_id: str | None = None
    """The logon's user, when the instance has Users."""
    password: str | None = field(default=None, repr=False)
    """The logon's password (or token) for ``user_id`` (kept out of the ``repr``)."""
    heartbeat: float | None = None
    """Seconds: the broker beats at this interval and drops a client silent for two; the
    client beats back at the same interval. None: no heartbeat."""
    queue_size: int = 10_000
    """Messages buffered per subscription before the reader stops reading (backpressure
    reaches the broker, which then applies its slow-client policy); 0: unbounded."""
    max_size: int = 64 * 1024 * 1024
    """The largest frame accepted from the broker, in bytes."""
    connect_timeout: float = 10.0
    """Seconds one connection attempt may take: the connect and the logon, each."""
    connector: Connector = connect_websocket
    """Opens the transport (default: a websocket); tests pass a double."""
    ssl: _ssl.SSLContext | None = None
    """TLS context for a ``wss://`` URL (:func:`spool.server.client.client_context`: a CA
    file, a client certificate for mutual TLS); without one a ``wss://`` URL verifies the
    broker against the system's CAs. Refused with a ``ws://`` URL."""
    logon_options: str | None = None
    """The logon's ``o``: ``failover`` (the broker's failover notices update
    ``Client.safety``), ``replicated`` (``replicated`` acks update
    ``Client.replicated_seq``); docs/protocol.md "Logon options"."""
    reused_seq: str = "warn"
    """A publish given a ``seq`` at or below the highest this client name already used (or
    the broker persisted, from the logon) is dropped by the broker as a duplicate:
    ``warn`` (a ``ReusedSequenceWarning``), ``refuse`` (raise ``ReusedSequence``, nothing
    sent) or ``allow`` (a deliberate resend)."""

    def __post_init__(self) -> None:
        if self.heartbeat is not None and not self.heartbeat > 0:
            raise InvalidOption(f"heartbeat must be > 0 seconds or None, not {self.heartbeat}")
        if self.queue_size < 0:
            raise InvalidOption(f"queue_size must be >= 0 (0: unbounded), not {self.queue_size}")
        if self.max_size <= 0:
            raise InvalidOption(f"max_size must be > 0 bytes, not {self.max_size}")
        if not self.connect_timeout > 0:
            raise InvalidOption(f"connect_timeout must be > 0 seconds, not {self.connect_timeout}")
        if self.reused_seq not in REUSED_SEQ_POLICIES:
            raise InvalidOption(
                f"reused_seq must be {', '.join(REUSED_SEQ_POLICIES)}, not {self.reused_seq!r}"
            )

    def changed(self) -> set[str]:
        """The names of the options not at their defaults."""
        default = _DEFAULT
        return {f.name for f in fields(self) if getattr(self, f.name) != getattr(default, f.name)}


class ClientKeywords(TypedDict, total=False):
    """:class:`ClientOptions` as keyword arguments (``Client(url, name, heartbeat=1)``);
    the same names and types (a unit test keeps the two equal)."""

    user_id: str | None
    password: str | None
    heartbeat: float | None
    queue_size: int
    max_size: int
    connect_timeout: float
    connector: Connector
    ssl: _ssl.SSLContext | None
    logon_options: str | None
    reused_seq: str


_DEFAULT: Final = ClientOptions()


def resolve(options: ClientOptions | None, keywords: ClientKeywords) -> ClientOptions:
    """The options a client was given: ``options``, or the ``keywords`` made into one.

    Raises:
        InvalidOption: both given, or a value out of its range.
    """
    if options is None:
        return ClientOptions(**keywords)
    if keywords:
        raise InvalidOption(
            f"{', '.join(sorted(keywords))}: give options=ClientOptions(...) or keyword "
            "arguments, not both"
        )
    return options


__all__ = ["REUSED_SEQ_POLICIES", "ClientKeywords", "ClientOptions", "resolve"]
