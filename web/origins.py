"""Which web pages may use the broker: the origin check of the websocket and the REST API.

A browser names the origin of the page that makes a request in ``Origin`` (RFC 6454) on
every websocket handshake and on every cross-origin or non-GET request; programs that are
not browsers send none. Whatever page the operator has open can make the browser connect
to ``ws://127.0.0.1:9007/amps/json``, and without ``<Users>`` that connection would be
served like any local client: the page could read and publish everything. So:

- **no Origin**: not a browser page: nothing to check (the rest of the security model
  applies: loopback only without users, the logon with users);
- **the broker's own origin** (the request's scheme and ``Host``, so ``ws``/``http`` and
  ``wss``/``https`` alike): its own dashboard. Without users the ``Host`` must also be a
  loopback name, else a page whose own name was rebound to 127.0.0.1 (DNS rebinding)
  would pass as the broker's own;
- **listed in** ``Admin/AllowedOrigins``: trusted by the operator;
- anything else (``null`` included) is **foreign**.

A foreign page gets no *ambient* authority, i.e. nothing the browser supplies by itself:
its websocket upgrade is refused with HTTP 403 before the upgrade when the broker has no
users; with users it is let through only to a logon that carries a password or token the
page itself holds (:attr:`spool.server.session.Session.foreign_origin`; the logon refuses any
other credential). On the REST side, a foreign page's actions made with the dashboard's
cookie or the no-users trust are refused (web/auth.py); a bearer token works from any
origin. Allowed origins also get CORS headers on the API (web/app.py), or they could not
read an answer.

Pure functions of the request's headers and scheme, tested alone (tests/unit/web/
test_origins.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from spool.server.config import OriginError, WebOrigin, is_loopback, parse_host_header, parse_origin

__all__ = ["OriginPolicy", "OriginVerdict", "Provenance"]

Provenance = Literal["none", "own", "allowed", "foreign"]


@dataclass(frozen=True, slots=True)
class OriginVerdict:
    """Where a request comes from, as far as the browser tells.

    Attributes:
        provenance: ``none`` (no Origin: not a browser page), ``own``, ``allowed`` or
            ``foreign``.
        origin: the ``Origin`` header as sent (None when absent).
    """

    provenance: Provenance
    origin: str | None

    @property
    def trusted(self) -> bool:
        """Whether the page may use what the browser supplies by itself (the no-users
        trust of loopback, the dashboard's cookie)."""
        return self.provenance != "foreign"


class OriginPolicy:
    """Decides the provenance of a request from its ``Origin``, ``Host`` and scheme.

    Args:
        allowed: ``Admin/AllowedOrigins`` (canonical; checked when the config was loaded).
        auth_enabled: whether ``<Users>`` are configured.
    """

    def __init__(self, allowed: Iterable[str], *, auth_enabled: bool) -> None:
        self.allowed: frozenset[WebOrigin] = frozenset(parse_origin(o) for o in allowed)
        self.auth_enabled = auth_enabled

    def verdict(self, origin: str | None, host: str | None, scheme: str) -> OriginVerdict:
        """The provenance of a request.

        Args:
            origin: its ``Origin`` header (None when absent).
            host: its ``Host`` header (None when absent).
            scheme: the ASGI scope's scheme: ``http``, ``https``, ``ws`` or ``wss``.
        """
        if origin is None:
            return OriginVerdict("none", None)
        try:
            page = parse_origin(origin)
        except OriginError:
            return OriginVerdict("foreign", origin)  # "null", or nothing a browser sends
        if page in self.allowed:
            return OriginVerdict("allowed", origin)
        if host is not None and self._own(page, host, scheme):
            return OriginVerdict("own", origin)
        return OriginVerdict("foreign", origin)

    def _own(self, page: WebOrigin, host: str, scheme: str) -> bool:
        try:
            own = parse_host_header(host, scheme)
        except OriginError:
            return False
        if page != own:
            return False
        # without users only loopback is served: a page of another name that reaches this
        # listener got there by rebinding its name, whatever the names compare to
        return self.auth_enabled or is_loopback(own.host) or own.host.endswith(".localhost")
