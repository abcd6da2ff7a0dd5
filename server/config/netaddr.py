"""Network addresses as the configuration and ``--listen`` write them: ``HOST:PORT``, and
the web origins of browser pages: ``scheme://HOST[:PORT]``.

An ``InetAddr`` is ``HOST:PORT``, ``[IPv6]:PORT`` or a bare ``PORT`` (meaning 127.0.0.1).
IP literals are kept in canonical form so that two spellings of one address compare equal
(the transports and the Admin must share one address); host names are lowercased and
compared as written. :func:`is_loopback` decides the rule that an instance without users
may only listen where nobody else can reach it.

A :class:`WebOrigin` is what a browser sends in ``Origin`` (RFC 6454): scheme, host and
port, nothing else. :func:`parse_origin` reads one (``Admin/AllowedOrigins`` and the
header alike) into a canonical form in which two spellings of one origin compare equal:
lowercase scheme and host, IP literals canonical, the scheme's default port made explicit.
:func:`parse_host_header` reads a ``Host`` header the same way, so the broker can tell
whether a page comes from its own origin (web/origins.py).
"""

from __future__ import annotations

import ipaddress
import re
from typing import Final, NamedTuple

from spool.server.config.errors import InetAddrError, OriginError

__all__ = [
    "WebOrigin",
    "check_host",
    "check_port",
    "format_inet_addr",
    "is_loopback",
    "parse_host_header",
    "parse_inet_addr",
    "parse_origin",
]

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


#: the port a URL of each web scheme means when it names none
DEFAULT_PORTS: Final = {"http": 80, "https": 443}
_ORIGIN: Final = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://([^/?#@\s]*)/?")


class WebOrigin(NamedTuple):
    """A browser page's origin: ``scheme://host:port``, canonical (see the module doc).

    Attributes:
        scheme: ``http`` or ``https``.
        host: lowercase host name or canonical IP literal (IPv6 without brackets).
        port: always given (the scheme's default when the text named none).
    """

    scheme: str
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        if self.port == DEFAULT_PORTS[self.scheme]:
            return f"{self.scheme}://{host}"
        return f"{self.scheme}://{host}:{self.port}"


def _split_host_port(text: str, what: str) -> tuple[str, int | None]:
    """``host`` and the port of ``host[:port]`` / ``[v6][:port]`` (None: no port)."""
    if text.startswith("["):
        close = text.find("]")
        rest = text[close + 1 :] if close > 0 else "?"
        if close < 0 or (rest and not rest.startswith(":")):
            raise OriginError(f"{what}: {text!r} is not [IPv6] or [IPv6]:PORT")
        host, port_text = text[1:close], rest[1:] if rest else None
        try:
            if ipaddress.ip_address(host).version != 6:
                raise ValueError(host)
        except ValueError as exc:
            raise OriginError(f"{what}: {host!r} inside brackets is not an IPv6 address") from exc
    else:
        host, sep, port_text_or_empty = text.partition(":")
        if ":" in port_text_or_empty:
            raise OriginError(f"{what}: an IPv6 address needs brackets ({text!r})")
        port_text = port_text_or_empty if sep else None
    if not host:
        raise OriginError(f"{what}: {text!r} has no host")
    port: int | None = None
    if port_text is not None:
        if not port_text.isdigit() or not port_text.isascii() or not 0 < int(port_text) < 65536:
            raise OriginError(f"{what}: port {port_text!r} is not a number in 1..65535")
        port = int(port_text)
    try:
        return check_host(host), port
    except InetAddrError as exc:
        raise OriginError(f"{what}: {exc}") from exc


def parse_origin(text: str) -> WebOrigin:
    """Read a web origin: ``http://HOST[:PORT]`` or ``https://HOST[:PORT]`` (a single
    trailing ``/`` is tolerated; a path, query, user name or other scheme is not).

    Raises:
        OriginError: anything else (``null``, ``*``, a URL with a path...), with the reason.
    """
    text = text.strip()
    if text in ("null", "*"):
        raise OriginError(
            f"{text!r} is not an origin: it would match pages of any site"
            if text == "*"
            else "'null' is the origin of sandboxed and local pages, which any site can make"
        )
    match = _ORIGIN.fullmatch(text)
    if match is None:
        raise OriginError(f"{text!r} is not scheme://host[:port] (e.g. https://ops.example.com)")
    scheme = match.group(1).lower()
    if scheme not in DEFAULT_PORTS:
        raise OriginError(f"{text!r}: the scheme of a web page is http or https, not {scheme!r}")
    host, port = _split_host_port(match.group(2), repr(text))
    return WebOrigin(scheme, host, port if port is not None else DEFAULT_PORTS[scheme])


def parse_host_header(value: str, scheme: str) -> WebOrigin:
    """The origin a request addressed to ``Host: value`` over ``scheme`` (``http``,
    ``https``, ``ws`` or ``wss``) belongs to: the broker's own origin for that request.

    Raises:
        OriginError: not ``host[:port]``.
    """
    web = "https" if scheme in ("https", "wss") else "http"
    host, port = _split_host_port(value.strip(), "Host")
    return WebOrigin(web, host, port if port is not None else DEFAULT_PORTS[web])
