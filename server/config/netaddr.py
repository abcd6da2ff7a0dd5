"""Network addresses as the configuration and ``--listen`` write them: ``HOST:PORT``.

An ``InetAddr`` is ``HOST:PORT``, ``[IPv6]:PORT`` or a bare ``PORT`` (meaning 127.0.0.1).
IP literals are kept in canonical form so that two spellings of one address compare equal
(the transports and the Admin must share one address); host names are lowercased and
compared as written. :func:`is_loopback` decides the rule that an instance without users
may only listen where nobody else can reach it.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Final

from server.config.errors import InetAddrError

__all__ = ["check_host", "check_port", "format_inet_addr", "is_loopback", "parse_inet_addr"]

_HOST_LABEL: Final = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)")


def check_host(host: str) -> str:
    """The canonical spelling of an IP literal or host name.

    Raises:
        InetAddrError: neither a valid IP address nor a valid host name.
    """
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    if ":" in host:
        raise InetAddrError(f"{host!r} is not a valid IPv6 address")
    labels = host.rstrip(".").split(".")
    if len(host) > 253 or not all(_HOST_LABEL.fullmatch(label) for label in labels):
        raise InetAddrError(f"{host!r} is neither an IP address nor a valid host name")
    if labels[-1].isdigit():
        raise InetAddrError(f"{host!r} is not a valid IPv4 address")
    return host.rstrip(".").lower()


def check_port(port: int) -> int:
    """``port`` itself when it is 0..65535 (0 lets the OS choose).

    Raises:
        InetAddrError: out of range.
    """
    if not 0 <= port <= 65535:
        raise InetAddrError(f"port {port} is out of range (0..65535; 0 lets the OS choose)")
    return port


def parse_inet_addr(text: str) -> tuple[str, int]:
    """Read ``HOST:PORT``, ``[IPv6]:PORT`` or a bare ``PORT`` (which means 127.0.0.1).

    Port 0 is accepted and means "let the operating system choose" (tests use it).

    Returns:
        ``(host, port)``; IPv6 hosts without brackets, IP literals in canonical form.

    Raises:
        InetAddrError: anything else, with the reason.
    """
    text = text.strip()
    if not text:
        raise InetAddrError("the address is empty (expected HOST:PORT)")
    if text.isdigit():
        return "127.0.0.1", check_port(int(text))
    if text.startswith("["):
        close = text.find("]")
        if close < 0 or not text[close + 1 :].startswith(":"):
            raise InetAddrError(f"{text!r} is not [IPv6]:PORT")
        host, port_text = text[1:close], text[close + 2 :]
        try:
            if ipaddress.ip_address(host).version != 6:
                raise ValueError(host)
        except ValueError as exc:
            raise InetAddrError(f"{host!r} inside brackets is not an IPv6 address") from exc
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep:
            raise InetAddrError(f"{text!r} has no port (expected HOST:PORT)")
        if ":" in host:
            raise InetAddrError(f"{text!r}: an IPv6 address needs brackets, e.g. [::1]:9007")
        if not host:
            raise InetAddrError(f"{text!r} has no host (expected HOST:PORT)")
    if not port_text.isdigit() or not port_text.isascii():
        raise InetAddrError(f"port {port_text!r} is not a number")
    return check_host(host), check_port(int(port_text))


def format_inet_addr(host: str, port: int) -> str:
    """``host:port``, with IPv6 hosts in brackets (the inverse of :func:`parse_inet_addr`)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` keeps the server reachable from this machine only."""
    if host.lower() == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False  # a host name may resolve to anything
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback
