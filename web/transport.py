"""The websocket transport: ASGI adapter between uvicorn and a broker Session.

This is the thin I/O shell around the sans-I/O codec: frames received from the socket go to
``Session.receive``; the session's writer calls :meth:`AsgiTransport.send`. It is a raw ASGI
endpoint rather than a Starlette ``WebSocket`` handler because it sits on the hottest path
of the broker and needs nothing but ``receive`` and ``send``.
"""

from __future__ import annotations

import contextlib

from starlette.types import Receive, Scope, Send

from server.engine import Broker
from server.session import CLOSE_NORMAL
from web.tls import peer_of

#: "try again later": the transport is disabled or the broker is not ready.
CLOSE_TRY_AGAIN = 1013


class AsgiTransport:
    """The Session's view of one ASGI websocket connection."""

    def __init__(self, send: Send, remote: str) -> None:
        self._send = send
        self.remote = remote
        self._closed = False

    async def send(self, frame: bytes) -> None:
        await self._send({"type": "websocket.send", "bytes": frame})

    async def close(self, code: int, reason: str) -> None:
        if self._closed:
            return
        self._closed = True
        await self._send({"type": "websocket.close", "code": code, "reason": reason[:120]})

    def disconnected(self) -> None:
        """The peer went away: nothing can be sent any more (not even a close frame)."""
        self._closed = True


class WebsocketEndpoint:
    """ASGI app for ``/amps/json``: one broker session per connection."""

    def __init__(self, broker: Broker, transport_name: str = "websocket-json") -> None:
        self.broker = broker
        self.transport_name = transport_name

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        broker = self.broker
        message = await receive()
        if message["type"] != "websocket.connect":
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
        await send({"type": "websocket.accept"})
        peer = peer_of(scope)
        transport = AsgiTransport(send, peer.address)
        session = broker.connect(transport, self.transport_name, peer)
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
