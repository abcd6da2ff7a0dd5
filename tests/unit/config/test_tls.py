"""The listener's TLS elements (Admin and Transport), AllowPlaintext, CertificateSubject
and the logon-throttle tuning: accepted shapes, and every refusal at its element."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import load_pem_private_key

from spool.server.config import ConfigError, TlsConfig, parse_config
from tests.support.certs import TestCA
from tests.unit.config.helpers import TOKEN, USERS, doc


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("pki")
    ca = TestCA(d, "ca")
    other = TestCA(d, "other")
    server = ca.issue_server("server")
    stray = other.issue_server("stray")
    key = load_pem_private_key(server.key_path.read_bytes(), None)
    encrypted = d / "encrypted.key"
    encrypted.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"passphrase"),
        )
    )
    junk = d / "junk.pem"
    junk.write_text("not a certificate\n")
    return {
        "ca": ca.cert_path,
        "cert": server.cert_path,
        "key": server.key_path,
        "stray_key": stray.key_path,
        "encrypted": encrypted,
        "junk": junk,
        "missing": d / "missing.pem",
        "dir": d,
    }


def tls_xml(pki: dict[str, Path], *, cert: str = "cert", key: str = "key", extra: str = "") -> str:
    return f"<Certificate>{pki[cert]}</Certificate>\n<PrivateKey>{pki[key]}</PrivateKey>{extra}"


def refused(body: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse_config(doc(body), base_dir=Path("/srv"), env={})
    return info.value


def test_tls_in_admin_serves_every_transport(pki: dict[str, Path]) -> None:
    cfg = parse_config(
        doc(
            f"<Admin><InetAddr>0.0.0.0:9443</InetAddr>{tls_xml(pki)}</Admin>\n"
            "<Transports><Transport><Name>w</Name><Type>websocket</Type></Transport></Transports>\n"
            f"{USERS}"
        ),
        env={},
    )
    assert cfg.tls == TlsConfig(pki["cert"], pki["key"], None, "none")
    assert not cfg.allow_plaintext and not cfg.plaintext_exposed


def test_the_same_tls_in_admin_and_transport_is_one_listener(pki: dict[str, Path]) -> None:
    extra = f"<CACertificate>{pki['ca']}</CACertificate><ClientAuth>optional</ClientAuth>"
    tls = tls_xml(pki, extra=extra)
    cfg = parse_config(
        doc(
            f"<Admin>{tls}</Admin>\n<Transports><Transport><Name>w</Name><Type>websocket</Type>"
            f"{tls}</Transport></Transports>\n{USERS}"
        ),
        env={},
    )
    assert cfg.tls == TlsConfig(pki["cert"], pki["key"], pki["ca"], "optional")


def test_relative_tls_paths_follow_the_file(pki: dict[str, Path]) -> None:
    cfg = parse_config(
        doc(
            "<Admin><Certificate>server.pem</Certificate><PrivateKey>server.key</PrivateKey></Admin>"
        ),
        base_dir=pki["dir"],
        env={},
    )
    assert cfg.tls is not None and cfg.tls.certificate == pki["cert"]


def test_plaintext_off_loopback_needs_permission_and_says_why() -> None:
    err = refused(f"<Admin>\n<InetAddr>0.0.0.0:9007</InetAddr></Admin>\n{USERS}")
    assert (err.path, err.line) == ("/SpoolConfig/Admin/InetAddr", 4)
    assert "needs TLS" in err.message and "AllowPlaintext" in err.message
    cfg = parse_config(
        doc(
            "<Admin><InetAddr>0.0.0.0:9007</InetAddr><AllowPlaintext>true</AllowPlaintext>"
            f"</Admin>\n{USERS}"
        ),
        env={},
    )
    assert cfg.allow_plaintext and cfg.plaintext_exposed


@pytest.mark.parametrize(
    ("name", "body", "path", "fragment"),
    [
        (
            "key without certificate",
            "<Admin>\n<PrivateKey>{key}</PrivateKey></Admin>",
            "/SpoolConfig/Admin/PrivateKey",
            "needs a <Certificate>",
        ),
        (
            "certificate without key",
            "<Admin>\n<Certificate>{cert}</Certificate></Admin>",
            "/SpoolConfig/Admin/Certificate",
            "needs its <PrivateKey>",
        ),
        (
            "client auth without CA",
            "<Admin><Certificate>{cert}</Certificate><PrivateKey>{key}</PrivateKey>\n"
            "<ClientAuth>required</ClientAuth></Admin>",
            "/SpoolConfig/Admin/ClientAuth",
            "needs a <CACertificate>",
        ),
        (
            "bad client auth",
            "<Admin><Certificate>{cert}</Certificate><PrivateKey>{key}</PrivateKey>\n"
            "<ClientAuth>maybe</ClientAuth></Admin>",
            "/SpoolConfig/Admin/ClientAuth",
            "allowed: none, optional, required",
        ),
        (
            "missing certificate file",
            "<Admin>\n<Certificate>{missing}</Certificate><PrivateKey>{key}</PrivateKey></Admin>",
            "/SpoolConfig/Admin/Certificate",
            "cannot read it",
        ),
        (
            "not a certificate",
            "<Admin>\n<Certificate>{junk}</Certificate><PrivateKey>{key}</PrivateKey></Admin>",
            "/SpoolConfig/Admin/Certificate",
            "not a PEM certificate",
        ),
        (
            "someone else's key",
            "<Admin><Certificate>{cert}</Certificate>\n<PrivateKey>{stray_key}</PrivateKey></Admin>",
            "/SpoolConfig/Admin/PrivateKey",
            "does not belong to the certificate",
        ),
        (
            "encrypted key",
            "<Admin><Certificate>{cert}</Certificate>\n<PrivateKey>{encrypted}</PrivateKey></Admin>",
            "/SpoolConfig/Admin/PrivateKey",
            "encrypted with a passphrase",
        ),
        (
            "bad CA bundle",
            "<Admin><Certificate>{cert}</Certificate><PrivateKey>{key}</PrivateKey>\n"
            "<CACertificate>{junk}</CACertificate></Admin>",
            "/SpoolConfig/Admin/CACertificate",
            "not a PEM bundle",
        ),
        (
            "plaintext beside a certificate",
            "<Admin><Certificate>{cert}</Certificate><PrivateKey>{key}</PrivateKey>\n"
            "<AllowPlaintext>true</AllowPlaintext></Admin>",
            "/SpoolConfig/Admin/AllowPlaintext",
            "contradicts the <Certificate>",
        ),
        (
            "transport and admin disagree",
            "<Admin><Certificate>{cert}</Certificate><PrivateKey>{key}</PrivateKey></Admin>"
            "<Transports><Transport><Name>w</Name><Type>websocket</Type>\n"
            "<Certificate>{cert}</Certificate><PrivateKey>{key}</PrivateKey>"
            "<CACertificate>{ca}</CACertificate></Transport></Transports>",
            "/SpoolConfig/Transports/Transport/Certificate",
            "share one listener, so one TLS setting",
        ),
        (
            "plaintext in one section, TLS in another",
            "<Admin><Certificate>{cert}</Certificate><PrivateKey>{key}</PrivateKey></Admin>"
            "<Transports><Transport><Name>w</Name><Type>websocket</Type>\n"
            "<AllowPlaintext>true</AllowPlaintext></Transport></Transports>",
            "/SpoolConfig/Transports/Transport/AllowPlaintext",
            "contradicts the <Certificate>",
        ),
        (
            "client certificates without users",
            "<Admin>\n<Certificate>{cert}</Certificate><PrivateKey>{key}</PrivateKey>"
            "<CACertificate>{ca}</CACertificate><ClientAuth>required</ClientAuth></Admin>",
            "/SpoolConfig/Admin/Certificate",
            "maps client certificates to users",
        ),
        (
            "bad certificate subject",
            "<Users><User><Name>a</Name>\n<CertificateSubject>alice</CertificateSubject>"
            "</User></Users>",
            "/SpoolConfig/Users/User/CertificateSubject",
            "not an RFC 4514 distinguished name",
        ),
        (
            "one subject, two users",
            "<Users><User><Name>a</Name><CertificateSubject>CN=a</CertificateSubject></User>\n"
            "<User><Name>b</Name><CertificateSubject>cn = a</CertificateSubject></User></Users>",
            "/SpoolConfig/Users/User[2]/CertificateSubject",
            "same CertificateSubject as user 'a'",
        ),
        (
            "throttle of zero",
            "<Tuning>\n<LogonFailuresPerAddress>0</LogonFailuresPerAddress></Tuning>",
            "/SpoolConfig/Tuning/LogonFailuresPerAddress",
            "between 1 and 10000",
        ),
        (
            "no password threads",
            "<Tuning>\n<PasswordCheckThreads>0</PasswordCheckThreads></Tuning>",
            "/SpoolConfig/Tuning/PasswordCheckThreads",
            "between 1 and 64",
        ),
    ],
)
def test_refused_at_the_element(
    pki: dict[str, Path], name: str, body: str, path: str, fragment: str
) -> None:
    err = refused(body.format(**{k: str(v) for k, v in pki.items()}))
    assert err.path == path, err
    assert err.line == 4, err
    assert fragment in err.message, err.message


def test_certificate_subject_is_kept_canonical_and_is_a_credential() -> None:
    cfg = parse_config(
        doc(
            "<Users><User><Name>alice</Name>"
            "<CertificateSubject> cn = alice , o = Spool Tests </CertificateSubject>"
            f"</User><User><Name>ops</Name><Token>{TOKEN}</Token></User></Users>"
        ),
        env={},
    )
    assert cfg.users[0].certificate_subject == "CN=alice,O=Spool Tests"
    assert cfg.users[0].password_hash is None and cfg.users[0].token is None


def test_logon_throttle_tuning() -> None:
    cfg = parse_config(
        doc(
            "<Tuning><LogonFailuresPerAddress>3</LogonFailuresPerAddress>"
            "<LogonFailuresPerUser>7</LogonFailuresPerUser>"
            "<LogonFailureWindow>90s</LogonFailureWindow>"
            "<PasswordCheckThreads>2</PasswordCheckThreads></Tuning>"
        ),
        env={},
    )
    t = cfg.tuning
    assert (t.logon_failures_per_address, t.logon_failures_per_user) == (3, 7)
    assert (t.logon_failure_window, t.password_check_threads) == (90.0, 2)
