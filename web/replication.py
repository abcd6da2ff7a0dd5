"""The ``/replication`` endpoint: a raw ASGI websocket handed to the replication service.

Like web/transport.py for clients, this is the thin I/O shell around the sans-I/O link
protocol: bytes received from the socket go to
:meth:`spool.server.replication.inbound.InboundLink.receive` (awaited: a link whose batches pile
up stops being read, and TCP backpressure reaches the source); the link writes through
:class:`AsgiLinkTransport`. Authentication is the link's own (its hello, or the client
certificate the TLS listener verified, handed over as the :class:`~spool.server.peer.Peer`), as
the protocol logon is for clients; the endpoint only refuses connections when the
``amps-replication`` transport is disabled or the instance is not ready, and any handshake
that names a page's ``Origin``: a replication link is never a browser page (the source's
dialer sends no ``Origin``), so a page that opens ``/replication`` - which, on a broker
without users, would let it inject messages as a peer - is refused before the upgrade
(web/origins.py says why pages get no ambient authority).

Every connection's liveness is watched from its accept (web/wsdirect.py's extension, with
``Replication/LinkTimeout``): one that hears nothing from its source for that long is
aborted, and the link ends saying so.

The first message tells the two conversations apart (:meth:`Replication.open
<spool.server.replication.service.Replication.open>`, shared with the tests' in-memory fabric):
``hello`` opens a link, ``bootstrap`` asks for a copy of this instance's state
(server/replication/bootsource.py; authenticated the same way), ``repair`` asks for records
another instance's log holds fenced (server/replication/repairsource.py). A bootstrap
request is answered even while this instance is bootstrapping itself (with ``busy``,
which is how two instances bootstrapping from each other find out), a repair request while
it waits for its own repair at start-up; links wait until it is ready.
"""

from __future__ import annotations

import contextlib

from starlette.datastructures import Headers
from starlette.types import Message, Receive, Scope, Send

from spool.server.engine import Broker
from spool.server.replication.bootsource import BootstrapSource
from spool.server.replication.errors import NotAccepting
from spool.server.replication.frames import first_type
from spool.server.replication.inbound import InboundLink
from spool.server.replication.transport import LinkLost
from spool.web.tls import peer_of
from spool.web.transport import CLOSE_TRY_AGAIN
from spool.web.wsdirect import LIVENESS_EXTENSION, Watch


class AsgiLinkTransport:
    """An inbound link's view of one ASGI websocket."""

    def __init__(self, send: Send, remote: str) -> None:
        self._send = send
        self._remote = remote
        self._closed = False

    @property
    def remote(self) -> str:
        return self._remote

    async def send(self, data: bytes) -> None:
        if self._closed:
            raise LinkLost(f"connection from {self._remote} is closed")
        try:
            await self._send({"type": "websocket.send", "bytes": data})
        except Exception as exc:  # the server's own disconnect errors
            self._closed = True
            raise LinkLost(f"connection from {self._remote} lost: {exc}") from exc

    async def close(self, code: int = 1000, reason: str = "") -> None:
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            await self._send({"type": "websocket.close", "code": code, "reason": reason[:120]})

    def disconnected(self) -> None:
        self._closed = True


class ReplicationEndpoint:
    """ASGI app for ``/replication``: one inbound link per connection."""

    def __init__(self, broker: Broker, transport_name: str) -> None:
        self.broker = broker
        self.transport_name = transport_name

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        broker = self.broker
        message = await receive()
        if message["type"] != "websocket.connect":
            return
        origin = Headers(scope=scope).get("origin")
        if origin is not None:
            client = scope.get("client")
            broker.events.emit(
                "warning", "replication", "origin_refused", origin=origin,
                remote=f"{client[0]}:{client[1]}" if client else "unknown",
            )  # fmt: skip
            await send({"type": "websocket.close", "code": 1008, "reason": "forbidden origin"})
            return
        replication = broker.replication
        booting = broker.bootstrapper is not None and broker.bootstrapper.running
        if (
            replication is None
            or broker.stopping
            or not (broker.ready or booting or broker.starting_repair)
            or not broker.transport_accepting(self.transport_name)
        ):
            await self._try_again(send)
            return
        await send({"type": "websocket.accept"})
        peer = peer_of(scope)
        transport = AsgiLinkTransport(send, peer.address)
        timeout = broker.config.link_timeout
        silences: list[float] = []
        watch = _watch_of(scope)
        if watch is not None:
            watch(timeout, silences.append)
        first = await _first_bytes(receive)
        if first is None:
            transport.disconnected()
            return
        boot = broker.bootstrapper
        try:
            opened = replication.open(
                first, transport, peer, lambda: list(broker.sow.topics),
                boot.busy_for if boot is not None else None,
            )  # fmt: skip
        except NotAccepting:
            await transport.close(CLOSE_TRY_AGAIN, "not accepting replication")
            return
        broker.clients.transport_opened(self.transport_name)
        try:
            if isinstance(opened, BootstrapSource):
                await _serve_copy(opened, first, receive)
            else:
                await _serve_link(opened, first, receive)
        finally:
            transport.disconnected()
            if isinstance(opened, InboundLink) and silences:
                opened.lost(
                    f"nothing heard from {peer.address} for {silences[0]:.1f}s "
                    f"(Replication/LinkTimeout {timeout:g}s)"
                )
            else:
                opened.lost()
            if isinstance(opened, BootstrapSource):
                await opened.wait()  # its reader of the log ends before the slot is freed
            broker.clients.transport_closed(self.transport_name)

    @staticmethod
    async def _try_again(send: Send) -> None:
        await send(
            {
                "type": "websocket.close",
                "code": CLOSE_TRY_AGAIN,
                "reason": "not accepting replication",
            }
        )


async def _serve_link(link: InboundLink, first: bytes, receive: Receive) -> None:
    """Push a link's bytes into it, awaited (its backpressure reaches the source)."""
    await link.receive(first)
    while True:
        message = await receive()
        kind = message["type"]
        if kind == "websocket.receive":
            await link.receive(_bytes(message))
        elif kind == "websocket.disconnect":
            return


async def _serve_copy(source: BootstrapSource, first: bytes, receive: Receive) -> None:
    """Push a bootstrap requester's bytes into the copy it is served
    (server/replication/bootsource.py; while this instance bootstraps itself the answer is
    ``busy``)."""
    source.receive(first)
    while True:
        message = await receive()
        kind = message["type"]
        if kind == "websocket.receive":
            source.receive(_bytes(message))
        elif kind == "websocket.disconnect":
            return


def _watch_of(scope: Scope) -> Watch | None:
    """The server's liveness watch of this connection (web/wsdirect.py; a server without
    the extension keeps its own keepalive)."""
    extension = (scope.get("extensions") or {}).get(LIVENESS_EXTENSION)
    watch: Watch | None = extension["watch"] if extension else None
    return watch


def _bytes(message: Message) -> bytes:
    data = message.get("bytes")
    if data is None:
        data = (message.get("text") or "").encode()
    assert isinstance(data, bytes)
    return data


async def _first_bytes(receive: Receive) -> bytes | None:
    """The connection's first bytes, enough to tell a bootstrap from a link (None: it
    went away first)."""
    got = b""
    while first_type(got) is None:
        message = await receive()
        if message["type"] != "websocket.receive":
            return None
        got += _bytes(message)
    return got
