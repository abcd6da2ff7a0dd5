"""The TLS elements of ``<Admin>`` and of each ``<Transport>``: one listener, one TLS.

``Certificate``, ``PrivateKey``, ``CACertificate``, ``ClientAuth`` and ``AllowPlaintext``
may be given in the Admin section and in any transport. One HTTP server serves every
transport and the admin on one port, so they describe the same listener: every section
that gives them must give the same values (``build`` checks it, like ``InetAddr``), and
a section without them shares the others'.

Within one section: ``Certificate`` and ``PrivateKey`` go together; ``CACertificate``
and ``ClientAuth`` need them; ``ClientAuth`` ``optional`` or ``required`` needs a
``CACertificate`` (the CA that client certificates must chain to); ``AllowPlaintext``
``true`` contradicts a ``Certificate``. The files are read and checked here
(:func:`spool.server.tls.context.load_server_pair`), so an unreadable file, a key that does not
match its certificate or an encrypted key is refused at start-up at its element.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from spool.server.config.model import TlsConfig
from spool.server.config.values import Context, read_bool, read_choice, read_path
from spool.server.config.xmltree import Children, XmlNode, fail
from spool.server.tls.context import CLIENT_AUTH, load_server_pair
from spool.server.tls.errors import TlsError

__all__ = ["TLS_ELEMENTS", "ListenerPart", "read_listener"]

#: the elements this module reads, for the section specs (none repeats)
TLS_ELEMENTS: Final = {
    "Certificate": False,
    "PrivateKey": False,
    "CACertificate": False,
    "ClientAuth": False,
    "AllowPlaintext": False,
}


@dataclass(frozen=True, slots=True)
class ListenerPart:
    """The listener settings one section gave.

    Attributes:
        tls: the TLS settings, if the section gave a Certificate.
        tls_node: the element the agreement check reports at (Certificate).
        allow_plaintext: AllowPlaintext, if given.
        plaintext_node: its element.
    """

    tls: TlsConfig | None
    tls_node: XmlNode | None
    allow_plaintext: bool | None
    plaintext_node: XmlNode | None


def read_listener(kids: Children, ctx: Context) -> ListenerPart:
    """Read the TLS elements of one section (see the module docstring)."""
    cert_node = kids.one("Certificate")
    key_node = kids.one("PrivateKey")
    ca_node = kids.one("CACertificate")
    auth_node = kids.one("ClientAuth")
    plain_node = kids.one("AllowPlaintext")
    allow = read_bool(plain_node, ctx) if plain_node is not None else None
    if cert_node is None:
        for node in (key_node, ca_node, auth_node):
            if node is not None:
                raise fail(node, f"{node.tag} needs a <Certificate> (and <PrivateKey>) beside it")
        return ListenerPart(None, None, allow, plain_node)
    if key_node is None:
        raise fail(cert_node, "a <Certificate> needs its <PrivateKey> beside it")
    if allow and plain_node is not None:
        raise fail(
            plain_node,
            "AllowPlaintext true contradicts the <Certificate> beside it: the listener "
            "serves TLS; remove AllowPlaintext",
        )
    certificate = read_path(cert_node, ctx)
    private_key = read_path(key_node, ctx)
    ca = read_path(ca_node, ctx) if ca_node is not None else None
    client_auth = "none"
    if auth_node is not None:
        client_auth = read_choice(auth_node, ctx, tuple(CLIENT_AUTH), "ClientAuth")
    if client_auth != "none" and ca is None:
        assert auth_node is not None
        raise fail(
            auth_node,
            f"ClientAuth {client_auth} needs a <CACertificate>: the CA that client "
            "certificates must chain to",
        )
    try:
        load_server_pair(certificate, private_key, ca, client_auth)
    except TlsError as exc:
        at = {"Certificate": cert_node, "PrivateKey": key_node, "CACertificate": ca_node}
        raise fail(at[exc.element] or cert_node, str(exc)) from None
    tls = TlsConfig(certificate, private_key, ca, client_auth)
    return ListenerPart(tls, cert_node, allow, plain_node)
