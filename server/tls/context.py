"""TLS contexts from the configured files: the listener's, and a replication link's.

:func:`load_server_pair` reads and checks a certificate chain, its private key and
optionally a CA bundle, and returns a ready :class:`ssl.SSLContext` with the facts of the
leaf certificate. :func:`load_dial_context` is the other end: the context a replication
link dials its destination's listener with. Both are called by the
configuration loader (so a bad file is a configuration error at its element); the
listener's also on every reload, in a worker thread (they read files).

The policy, the same on every Spool listener:

- TLS 1.2 at least (``minimum_version``); TLS 1.3 with OpenSSL's default suites;
- for TLS 1.2 only ECDHE key exchange with AEAD ciphers (AES-GCM, ChaCha20-Poly1305):
  forward secrecy, no CBC, no RSA key transport (Mozilla's "intermediate" list without
  the DHE suites, which would need Diffie-Hellman parameters);
- no compression, no renegotiation;
- ``ClientAuth``: ``none`` asks for no client certificate; ``optional`` asks for one and
  verifies it against ``CACertificate`` when it is sent; ``required`` refuses a handshake
  without a valid one. A certificate that does not verify fails the handshake either way.

The certificate is checked to parse and to match its key with ``cryptography`` before
OpenSSL loads it, so the error says which file is wrong instead of "PEM lib".
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, NoReturn

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    PublicFormat,
    load_pem_private_key,
)

from spool.server.tls.certificate import CertificateInfo, certificate_info, load_pem_chain
from spool.server.tls.errors import (
    CaCertificateInvalid,
    CertificateInvalid,
    Element,
    KeyMismatch,
    PrivateKeyEncrypted,
    PrivateKeyInvalid,
    TlsFileUnreadable,
)

__all__ = [
    "CLIENT_AUTH",
    "MINIMUM_VERSION",
    "TLS12_CIPHERS",
    "ServerPair",
    "check_pair",
    "load_dial_context",
    "load_server_pair",
]

MINIMUM_VERSION: Final = ssl.TLSVersion.TLSv1_2
TLS12_CIPHERS: Final = ":".join(
    (
        "ECDHE-ECDSA-AES128-GCM-SHA256",
        "ECDHE-RSA-AES128-GCM-SHA256",
        "ECDHE-ECDSA-AES256-GCM-SHA384",
        "ECDHE-RSA-AES256-GCM-SHA384",
        "ECDHE-ECDSA-CHACHA20-POLY1305",
        "ECDHE-RSA-CHACHA20-POLY1305",
    )
)
#: ``ClientAuth`` -> what the server asks of a client.
CLIENT_AUTH: Final[Mapping[str, ssl.VerifyMode]] = {
    "none": ssl.CERT_NONE,
    "optional": ssl.CERT_OPTIONAL,
    "required": ssl.CERT_REQUIRED,
}
_MAX_FILE: Final = 1024 * 1024  # a certificate bundle is kilobytes


@dataclass(frozen=True, slots=True)
class ServerPair:
    """A loaded certificate pair.

    Attributes:
        context: the server context serving it.
        certificate: the leaf certificate's facts.
        chain_length: certificates in the chain file (leaf included).
    """

    context: ssl.SSLContext
    certificate: CertificateInfo
    chain_length: int


def _read(element: Element, path: Path) -> bytes:
    try:
        with path.open("rb") as f:
            data = f.read(_MAX_FILE + 1)
    except OSError as exc:
        raise TlsFileUnreadable(element, path, f"cannot read it: {exc.strerror or exc}") from None
    if len(data) > _MAX_FILE:
        raise TlsFileUnreadable(element, path, "larger than 1 MiB: not a PEM file")
    return data


def _refuse_password() -> NoReturn:
    # OpenSSL asks for a passphrase on the terminal without a callback; never prompt.
    raise PrivateKeyEncrypted(Path("?"), "the private key is encrypted")


def load_server_pair(
    certificate: Path,
    private_key: Path,
    ca_certificate: Path | None = None,
    client_auth: str = "none",
) -> ServerPair:
    """Read, check and load a server's certificate pair (blocking: reads files).

    Raises:
        TlsError: the subclass naming the file at fault and why.
        ValueError: ``client_auth`` is not none/optional/required, or asks for client
            certificates without a CA (the configuration refuses both earlier).
    """
    if client_auth not in CLIENT_AUTH:
        raise ValueError(f"ClientAuth must be none, optional or required, not {client_auth!r}")
    if client_auth != "none" and ca_certificate is None:
        raise ValueError(f"ClientAuth {client_auth} needs a CACertificate to verify clients")
    chain = check_pair(certificate, private_key)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = MINIMUM_VERSION
    context.set_ciphers(TLS12_CIPHERS)
    context.options |= ssl.OP_NO_COMPRESSION | ssl.OP_NO_RENEGOTIATION
    try:
        context.load_cert_chain(certificate, private_key, password=_refuse_password)
    except ssl.SSLError as exc:
        # the files changed between the checks above and this load, or OpenSSL refuses
        # something cryptography accepted (e.g. a key too weak for its security level)
        raise KeyMismatch(private_key, f"OpenSSL refused the pair: {exc.reason or exc}") from None
    if ca_certificate is not None:
        _load_ca(context, ca_certificate)
    context.verify_mode = CLIENT_AUTH[client_auth]
    return ServerPair(context, certificate_info(chain[0]), len(chain))


def check_pair(certificate: Path, private_key: Path) -> list[x509.Certificate]:
    """Read a certificate chain and its private key and check they belong together
    (blocking: reads files); returns the chain, leaf first.

    Raises:
        TlsError: the subclass naming the file at fault and why.
    """
    cert_pem = _read("Certificate", certificate)
    try:
        chain = load_pem_chain(cert_pem)
    except ValueError:
        raise CertificateInvalid(
            certificate, "not a PEM certificate (expected -----BEGIN CERTIFICATE-----)"
        ) from None
    key_pem = _read("PrivateKey", private_key)
    try:
        key = load_pem_private_key(key_pem, password=None)
    except TypeError:
        raise PrivateKeyEncrypted(
            private_key,
            "the private key is encrypted with a passphrase; Spool needs an unencrypted key "
            "(protect the file with its permissions instead)",
        ) from None
    except (ValueError, UnsupportedAlgorithm):
        raise PrivateKeyInvalid(
            private_key, "not a PEM private key (expected -----BEGIN PRIVATE KEY-----)"
        ) from None
    leaf = chain[0]
    spki = (Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
    if leaf.public_key().public_bytes(*spki) != key.public_key().public_bytes(*spki):
        raise KeyMismatch(
            private_key, f"this key does not belong to the certificate in {certificate}"
        )
    return chain


def _load_ca(context: ssl.SSLContext, ca_certificate: Path) -> None:
    ca_pem = _read("CACertificate", ca_certificate)
    try:
        load_pem_chain(ca_pem)
        context.load_verify_locations(cadata=ca_pem.decode("ascii"))
    except (ValueError, UnicodeDecodeError, ssl.SSLError):
        raise CaCertificateInvalid(ca_certificate, "not a PEM bundle of CA certificates") from None


def load_dial_context(
    ca_certificate: Path | None = None,
    certificate: Path | None = None,
    private_key: Path | None = None,
) -> ssl.SSLContext:
    """A context for dialing a Spool listener (a replication link to its destination;
    blocking: reads files).

    The listener is verified against ``ca_certificate`` (the system's CAs without one) and
    its host name checked against the address dialed; the same protocol and cipher policy
    as the listeners. ``certificate`` with ``private_key`` is presented when the listener
    asks (mutual TLS: the destination maps its subject to a user).

    Raises:
        TlsError: the subclass naming the file at fault and why.
        ValueError: a certificate without its key or a key without its certificate (the
            configuration refuses both earlier).
    """
    if (certificate is None) != (private_key is None):
        raise ValueError("a client Certificate and its PrivateKey go together")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # CERT_REQUIRED, check_hostname
    context.minimum_version = MINIMUM_VERSION
    context.set_ciphers(TLS12_CIPHERS)
    context.options |= ssl.OP_NO_COMPRESSION | ssl.OP_NO_RENEGOTIATION
    if ca_certificate is not None:
        _load_ca(context, ca_certificate)
    else:
        context.load_default_certs(ssl.Purpose.SERVER_AUTH)
    if certificate is not None and private_key is not None:
        check_pair(certificate, private_key)
        try:
            context.load_cert_chain(certificate, private_key, password=_refuse_password)
        except ssl.SSLError as exc:
            raise KeyMismatch(
                private_key, f"OpenSSL refused the pair: {exc.reason or exc}"
            ) from None
    return context
