"""Which other instances the fabric page may call, and the page's own CSP for it.

The fabric page (templates/fabric.html, static/js/fabric.js) merges the ``/api/fabric``
graphs of every instance it can reach. The dashboard's CSP (web/headers.py) lets a page
connect only to its own origin; the fabric page's CSP adds exactly the origins an operator
configured on this instance (docs/security.md "The fabric page"):

- the admin URL of each ``Replication/Destination`` (Spool serves the admin API on the
  port of ``/replication``; ``https`` for a TLS link);
- ``Admin/AllowedOrigins`` (the other dashboards of the fabric: origins this instance
  already trusts to call it).

Each call still needs the *other* instance's consent: it answers a page of this origin
only if that origin is in its own ``AllowedOrigins`` (CORS, web/origins.py), and with
``<Users>`` only with a bearer token the operator gave the page for that instance (kept in
the browser tab's ``sessionStorage``, never in a cookie or on this server).
"""

from __future__ import annotations

from spool.server.config import Config, format_inet_addr
from spool.web.headers import CSP

__all__ = ["fabric_csp", "fabric_peer_origins"]


def fabric_peer_origins(config: Config) -> list[str]:
    """The origins of the fabric page's peers, in configuration order, without repeats."""
    origins: list[str] = []
    for dest in config.replication.destinations if config.replication else ():
        scheme = "https" if dest.transport.tls else "http"
        for host, port in dest.transport.addresses:
            origins.append(f"{scheme}://{format_inet_addr(host, port)}")
    origins.extend(config.admin.allowed_origins)
    return list(dict.fromkeys(origins))


def fabric_csp(config: Config) -> str:
    """The dashboard's CSP with the peers' origins added to ``connect-src``."""
    peers = " ".join(fabric_peer_origins(config))
    if not peers:
        return CSP
    return CSP.replace("connect-src 'self'", f"connect-src 'self' {peers}")
