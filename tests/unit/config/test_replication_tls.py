"""TLS on a replication link: the Destination's ``<Transport>`` TLS elements."""

from __future__ import annotations

from pathlib import Path

import pytest

from spool.server.config import ReplicationTransport
from tests.support.certs import TestCA
from tests.unit.config.helpers import assert_refused, doc, parse
from tests.unit.config.test_replication import repl

ADDR = "<Type>amps-replication</Type><InetAddr>127.0.0.1:9107</InetAddr>"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("pki")
    ca = TestCA(d, "ca")
    client = ca.issue_client("spool-a")
    junk = d / "junk.pem"
    junk.write_text("not a certificate\n")
    return {
        "ca": ca.cert_path,
        "cert": client.cert_path,
        "key": client.key_path,
        "junk": junk,
        "missing": d / "missing.key",
    }


def _transport(inner: str) -> str:
    """A destination whose <Transport> (file line 5) holds ``inner`` after its address."""
    return repl(
        "<Destination><Name>b</Name><SyncType>sync</SyncType>"
        f"<Topic><Name>orders</Name></Topic><Transport>{ADDR}{inner}</Transport></Destination>"
    )


def _transport_of(inner: str) -> ReplicationTransport:
    cfg = parse(doc(_transport(inner)))
    assert cfg.replication is not None
    return cfg.replication.destinations[0].transport


def test_a_mutual_tls_link_keeps_its_files(pki: dict[str, Path]) -> None:
    transport = _transport_of(
        f"<TLS>true</TLS><CACertificate>{pki['ca']}</CACertificate>"
        f"<Certificate>{pki['cert']}</Certificate><PrivateKey>{pki['key']}</PrivateKey>"
    )
    assert transport.tls
    assert transport.ca_certificate == pki["ca"]
    assert (transport.certificate, transport.private_key) == (pki["cert"], pki["key"])


def test_tls_alone_verifies_against_the_system_cas() -> None:
    transport = _transport_of("<TLS>true</TLS>")
    assert transport.tls and transport.ca_certificate is None and transport.certificate is None


def test_without_tls_a_link_is_plain() -> None:
    transport = _transport_of("")
    assert not transport.tls and transport.ca_certificate is None


def test_relative_files_follow_the_configuration_file() -> None:
    # the files are read at load: a relative name that does not exist is refused there,
    # with the absolute path it was resolved to
    assert_refused(
        _transport("<TLS>true</TLS><CACertificate>certs/ca.pem</CACertificate>"),
        "/SpoolConfig/Replication/Destination/Transport/CACertificate",
        5,
        "/srv/spool/certs/ca.pem: cannot read it",
    )


@pytest.mark.parametrize(
    ("inner", "element", "fragment"),
    [
        ("<CACertificate>{ca}</CACertificate>", "CACertificate", "add <TLS>true</TLS>"),
        (
            "<Certificate>{cert}</Certificate><PrivateKey>{key}</PrivateKey>",
            "Certificate",
            "is for a TLS link",
        ),
        (
            "<TLS>true</TLS><Certificate>{cert}</Certificate>",
            "Certificate",
            "a client <Certificate> and its <PrivateKey> go together",
        ),
        (
            "<TLS>true</TLS><PrivateKey>{key}</PrivateKey>",
            "PrivateKey",
            "a client <Certificate> and its <PrivateKey> go together",
        ),
        (
            "<TLS>true</TLS><CACertificate>{junk}</CACertificate>",
            "CACertificate",
            "not a PEM bundle of CA certificates",
        ),
        (
            "<TLS>true</TLS><Certificate>{cert}</Certificate><PrivateKey>{missing}</PrivateKey>",
            "PrivateKey",
            "cannot read it",
        ),
        (
            "<TLS>true</TLS><Certificate>{junk}</Certificate><PrivateKey>{key}</PrivateKey>",
            "Certificate",
            "not a PEM certificate",
        ),
        ("<TLS>maybe</TLS>", "TLS", "'maybe' is not a boolean"),
    ],
    ids=[
        "CA without TLS",
        "client pair without TLS",
        "certificate without key",
        "key without certificate",
        "junk CA",
        "missing key",
        "junk certificate",
        "TLS not a boolean",
    ],
)
def test_refused_at_the_element(
    pki: dict[str, Path], inner: str, element: str, fragment: str
) -> None:
    assert_refused(
        _transport(inner.format(**{k: str(v) for k, v in pki.items()})),
        f"/SpoolConfig/Replication/Destination/Transport/{element}",
        5,
        fragment,
    )
