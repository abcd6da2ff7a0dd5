"""The websocket transport: ASGI adapter between uvicorn and a broker Session.

This is the thin I/O shell around the sans-I/O codec: frames received from the socket go to
``Session.receive``; the session's writer calls :meth:`AsgiTransport.send_pieces`. It is a raw ASGI
endpoint rather than a Starlette ``WebSocket`` handler because it sits on the hottest path
of the broker and needs nothing but ``receive`` and ``send``.

Before anything is read, the page the handshake comes from is checked (web/origins.py): a
page of another origin is refused when the broker has no users (it would be served as a
trusted local client): the upgrade is accepted and closed at once with 1008 and a reason
naming ``Admin/AllowedOrigins``, which a browser shows the page (the status of a refused
upgrade it hides). With users it may only log on with a password or token.
A connection is also refused before the upgrade while too many connections have not
logged on yet (server/clients.py: ``MaxConnectionsBeforeLogon[PerAddress]``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

from starlette.datastructures import Headers
from starlette.types import Receive, Scope, Send

from spool.server.engine import Broker
from spool.server.session import CLOSE_NORMAL
from spool.web.origins import OriginPolicy, OriginVerdict
from spool.web.tls import peer_of
from spool.web.wsdirect import PIECES_EXTENSION, SendPieces

#: "try again later": the transport is disabled or the broker is not ready.
CLOSE_TRY_AGAIN = 1013


class AsgiTransport:
    """The Session's view of one ASGI websocket connection.

    Args:
        send: the ASGI ``send``.
        remote: the peer's address.
        send_pieces: the server's pieces extension (web/wsdirect.py: a frame written
            from its pieces without joining them), None when the server has none.
    """

    def __init__(self, send: Send, remote: str, send_pieces: SendPieces | None = None) -> None:
        self._send = send
        self.remote = remote
        self._closed = False
        self._send_pieces = send_pieces

    async def send_pieces(self, pieces: Sequence[bytes], size: int) -> None:
        """Send one frame made of ``pieces`` (``size`` bytes): through the extension when
        the server has it, else joined (one piece is not copied by the join)."""
        if self._send_pieces is not None:
            await self._send_pieces(pieces, size)
        else:
            await self._send({"type": "websocket.send", "bytes": b"".join(pieces)})

    async def close(self, code: int, reason: str) -> None:
        if self._closed:
            return
        self._closed = True
        await self._send({"type": "websocket.close", "code": code, "reason": reason[:120]})

    def disconnected(self) -> None:
        """The peer went away: nothing can be sent any more (not even a close frame)."""
        self._closed = True


def pieces_of(scope: Scope) -> SendPieces | None:
    """The pieces extension's send of a connection (None: the server has none)."""
    extension = (scope.get("extensions") or {}).get(PIECES_EXTENSION)
    return extension["send_pieces"] if isinstance(extension, dict) else None


class WebsocketEndpoint:
    """ASGI app for ``/amps/json``: one broker session per connection.

    Args:
        broker: the engine.
        transport_name: the configured transport this path serves.
        origins: which pages may connect (default: ``Admin/AllowedOrigins`` of the
            broker's configuration).
    """

    def __init__(
        self,
        broker: Broker,
        transport_name: str = "websocket-json",
        origins: OriginPolicy | None = None,
    ) -> None:
        self.broker = broker
        self.transport_name = transport_name
        self.origins = origins or OriginPolicy(
            broker.config.admin.allowed_origins, auth_enabled=broker.auth.enabled
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        broker = self.broker
        message = await receive()
        if message["type"] != "websocket.connect":
            return
        headers = Headers(scope=scope)
        verdict = self.origins.verdict(
            headers.get("origin"), headers.get("host"), str(scope.get("scheme", "ws"))
        )
        if not verdict.trusted and not broker.auth.enabled:
            await self._refuse(scope, send, verdict)
            return
        if not broker.ready or not broker.transport_accepting(self.transport_name):
            await send(
                {
                    "type": "websocket.close",
                    "code": CLOSE_TRY_AGAIN,
                    "reason": "not accepting connections",
                }
            )
            return
        peer = peer_of(scope)
        if broker.clients.before_logon_refusal(peer.host) is not None:
            # too many connections have not logged on yet: refused before the upgrade
            # (HTTP 403), like a transport that does not take connections
            await send(
                {
                    "type": "websocket.close",
                    "code": CLOSE_TRY_AGAIN,
                    "reason": "too many connections waiting to log on",
                }
            )
            return
        await send({"type": "websocket.accept"})
        transport = AsgiTransport(send, peer.address, pieces_of(scope))
        session = broker.connect(transport, self.transport_name, peer)
        session.web_origin = verdict.origin
        session.foreign_origin = not verdict.trusted
        try:
            while True:
                message = await receive()
                kind = message["type"]
                if kind == "websocket.receive":
                    data = message.get("bytes")
                    if data is None:
                        data = (message.get("text") or "").encode()
                    session.receive(data)
                elif kind == "websocket.disconnect":
                    break
        finally:
            if not session.closed:
                transport.disconnected()
                with contextlib.suppress(Exception):
                    await session.close("connection lost", CLOSE_NORMAL)
            else:
                await session.closed_event.wait()

    async def _refuse(self, scope: Scope, send: Send, verdict: OriginVerdict) -> None:
        """Accept the upgrade and close at once with 1008 and a reason naming the fix:
        a browser hides the HTTP status of a refused upgrade from the page (its script
        sees code 1006 and nothing else), but shows it a close's reason. Nothing the page
        sends is read."""
        client = scope.get("client")
        remote = f"{client[0]}:{client[1]}" if client else "unknown"
        self.broker.events.emit(
            "warning", "session", "origin_refused", origin=verdict.origin, remote=remote
        )
        await send({"type": "websocket.accept"})
        await send({"type": "websocket.close", "code": 1008, "reason": refusal(verdict.origin)})


def refusal(origin: str | None) -> str:
    """The close reason for a page of a refused origin (at most 123 bytes, the most a
    close frame carries)."""
    shown = (origin or "null").encode()[:60].decode(errors="ignore")
    return f"origin {shown} may not use this broker: add it to Admin/AllowedOrigins"
