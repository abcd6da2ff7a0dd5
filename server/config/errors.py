"""What the configuration loader raises, and the messages callers may match on.

Errors::

    SpoolError (spool.server.protocol.errors)
    ├── ConfigError            a configuration that cannot run: .path, .line, .message
    ├── InetAddrError          an address that is not HOST:PORT (also a ValueError)
    └── OriginError            a web origin that is not scheme://host[:port] (also a ValueError)

(:class:`spool.server.passwords.InvalidPasswordHash` and :class:`spool.server.units.UnitError` are
raised by the value parsers the loader uses; the loader turns both into a
:class:`ConfigError` at the element that holds the value.)
"""

from __future__ import annotations

from typing import Final

from spool.server.protocol.errors import SpoolError

__all__ = [
    "BIND_REQUIRES_USERS",
    "PLAINTEXT_NEEDS_PERMISSION",
    "SHARED_ADDRESS",
    "SHARED_TLS",
    "ConfigError",
    "InetAddrError",
    "OriginError",
]

#: The loopback rule, refused by the file loader and by the command-line overrides alike.
BIND_REQUIRES_USERS: Final = "binding a non-loopback address requires <Users> (authentication)"
#: The TLS rule: passwords, tokens and messages never cross the network in clear text
#: unless the operator says a TLS-terminating proxy is in front.
PLAINTEXT_NEEDS_PERMISSION: Final = (
    "a non-loopback listener with <Users> needs TLS (<Certificate> and <PrivateKey>), or "
    "<AllowPlaintext>true</AllowPlaintext> when a TLS-terminating proxy is in front: "
    "otherwise passwords, tokens and messages cross the network in clear text"
)
#: Why the TLS elements of every transport and the Admin must agree.
SHARED_TLS: Final = (
    "all transports and Admin share one listener, so one TLS setting (one HTTP server "
    "serves /amps/json, /api and the dashboard on one port)"
)
#: Why every transport and the Admin must agree on one InetAddr.
SHARED_ADDRESS: Final = (
    "all transports and Admin must share one InetAddr in this version (one HTTP server "
    "serves /amps/json, /api and the dashboard)"
)


class ConfigError(SpoolError):
    """A configuration that Spool refuses to run with.

    Attributes:
        path: the element, e.g. ``/SpoolConfig/TransactionLog/FlushInterval``; repeated
            siblings carry a 1-based index (``/SpoolConfig/Transports/Transport[2]/Type``);
            empty when the whole file is at fault (it cannot be read).
        line: the element's line in the file, or ``None`` when the value did not come from a
            file (the embedded default, a command-line override).
        message: what is wrong and, where it helps, what to do. Never contains a token or a
            password hash.
        source: the file name (or ``<string>``), for callers that want to show it.
    """

    def __init__(
        self, path: str, line: int | None, message: str, *, source: str | None = None
    ) -> None:
        self.path = path
        self.line = line
        self.message = message
        self.source = source
        super().__init__(path, line, message)

    def __str__(self) -> str:
        if self.path:
            where = self.path if self.line is None else f"{self.path} (line {self.line})"
        elif self.line is not None:
            where = f"line {self.line}"
        else:
            return f"config error: {self.message}"
        return f"config error at {where}: {self.message}"


class InetAddrError(SpoolError, ValueError):
    """An address that is not ``HOST:PORT``, ``[IPv6]:PORT`` or ``PORT``."""


class OriginError(SpoolError, ValueError):
    """A web origin that is not ``http://HOST[:PORT]`` or ``https://HOST[:PORT]``."""
