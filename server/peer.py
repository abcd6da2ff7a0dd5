"""Who is at the other end of a connection, as the transport saw it.

The websocket transport (web/transport.py) builds a :class:`Peer` from the ASGI scope:
the client address and, on a TLS listener, the negotiated version and the subject of the
client certificate the TLS layer verified (mutual TLS). The logon uses the address for
the throttle and the subject to find the certificate's user; the admin API shows both.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Peer"]


@dataclass(frozen=True, slots=True)
class Peer:
    """One connection's far end.

    Attributes:
        host: the client's IP address (as the ASGI server reports it).
        port: its port.
        tls_version: ``TLSv1.3`` / ``TLSv1.2`` on a TLS listener, None in plain text.
        client_subject: RFC 4514 subject of a client certificate that verified against the
            listener's ``CACertificate``; None when none was presented (or asked for).
    """

    host: str
    port: int
    tls_version: str | None = None
    client_subject: str | None = None

    @property
    def address(self) -> str:
        """``host:port``, IPv6 in brackets."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @classmethod
    def parse(cls, remote: str) -> Peer:
        """A peer from a ``host:port`` string (``[v6]:port`` too); port 0 if there is none."""
        host, sep, port = remote.rpartition(":")
        if not sep or not port.isdigit():
            return cls(remote, 0)
        return cls(host.strip("[]"), int(port))
