"""The dashboard over https:// in Chromium, with a certificate of a throwaway CA (the
page context is told to accept it): login with Secure cookies, the listener-security and
logon panels, the query page streaming over wss://, all under the Content-Security-
Policy (a violation is a console error, which fails the test)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect

from spool.server.client import SyncClient, client_context
from spool.server.passwords import hash_password
from tests.browser.conftest import VIEWPORT, PageErrors, artifact_path
from tests.support.certs import TestCA
from tests.support.server import SpoolProcess, config_xml

pytestmark = pytest.mark.browser

USER = "ops"
PASSWORD = "https dashboard password"
TOKEN = "https-dashboard-token-0123456789"


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> TestCA:
    return TestCA(tmp_path_factory.mktemp("pki"), "browser")


def _tls(ca: TestCA) -> str:
    pair = ca.issue_server("server")
    return f"<Certificate>{pair.cert_path}</Certificate><PrivateKey>{pair.key_path}</PrivateKey>"


@pytest.fixture(scope="module")
def https_auth(tmp_path_factory: pytest.TempPathFactory, ca: TestCA) -> Iterator[SpoolProcess]:
    d = tmp_path_factory.mktemp("https-auth")
    users = (
        f"<User><Name>{USER}</Name><PasswordHash>{hash_password(PASSWORD)}</PasswordHash>"
        f"<Token>{TOKEN}</Token><Admin>true</Admin><Read>.*</Read><Write>.*</Write></User>"
    )
    xml = config_xml(d / "data", name="spool-https", users=users, admin_extra=_tls(ca))
    proc = SpoolProcess(d, xml, tls=True).start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def https_open(tmp_path_factory: pytest.TempPathFactory, ca: TestCA) -> Iterator[SpoolProcess]:
    d = tmp_path_factory.mktemp("https-open")
    xml = config_xml(d / "data", name="spool-https-open", admin_extra=_tls(ca))
    proc = SpoolProcess(d, xml, tls=True).start()
    yield proc
    proc.stop()


@pytest.fixture
def tls_page(browser: Browser, request: pytest.FixtureRequest) -> Iterator[Page]:
    context: BrowserContext = browser.new_context(
        viewport=VIEWPORT,  # type: ignore[arg-type]
        ignore_https_errors=True,
    )
    page = context.new_page()
    errors = PageErrors(page)
    yield page
    page.screenshot(path=artifact_path(request.node.nodeid))
    context.close()
    assert errors.errors == [], "JavaScript or CSP errors on the page"


def test_log_in_over_https_and_see_the_listener_security(
    tls_page: Page, https_auth: SpoolProcess, ca: TestCA
) -> None:
    page = tls_page
    assert https_auth.http_url.startswith("https://")
    page.goto(f"{https_auth.http_url}/")
    expect(page).to_have_url(re.compile(r"^https://.*/login\?next=/$"))
    page.fill("#username", USER)
    page.fill("#password", PASSWORD)
    page.click("button[type=submit]")
    expect(page).to_have_url(f"{https_auth.http_url}/")
    cookies = {c["name"]: c for c in page.context.cookies()}
    session = cookies[f"spool_session_{https_auth.port}"]
    assert session["secure"] and session["httpOnly"]
    expect(page.locator("#tls-badge")).to_have_text("TLS · TLS 1.2+")
    kv = page.locator("#tls-kv")
    expect(kv).to_contain_text("CN=localhost,O=Spool Tests")
    expect(kv).to_contain_text(ca.cert.subject.rfc4514_string())
    expect(kv).to_contain_text("days")
    expect(page.locator("#plaintext-banner")).to_have_count(0)

    # a failed websocket logon shows on the page (same counters as the dashboard login)
    client = SyncClient(
        https_auth.ws_url, "wrong", user_id=USER, password="wrong",
        ssl=client_context(cafile=ca.cert_path),
    )  # fmt: skip
    with pytest.raises(Exception, match="auth failure"):
        client.connect()
    client.close()
    expect(page.locator("#logons-kv")).to_contain_text("websocket 1", timeout=20_000)


def test_the_query_page_streams_over_wss(
    tls_page: Page, https_open: SpoolProcess, ca: TestCA, tmp_path: Path
) -> None:
    page = tls_page
    with SyncClient(https_open.ws_url, "feeder", ssl=client_context(cafile=ca.cert_path)) as c:
        for i in range(12):
            c.publish("tls-q", {"i": i}, persisted=True)
        c.flush()
        page.goto(f"{https_open.http_url}/query")
        page.fill("#topic", "tls-q")
        page.select_option("#bookmark-kind", "0")
        page.click("#start")
        expect(page.locator("#q-state")).to_have_text("running")
        expect(page.locator("#q-count")).to_have_text("12")
        c.publish("tls-q", {"i": 12}, persisted=True)
        c.flush()
        expect(page.locator("#q-count")).to_have_text("13")
        page.click("#stop")
    headers = httpx.get(
        f"{https_open.http_url}/query", verify=client_context(cafile=ca.cert_path)
    ).headers
    assert "connect-src 'self'" in headers["content-security-policy"]
