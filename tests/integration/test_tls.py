"""TLS on a real server: wss:// and https:// with certificates made by the test (a
throwaway CA), the Python client and the CLI verifying the broker, mutual TLS mapping a
client certificate to a user, certificate reloads under a live stream, security headers
and Secure cookies."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import signal
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from websockets.exceptions import InvalidMessage

from spool.server.client import Client, HandshakeFailed, client_context
from spool.server.passwords import hash_password
from spool.server.protocol.errors import AuthFailure, NotEntitled
from tests.support.certs import Issued, TestCA
from tests.support.server import ROOT, SpoolProcess, config_xml, sow_topic
from tests.support.wait import wait_until

PASSWORD = "ops password for tls"
#: how a refused TLS handshake shows in the client: an alert during the handshake
#: (TLS 1.2), or, with TLS 1.3 (the client finishes first), the connection closing before
#: the websocket upgrade is answered
HANDSHAKE_REFUSED = (ssl.SSLError, OSError, EOFError, InvalidMessage, HandshakeFailed)
TOKEN = "ops-token-for-tls-tests-0123"


class Pki:
    """The test's CA, a second one nobody trusts, and the certificates they issued."""

    def __init__(self, directory: Path) -> None:
        self.ca = TestCA(directory, "ca")
        self.other = TestCA(directory, "other")
        self.server = self.ca.issue_server("server")
        self.stray_server = self.other.issue_server("stray-server")
        self.alice = self.ca.issue_client("alice")
        self.bob = self.ca.issue_client("bob")  # signed by the CA, mapped to nobody
        self.mallory = self.other.issue_client("alice", file_stem="mallory")  # wrong CA


def users(pki: Pki) -> str:
    return (
        f"<User><Name>ops</Name><PasswordHash>{hash_password(PASSWORD)}</PasswordHash>"
        f"<Token>{TOKEN}</Token><Admin>true</Admin><Read>.*</Read><Write>.*</Write></User>"
        f"<User><Name>alice</Name><CertificateSubject>{pki.alice.subject}</CertificateSubject>"
        "<Read>^alice/</Read><Write>^alice/</Write></User>"
    )


def tls_elements(pki: Pki, client_auth: str, cert: Issued | None = None) -> str:
    cert = cert or pki.server
    return (
        f"<Certificate>{cert.cert_path}</Certificate><PrivateKey>{cert.key_path}</PrivateKey>"
        f"<CACertificate>{pki.ca.cert_path}</CACertificate><ClientAuth>{client_auth}</ClientAuth>"
    )


@contextlib.contextmanager
def tls_server(workdir: Path, pki: Pki, client_auth: str) -> Iterator[SpoolProcess]:
    xml = config_xml(
        workdir / "data",
        users=users(pki),
        admin_extra=tls_elements(pki, client_auth),
        sow=sow_topic("cli/sow", "/n", durability="transient"),
    )
    proc = SpoolProcess(workdir, xml, tls=True)
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def optional_mtls(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[SpoolProcess]:
    with tls_server(tmp_path_factory.mktemp("optional"), pki, "optional") as proc:
        yield proc


def ctx(pki: Pki, client: Issued | None = None, *, ca: TestCA | None = None) -> ssl.SSLContext:
    certfile = client.cert_path if client else None
    keyfile = client.key_path if client else None
    return client_context(cafile=(ca or pki.ca).cert_path, certfile=certfile, keyfile=keyfile)


# -- the Python client -------------------------------------------------------------------


def test_python_client_over_wss(optional_mtls: SpoolProcess, pki: Pki) -> None:
    assert optional_mtls.ws_url.startswith("wss://")

    async def main() -> None:
        sub = Client(
            optional_mtls.ws_url, "tls-sub", user_id="ops", password=PASSWORD, ssl=ctx(pki)
        )
        pub = Client(optional_mtls.ws_url, "tls-pub", user_id="ops", password=TOKEN, ssl=ctx(pki))
        await sub.connect()
        await pub.connect()
        s = await sub.subscribe("tls/orders")
        seq = pub.publish("tls/orders", b'{"id":1}', persisted=True)
        await pub.wait_persisted(seq)
        msg = await s.get(timeout=10)
        assert msg.data == b'{"id":1}'
        await pub.close()
        await sub.close()

    asyncio.run(main())


@pytest.mark.parametrize("trust", ["other CA", "system CAs"])
def test_python_client_refuses_a_server_not_signed_by_its_ca(
    optional_mtls: SpoolProcess, pki: Pki, trust: str
) -> None:
    context = ctx(pki, ca=pki.other) if trust == "other CA" else client_context()

    async def main() -> None:
        client = Client(
            optional_mtls.ws_url, "untrusting", user_id="ops", password=PASSWORD, ssl=context
        )
        with pytest.raises(ssl.SSLCertVerificationError, match="certificate verify failed"):
            await client.connect(timeout=10)

    asyncio.run(main())


# -- the CLI -----------------------------------------------------------------------------


def spool(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "spool.server.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        input=stdin,
        timeout=60,
    )


def test_cli_over_wss(optional_mtls: SpoolProcess, pki: Pki) -> None:
    url = optional_mtls.ws_url
    creds = ("--user", "ops", "--password", PASSWORD)
    ok = spool("publish", url, "cli/tls", '{"n":1}', "--cafile", str(pki.ca.cert_path), *creds)
    assert ok.returncode == 0, ok.stderr
    got = spool(
        "subscribe", url, "cli/tls", "--bookmark", "0", "--count", "1",
        "--cafile", str(pki.ca.cert_path), *creds,
    )  # fmt: skip
    assert got.returncode == 0, got.stderr
    assert got.stdout == '{"n":1}\n'
    # the SOW client commands take the same TLS options
    tls = ("--cafile", str(pki.ca.cert_path), *creds)
    for n in (1, 2):
        put = spool("publish", url, "cli/sow", f'{{"n":{n}}}', *tls)
        assert put.returncode == 0, put.stderr
    deleted = spool("sow-delete", url, "cli/sow", "--keys", "1", *tls)
    assert deleted.returncode == 0 and deleted.stdout == "1 record deleted from cli/sow\n"
    left = spool("sow", url, "cli/sow", *tls)
    assert left.returncode == 0 and left.stdout == '{"n":2}\n', left.stderr
    untrusted = spool("sow", url, "cli/sow", "--cafile", str(pki.other.cert_path), *creds)
    assert untrusted.returncode == 3 and "not trusted" in untrusted.stderr

    wrong = spool("publish", url, "cli/tls", "{}", "--cafile", str(pki.other.cert_path), *creds)
    assert wrong.returncode == 3
    assert "certificate is not trusted" in wrong.stderr and "--cafile" in wrong.stderr
    system = spool("publish", url, "cli/tls", "{}", *creds)
    assert system.returncode == 3 and "not trusted" in system.stderr

    insecure = spool("publish", url, "cli/tls", '{"n":2}', "--insecure", *creds)
    assert insecure.returncode == 0, insecure.stderr
    assert "NOT verified" in insecure.stderr

    plain = spool(
        "publish", url.replace("wss://", "ws://"), "cli/tls", "{}",
        "--cafile", str(pki.ca.cert_path), *creds,
    )  # fmt: skip
    assert plain.returncode == 2 and "need a wss:// URL" in plain.stderr


def test_cli_presents_a_client_certificate(optional_mtls: SpoolProcess, pki: Pki) -> None:
    r = spool(
        "publish", optional_mtls.ws_url, "alice/notes", '{"by":"alice"}',
        "--cafile", str(pki.ca.cert_path),
        "--cert", str(pki.alice.cert_path), "--key", str(pki.alice.key_path),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr


# -- mutual TLS --------------------------------------------------------------------------


def test_mutual_tls_maps_a_client_certificate_to_its_user(
    optional_mtls: SpoolProcess, pki: Pki
) -> None:
    async def main() -> None:
        alice = Client(optional_mtls.ws_url, "alice-app", ssl=ctx(pki, pki.alice))
        await alice.connect()  # no user_id, no password: the certificate is the credential
        await alice.publish_acked("alice/orders", b"{}")
        with pytest.raises(NotEntitled):
            await alice.publish_acked("ops/orders", b"{}")  # alice's entitlements apply
        await alice.close()

        # the certificate names alice: claiming to be ops without ops's password fails
        liar = Client(optional_mtls.ws_url, "liar", user_id="ops", ssl=ctx(pki, pki.alice))
        with pytest.raises(AuthFailure, match="belongs to user 'alice'"):
            await liar.connect()

        # a certificate of the CA that maps to no user is not a credential by itself
        bob = Client(optional_mtls.ws_url, "bob-app", ssl=ctx(pki, pki.bob))
        with pytest.raises(AuthFailure):
            await bob.connect()
        bob_ops = Client(
            optional_mtls.ws_url, "bob-as-ops", user_id="ops", password=PASSWORD,
            ssl=ctx(pki, pki.bob),
        )  # fmt: skip
        await bob_ops.connect()
        await bob_ops.close()

        # a certificate from another CA fails the handshake (ClientAuth optional verifies
        # what is sent)
        mallory = Client(optional_mtls.ws_url, "mallory", ssl=ctx(pki, pki.mallory))
        with pytest.raises(HANDSHAKE_REFUSED):
            await mallory.connect(timeout=10)

    asyncio.run(main())
    with httpx.Client(base_url=optional_mtls.http_url, verify=ctx(pki, pki.alice)) as http:
        me = http.get("/api/session").json()
        assert (me["user"], me["via"], me["admin"]) == ("alice", "certificate", False)

    async def connected_alice() -> None:
        alice = Client(optional_mtls.ws_url, "alice-listed", ssl=ctx(pki, pki.alice))
        await alice.connect()
        async with httpx.AsyncClient(verify=ctx(pki)) as http:
            r = await http.get(
                f"{optional_mtls.http_url}/api/clients/alice-listed",
                headers={"Authorization": f"Bearer {TOKEN}"},
            )
        info = r.json()
        # what the ASGI TLS extension carried from the handshake to the session
        assert info["user"] == "alice"
        assert info["tls"] in ("TLSv1.3", "TLSv1.2")
        assert info["certificate"] == pki.alice.subject
        await alice.close()

    asyncio.run(connected_alice())


def test_mutual_tls_required_refuses_a_missing_certificate(tmp_path: Path, pki: Pki) -> None:
    with tls_server(tmp_path, pki, "required") as proc:

        async def main() -> None:
            nameless = Client(
                proc.ws_url, "no-cert", user_id="ops", password=PASSWORD, ssl=ctx(pki)
            )
            with pytest.raises(HANDSHAKE_REFUSED):
                await nameless.connect(timeout=10)
            alice = Client(proc.ws_url, "alice-required", ssl=ctx(pki, pki.alice))
            info = await alice.connect(timeout=10)
            assert info.client_name == "alice-required"
            await alice.close()

        asyncio.run(main())
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"{proc.http_url}/healthz", verify=ctx(pki))
        ok = httpx.get(f"{proc.http_url}/api/session", verify=ctx(pki, pki.alice))
        assert ok.json()["user"] == "alice"
        events = httpx.get(
            f"{proc.http_url}/api/events",
            params={"category": "tls"},
            headers={"Authorization": f"Bearer {TOKEN}"},
            verify=ctx(pki, pki.alice),
        ).json()["events"]
        loaded = [e for e in events if e["event"] == "loaded"]
        assert loaded and loaded[0]["client_auth"] == "required"


# -- reloads -----------------------------------------------------------------------------


def install(pair: Issued, cert: Path, key: Path) -> None:
    """Put ``pair`` where the server's configuration points (as a renewal job would)."""
    shutil.copyfile(pair.cert_path, cert)
    shutil.copyfile(pair.key_path, key)


def test_a_reload_is_picked_up_by_new_connections_while_an_old_one_keeps_streaming(
    tmp_path: Path, pki: Pki
) -> None:
    renewed_ca = TestCA(tmp_path / "pki", "renewed")
    renewed = renewed_ca.issue_server("renewed")
    cert, key = tmp_path / "server.pem", tmp_path / "server.key"
    install(pki.server, cert, key)
    xml = config_xml(
        tmp_path / "data",
        users=users(pki),
        admin_extra=f"<Certificate>{cert}</Certificate><PrivateKey>{key}</PrivateKey>",
    )
    proc = SpoolProcess(tmp_path / "srv", xml, tls=True).start()
    try:

        async def main() -> None:
            old = Client(proc.ws_url, "old-conn", user_id="ops", password=TOKEN, ssl=ctx(pki))
            await old.connect()
            stream = await old.subscribe("reload/stream")
            old.publish("reload/stream", b'{"n":1}')
            assert (await stream.get(timeout=10)).data == b'{"n":1}'

            # the renewal: new files, then the admin action
            install(renewed, cert, key)
            async with httpx.AsyncClient(base_url=proc.http_url, verify=ctx(pki)) as http:
                r = await http.post("/api/tls/reload", headers={"Authorization": f"Bearer {TOKEN}"})
            assert r.status_code == 200, r.text
            assert r.json()["certificate"]["issuer"] == renewed_ca.cert.subject.rfc4514_string()

            # new handshakes get the new pair: only its CA verifies them now
            stale = Client(proc.ws_url, "stale", user_id="ops", password=TOKEN, ssl=ctx(pki))
            with pytest.raises(ssl.SSLCertVerificationError):
                await stale.connect(timeout=10)
            fresh = Client(
                proc.ws_url, "fresh", user_id="ops", password=TOKEN, ssl=ctx(pki, ca=renewed_ca)
            )
            await fresh.connect()
            # ... while the old connection keeps streaming on the pair it negotiated
            for n in range(2, 12):
                fresh.publish("reload/stream", b'{"n":%d}' % n)
            got = [(await stream.get(timeout=10)).data for _ in range(10)]
            assert got == [b'{"n":%d}' % n for n in range(2, 12)]
            assert not old.closed.is_set()
            await fresh.close()
            await old.close()

        asyncio.run(main())

        # SIGHUP reloads too: back to a pair of the first CA
        install(pki.ca.issue_server("third"), cert, key)
        proc.signal(signal.SIGHUP)

        def trusted_again() -> bool:
            try:
                httpx.get(f"{proc.http_url}/healthz", verify=ctx(pki))
            except httpx.ConnectError:
                return False
            return True

        wait_until(trusted_again, 10, message="the SIGHUP reload")
        headers = {"Authorization": f"Bearer {TOKEN}"}
        with httpx.Client(base_url=proc.http_url, verify=ctx(pki), headers=headers) as http:
            status = http.get("/api/tls").json()
            assert status["tls"]["reloads"] == 2 and status["plaintext"] is False
            reloaded = [
                e for e in http.get("/api/events", params={"category": "tls"}).json()["events"]
                if e["event"] == "reloaded"
            ]  # fmt: skip
            assert [e["user"] for e in reloaded] == ["ops", "SIGHUP"]

            # a broken renewal changes nothing: 409, the current pair keeps serving
            sha = status["tls"]["certificate"]["sha256"]
            cert.write_text("-----BEGIN CERTIFICATE-----\ngarbage\n")
            bad = http.post("/api/tls/reload")
            assert bad.status_code == 409 and bad.json()["error"] == "conflict"
            assert str(cert) in bad.json()["detail"]
            assert "keeps serving" in bad.json()["detail"]
            after = http.get("/api/tls").json()["tls"]
            assert after["certificate"]["sha256"] == sha and after["last_reload_error"]
            metrics = http.get("/metrics").text
            assert "spool_tls_certificate_not_after_seconds " in metrics
            assert "spool_tls_certificate_reloads_total 2.0" in metrics
    finally:
        proc.stop()


# -- the dashboard over https ------------------------------------------------------------


def test_https_dashboard_headers_and_secure_cookies(optional_mtls: SpoolProcess, pki: Pki) -> None:
    with httpx.Client(base_url=optional_mtls.http_url, verify=ctx(pki)) as http:
        page = http.get("/login")
        assert page.status_code == 200
        h = page.headers
        assert "script-src 'self'" in h["content-security-policy"]
        assert "frame-ancestors 'none'" in h["content-security-policy"]
        assert "'unsafe-inline'" not in h["content-security-policy"]
        assert h["x-frame-options"] == "DENY"
        assert h["referrer-policy"] == "no-referrer"
        assert h["x-content-type-options"] == "nosniff"
        assert h["strict-transport-security"].startswith("max-age=")
        assert "Secure" in h["set-cookie"]
        token = http.cookies[f"spool_login_{optional_mtls.port}"]
        r = http.post(
            "/login",
            data={"username": "ops", "password": PASSWORD, "csrf_token": token, "next": "/"},
        )
        assert r.status_code == 303
        cookies = r.headers.get_list("set-cookie")
        session = [c for c in cookies if c.startswith(f"spool_session_{optional_mtls.port}=")]
        assert session and "Secure" in session[0] and "HttpOnly" in session[0]
        api = http.get("/api/instance")
        assert api.status_code == 200 and api.headers["x-frame-options"] == "DENY"
