"""The TLS facts of a connection in the ASGI scope (the ASGI "TLS" extension) for uvicorn.

uvicorn serves TLS but leaves the connection's TLS facts out of the ASGI scope, and
those are what mutual TLS needs: which client certificate the handshake verified. The
ASGI specification has an extension for exactly this (``scope["extensions"]["tls"]``
with ``client_cert_chain``, ``client_cert_name``, ``client_cert_error``,
``tls_version``, ``cipher_suite``, ``server_cert``), which uvicorn does not implement.

The least invasive correct way found: uvicorn takes protocol *classes* for ``http`` and
``ws`` (its public ``Config`` arguments). :func:`tls_protocols` returns subclasses of the
classes uvicorn would pick itself ("auto"), which override one method:
``connection_made``, called by asyncio once the TLS handshake is done (and, for a
websocket, again on the websocket protocol with the same transport after the upgrade).
It reads the connection's SSL object once and wraps the protocol's ASGI app (the ``app``
attribute uvicorn's protocols call for every request) in a per-connection shim that adds
the extension to every scope of that connection. Nothing of uvicorn is copied or patched;
on a plain connection the app is left as it is. Reading the facts costs one certificate
parse per connection that sent a client certificate, nothing per message.

``client_cert_name`` is the RFC 4514 subject (``cryptography``'s form, the one
``<CertificateSubject>`` is kept in); ``server_cert`` is None (the listener knows its own
certificate); the chain holds the client's leaf certificate only (Python 3.11's ``ssl``
exposes no more).
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Final, TypedDict

from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.protocols.http.auto import AutoHTTPProtocol

from spool.server.peer import Peer
from spool.server.tls.certificate import der_subject
from spool.web.wsdirect import DirectWebSocketProtocol

__all__ = ["TlsExtension", "peer_of", "tls_of", "tls_protocols"]

_TLS_VERSIONS: Final = {"TLSv1.2": 0x0303, "TLSv1.3": 0x0304}


class TlsExtension(TypedDict):
    """``scope["extensions"]["tls"]`` as the ASGI TLS extension defines it."""

    server_cert: str | None
    client_cert_chain: list[str]
    client_cert_name: str | None
    client_cert_error: str | None
    tls_version: int | None
    cipher_suite: int | None


def _cipher_ids(context: ssl.SSLContext) -> dict[str, int]:
    # OpenSSL ids are 0x0300XXXX with the IANA number in the low 16 bits
    return {c["name"]: int(c["id"]) & 0xFFFF for c in context.get_ciphers()}


def extension_for(ssl_object: ssl.SSLObject) -> TlsExtension:
    """The extension's values for one established TLS connection."""
    der = ssl_object.getpeercert(binary_form=True)
    chain = [ssl.DER_cert_to_PEM_cert(der)] if der else []
    name = der_subject(der) if der else None
    cipher = ssl_object.cipher()
    suite = _cipher_ids(ssl_object.context).get(cipher[0]) if cipher else None
    version = ssl_object.version()
    return {
        "server_cert": None,
        "client_cert_chain": chain,
        "client_cert_name": name,
        "client_cert_error": None,  # a certificate that failed verification fails the handshake
        "tls_version": _TLS_VERSIONS.get(version) if version else None,
        "cipher_suite": suite,
    }


class _TlsScope:
    """One connection's app: the real app, with the TLS extension in every scope."""

    __slots__ = ("app", "tls")

    def __init__(self, app: ASGIApp, tls: TlsExtension) -> None:
        self.app = app
        self.tls = tls

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope["extensions"] = {**(scope.get("extensions") or {}), "tls": self.tls}
        await self.app(scope, receive, send)


class _TlsScopeProtocol(asyncio.Protocol):
    """The mixin: ``connection_made`` adds the shim once the handshake is done."""

    app: ASGIApp

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        ssl_object = transport.get_extra_info("ssl_object")
        if isinstance(ssl_object, ssl.SSLObject):
            self.app = _TlsScope(self.app, extension_for(ssl_object))


def tls_protocols() -> tuple[type[asyncio.Protocol], type[asyncio.Protocol]]:
    """The ``http`` and ``ws`` protocol classes for ``uvicorn.Config`` on a TLS listener:
    uvicorn's HTTP class and the broker's websocket class (web/wsdirect.py), each with
    the TLS facts in the scope."""
    http = type("TlsHttpProtocol", (_TlsScopeProtocol, AutoHTTPProtocol), {})
    ws = type("TlsWebSocketProtocol", (_TlsScopeProtocol, DirectWebSocketProtocol), {})
    return http, ws


def tls_of(scope: Scope) -> TlsExtension | None:
    """The TLS extension of a scope, None on a plain connection."""
    extensions = scope.get("extensions") or {}
    tls = extensions.get("tls")
    return tls if isinstance(tls, dict) else None  # type: ignore[return-value]


def peer_of(scope: Scope) -> Peer:
    """The far end of a connection: address, TLS version, verified client subject."""
    client = scope.get("client")
    host, port = (str(client[0]), int(client[1])) if client else ("unknown", 0)
    tls = tls_of(scope)
    if tls is None:
        return Peer(host, port)
    version = {v: k for k, v in _TLS_VERSIONS.items()}.get(tls.get("tls_version") or 0)
    return Peer(host, port, version or "TLS", tls.get("client_cert_name"))
