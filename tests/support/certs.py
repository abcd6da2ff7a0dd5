"""Throwaway certificates for TLS tests, made with the ``cryptography`` package.

A :class:`TestCA` signs server and client certificates; everything is written as PEM
files in a directory the test owns. Keys are P-256 (fast to generate, so a test can make
a dozen). Validity is relative to ``now`` (a virtual clock's time for expiry tests, the
real time by default, since real TLS handshakes check the real clock)::

    ca = TestCA(tmp_path, "ca")
    server = ca.issue_server("server")              # CN=server, SAN 127.0.0.1 + localhost
    client = ca.issue_client("alice")               # CN=alice,O=Spool Tests
    ssl_ctx = client_context(ca.cert_path, client)  # a client that trusts ``ca``
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import ssl
import time
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

ORG = "Spool Tests"
DAY = 86400.0


@dataclass(frozen=True, slots=True)
class Issued:
    """A certificate and its key on disk."""

    cert_path: Path
    key_path: Path
    subject: str  # RFC 4514
    serial: int

    @property
    def cert_pem(self) -> bytes:
        return self.cert_path.read_bytes()


_CA_USAGE = x509.KeyUsage(
    digital_signature=True,
    key_cert_sign=True,
    crl_sign=True,
    content_commitment=False,
    key_encipherment=False,
    data_encipherment=False,
    key_agreement=False,
    encipher_only=False,
    decipher_only=False,
)


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, ORG),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _when(epoch: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(epoch, dt.UTC)


class TestCA:
    """A certificate authority living in ``directory`` (``NAME.ca.pem``)."""

    __test__ = False  # not a pytest test class

    def __init__(self, directory: Path, name: str = "ca", *, now: float | None = None) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.name = name
        self.now = time.time() if now is None else now
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.subject = _name(f"{name} test CA")
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(self.subject)
            .issuer_name(self.subject)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(_when(self.now - DAY))
            .not_valid_after(_when(self.now + 3650 * DAY))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(_CA_USAGE, critical=True)
            .sign(self.key, hashes.SHA256())
        )
        self.cert_path = directory / f"{name}.ca.pem"
        self.cert_path.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))

    def _issue(
        self,
        file_stem: str,
        common_name: str,
        usage: x509.ObjectIdentifier,
        *,
        san: list[x509.GeneralName] | None,
        not_before: float | None,
        not_after: float | None,
    ) -> Issued:
        key = ec.generate_private_key(ec.SECP256R1())
        serial = x509.random_serial_number()
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name))
            .issuer_name(self.subject)
            .public_key(key.public_key())
            .serial_number(serial)
            .not_valid_before(_when(self.now - DAY if not_before is None else not_before))
            .not_valid_after(_when(self.now + 365 * DAY if not_after is None else not_after))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if san:
            builder = builder.add_extension(x509.SubjectAlternativeName(san), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        cert_path = self.directory / f"{file_stem}.pem"
        key_path = self.directory / f"{file_stem}.key"
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_path.write_bytes(_key_pem(key))
        key_path.chmod(0o600)
        return Issued(cert_path, key_path, cert.subject.rfc4514_string(), serial)

    def issue_server(
        self,
        file_stem: str,
        *,
        not_before: float | None = None,
        not_after: float | None = None,
    ) -> Issued:
        """A server certificate for ``127.0.0.1``, ``::1`` and ``localhost``."""
        san: list[x509.GeneralName] = [
            x509.DNSName("localhost"),
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
            x509.IPAddress(ipaddress.ip_address("::1")),
        ]
        return self._issue(
            file_stem,
            "localhost",
            ExtendedKeyUsageOID.SERVER_AUTH,
            san=san,
            not_before=not_before,
            not_after=not_after,
        )

    def issue_client(self, common_name: str, *, file_stem: str | None = None) -> Issued:
        """A client certificate ``CN=<common_name>,O=Spool Tests``."""
        return self._issue(
            file_stem or f"client-{common_name}",
            common_name,
            ExtendedKeyUsageOID.CLIENT_AUTH,
            san=None,
            not_before=None,
            not_after=None,
        )


def client_context(cafile: Path, client: Issued | None = None) -> ssl.SSLContext:
    """A client context trusting ``cafile`` (and presenting ``client``, if given)."""
    ctx = ssl.create_default_context(cafile=str(cafile))
    if client is not None:
        ctx.load_cert_chain(client.cert_path, client.key_path)
    return ctx
