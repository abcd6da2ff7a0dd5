"""What a certificate says, read with the ``cryptography`` package.

:class:`CertificateInfo` is the part of an X.509 certificate an operator needs: who it is
for (subject, DNS names and addresses), who signed it, when it is valid, and its SHA-256
fingerprint to compare with what a client sees. The listener shows it on the dashboard
and in ``GET /api/tls``, and arms the expiry warning from ``not_after``.

Distinguished names are compared in their RFC 4514 string form as ``cryptography``
writes it (short attribute names such as ``CN``, ``O``, ``OU``; the most specific RDN
first; special characters escaped). :func:`canonical_name` turns what an operator wrote
in ``<CertificateSubject>`` into that form, so ``cn=alice, o=Example`` and
``CN=alice,O=Example`` name the same user; attribute values are compared exactly (case
included). This module does no I/O: callers hand it bytes.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TypedDict

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

__all__ = [
    "CertificateDict",
    "CertificateInfo",
    "InvalidName",
    "canonical_name",
    "certificate_info",
    "der_subject",
    "load_pem_chain",
]


class InvalidName(ValueError):
    """A distinguished name that is not RFC 4514 (the message says where)."""


class CertificateDict(TypedDict):
    """A certificate as the admin API shows it (times as epoch seconds)."""

    subject: str
    issuer: str
    serial: str
    not_before: float
    not_after: float
    sha256: str
    dns_names: list[str]
    ip_addresses: list[str]


@dataclass(frozen=True, slots=True)
class CertificateInfo:
    """The facts of one certificate.

    Attributes:
        subject, issuer: RFC 4514 names.
        serial: the serial number in hex.
        not_before, not_after: validity bounds, epoch seconds (UTC).
        sha256: the fingerprint of the DER encoding, hex, colon-separated.
        dns_names, ip_addresses: the subjectAltName entries.
    """

    subject: str
    issuer: str
    serial: str
    not_before: float
    not_after: float
    sha256: str
    dns_names: tuple[str, ...] = ()
    ip_addresses: tuple[str, ...] = ()

    def valid_at(self, now: float) -> bool:
        """Whether ``now`` (epoch seconds) is inside the validity period."""
        return self.not_before <= now <= self.not_after

    def as_dict(self) -> CertificateDict:
        return {
            "subject": self.subject,
            "issuer": self.issuer,
            "serial": self.serial,
            "not_before": self.not_before,
            "not_after": self.not_after,
            "sha256": self.sha256,
            "dns_names": list(self.dns_names),
            "ip_addresses": list(self.ip_addresses),
        }


def load_pem_chain(data: bytes) -> list[x509.Certificate]:
    """The certificates of a PEM bundle, leaf first.

    Raises:
        ValueError: no certificate in it, or one that does not parse.
    """
    return x509.load_pem_x509_certificates(data)


def certificate_info(cert: x509.Certificate) -> CertificateInfo:
    """The facts of a parsed certificate."""
    dns: tuple[str, ...] = ()
    ips: tuple[str, ...] = ()
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        pass
    else:
        dns = tuple(san.get_values_for_type(x509.DNSName))
        ips = tuple(str(ip) for ip in san.get_values_for_type(x509.IPAddress))
    digest = hashlib.sha256(cert.public_bytes(Encoding.DER)).hexdigest().upper()
    return CertificateInfo(
        subject=cert.subject.rfc4514_string(),
        issuer=cert.issuer.rfc4514_string(),
        serial=f"{cert.serial_number:X}",
        not_before=cert.not_valid_before_utc.timestamp(),
        not_after=cert.not_valid_after_utc.timestamp(),
        sha256=":".join(digest[i : i + 2] for i in range(0, len(digest), 2)),
        dns_names=dns,
        ip_addresses=ips,
    )


def der_subject(der: bytes) -> str:
    """The RFC 4514 subject of a DER certificate (a TLS peer's, as ``ssl`` hands it over).

    Raises:
        ValueError: not a DER certificate.
    """
    return x509.load_der_x509_certificate(der).subject.rfc4514_string()


def canonical_name(text: str) -> str:
    """The canonical RFC 4514 form of a distinguished name written by a person.

    Attribute types are matched without regard to case (``cn`` is ``CN``); spaces around
    ``,`` ``+`` and ``=`` are dropped; the order is kept (most specific RDN first, as
    RFC 4514 writes it and as :func:`der_subject` returns it).

    Raises:
        InvalidName: not a distinguished name.
    """
    if not text.strip():
        raise InvalidName("the name is empty")
    try:
        # (no strip() of the whole text: a trailing "\ " is an escaped space)
        name = x509.Name.from_rfc4514_string(_upper_types(text))
    except ValueError as exc:
        raise InvalidName(str(exc)) from exc
    return name.rfc4514_string()


def _upper_types(text: str) -> str:
    """Upper-case each attribute type and trim unescaped spaces around separators.

    A small scanner over the RFC 4514 grammar: a type runs to the first unescaped ``=``,
    a value to the next unescaped ``,`` or ``+``; backslash escapes are copied as they
    are. Dotted OIDs (``2.5.4.3``) are left alone.
    """
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        # the attribute type
        j = text.find("=", i)
        if j < 0:
            raise InvalidName(f"no '=' after {text[i:]!r}")
        kind = text[i:j].strip()
        out.append(kind if kind[:1].isdigit() else kind.upper())
        out.append("=")
        # the value, up to an unescaped separator
        i = j + 1
        value: list[str] = []
        while i < n and text[i] not in ",+":
            if text[i] == "\\" and i + 1 < n:
                value.append(text[i : i + 2])
                i += 2
                continue
            value.append(text[i])
            i += 1
        raw = "".join(value)
        # trailing spaces that are not escaped are not part of the value
        trimmed = raw.lstrip(" ")
        while trimmed.endswith(" ") and not trimmed.endswith("\\ "):
            trimmed = trimmed[:-1]
        out.append(trimmed)
        if i < n:
            out.append(text[i])
            i += 1
            while i < n and text[i] == " ":
                i += 1
    return "".join(out)
