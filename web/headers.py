"""Security headers on every HTTP response of the admin address.

The dashboard is an operator's console: a page that another site could frame, script or
read would be an attack on the broker. Every response carries:

- ``Content-Security-Policy``: scripts, styles, images, fonts and connections only from
  this origin (``'self'``, which includes ``ws:``/``wss:`` to it), no inline script or
  style attribute, no plugins, no ``<base>``, forms post only here, and
  ``frame-ancestors 'none'``. The templates keep every script and style in static files
  for this (``static/js/theme-init.js`` is the one classic script).
- ``X-Frame-Options: DENY`` (for browsers that predate ``frame-ancestors``).
- ``Referrer-Policy: no-referrer``: dashboard URLs (client names, topics) never leak.
- ``X-Content-Type-Options: nosniff``.
- ``Cross-Origin-Opener-Policy: same-origin``.
- on a TLS listener, ``Strict-Transport-Security: max-age=31536000`` (browsers ignore it
  for IP addresses and for certificates they do not trust).

Headers a route set itself are kept. A pure ASGI middleware: websockets pass untouched.
"""

from __future__ import annotations

from typing import Final

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["CSP", "SecurityHeadersMiddleware"]

CSP: Final = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "font-src 'self'",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    )
)
_HEADERS: Final[tuple[tuple[bytes, bytes], ...]] = (
    (b"content-security-policy", CSP.encode()),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-content-type-options", b"nosniff"),
    (b"cross-origin-opener-policy", b"same-origin"),
)
_HSTS: Final = (b"strict-transport-security", b"max-age=31536000")


class SecurityHeadersMiddleware:
    """Adds the headers of the module docstring to every HTTP response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        extra = _HEADERS + ((_HSTS,) if scope.get("scheme") == "https" else ())

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers") or [])
                present = {name.lower() for name, _ in headers}
                headers.extend(h for h in extra if h[0] not in present)
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)
