"""In Chromium: the dashboard's own page uses the websocket; a page of another origin is
closed with a reason naming the fix (no users), or must log on with a token (users).

The other origin is a real web server on another loopback port: a page the operator has
open on this machine (a local tool, a dev server). A page of a public site would not even
reach the broker in Chromium, whose Local Network Access checks stop public pages from
connecting to loopback addresses; other browsers have no such check, and the broker does
not rely on it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, BrowserContext, ConsoleMessage, Page, expect

from spool.server.client.sync import SyncClient
from spool.web.clientmodules import CLIENT_MODULE
from tests.browser.conftest import ADMIN_TOKEN, ADMIN_USER, STATIC, VIEWPORT
from tests.support.server import SpoolProcess

pytestmark = pytest.mark.browser


def api(server: SpoolProcess, path: str, **params: str) -> Any:
    response = httpx.get(
        f"{server.http_url}{path}",
        params=params,
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
        timeout=10,
    )
    response.raise_for_status()
    return response.json()


class _ElsewhereHandler(BaseHTTPRequestHandler):
    """Another web application: a blank page and a copy of the JavaScript client (the
    entry module and the modules it imports)."""

    def do_GET(self) -> None:
        if CLIENT_MODULE.fullmatch(self.path):
            body, kind = (
                (STATIC / self.path.removeprefix("/static/")).read_bytes(),
                "text/javascript",
            )
        else:
            body, kind = b"<!doctype html><title>elsewhere</title>", "text/html"
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


@pytest.fixture(scope="module")
def elsewhere() -> Iterator[str]:
    """The origin of another web server on this machine (another loopback port)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ElsewhereHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def foreign_page(browser: Browser, elsewhere: str) -> Iterator[tuple[Page, list[str]]]:
    """A page of that other origin and the console messages it logged."""
    ctx: BrowserContext = browser.new_context(viewport=VIEWPORT)  # type: ignore[arg-type]
    page = ctx.new_page()
    console: list[str] = []

    def log(message: ConsoleMessage) -> None:
        console.append(message.text)

    page.on("console", log)
    page.goto(f"{elsewhere}/")
    yield page, console
    ctx.close()


def test_the_dashboards_own_page_subscribes_over_the_websocket(
    page: Page, dashboard_server: SpoolProcess
) -> None:
    page.goto(f"{dashboard_server.http_url}/query")
    page.fill("#topic", "origin-own")
    page.click("#start")
    expect(page.locator("#q-state")).to_have_text("running")
    with SyncClient(dashboard_server.ws_url, "origin-feeder") as feeder:
        for i in range(3):
            feeder.publish("origin-own", {"i": i})
        feeder.flush()
    expect(page.locator("#q-count")).to_have_text("3")
    clients = httpx.get(f"{dashboard_server.http_url}/api/clients").json()["clients"]
    mine = [c for c in clients if c["name"].startswith("dashboard-query-")]
    assert [c["origin"] for c in mine] == [dashboard_server.http_url]
    page.click("#stop")
    expect(page.locator("#q-state")).to_have_text("stopped")


def test_a_page_of_another_origin_is_told_the_fix(
    foreign_page: tuple[Page, list[str]], dashboard_server: SpoolProcess, elsewhere: str
) -> None:
    """The page's script sees the close and its reason (a refused upgrade would show it
    code 1006 and nothing else), and the client's error carries it."""
    page, _ = foreign_page
    fix = f"origin {elsewhere} may not use this broker: add it to Admin/AllowedOrigins"
    outcome = page.evaluate(
        """async (url) => {
          const closed = await new Promise((resolve) => {
            const ws = new WebSocket(url);
            ws.onclose = (e) => resolve({ code: e.code, reason: e.reason });
          });
          const { SpoolClient } = await import('/static/spool-client.js');
          let error;
          try { await new SpoolClient(url, { name: 'elsewhere' }).connect(); }
          catch (e) { error = e.message; }
          return { ...closed, error };
        }""",
        dashboard_server.ws_url,
    )
    assert outcome == {
        "code": 1008,
        "reason": fix,
        "error": f"disconnected: connection closed (code 1008, {fix})",
    }
    events = httpx.get(
        f"{dashboard_server.http_url}/api/events", params={"category": "session"}
    ).json()["events"]
    assert any(e["event"] == "origin_refused" and e.get("origin") == elsewhere for e in events)
    clients = httpx.get(f"{dashboard_server.http_url}/api/clients").json()["clients"]
    assert not [c for c in clients if c["name"] == "elsewhere"]


def test_with_users_a_page_of_another_origin_must_log_on_with_a_token(
    foreign_page: tuple[Page, list[str]], auth_server: SpoolProcess
) -> None:
    page, _ = foreign_page
    result = page.evaluate(
        """async ({ url, user, token }) => {
          const { SpoolClient } = await import('/static/spool-client.js');
          const attempt = async (opts) => {
            const client = new SpoolClient(url, opts);
            try { await client.connect(); client.close(); return 'logged on'; }
            catch (e) { return e.reason; }
          };
          return {
            bare: await attempt({ name: 'evil-bare', userId: user }),
            token: await attempt({ name: 'evil-token', userId: user, password: token }),
          };
        }""",
        {"url": auth_server.ws_url, "user": ADMIN_USER, "token": ADMIN_TOKEN},
    )
    assert result == {"bare": "auth failure", "token": "logged on"}
    failures = [
        e
        for e in api(auth_server, "/api/events", category="session")["events"]
        if e["event"] == "disconnected" and e.get("cause") == "logon_failed"
    ]
    assert failures


def test_a_page_of_another_origin_imports_the_client_from_the_broker(
    foreign_page: tuple[Page, list[str]], auth_server: SpoolProcess
) -> None:
    """The client modules are served with CORS, so a page elsewhere loads them from the
    broker itself (an ES module of another origin needs it); the dashboard's own scripts
    are not. Connecting is still the websocket's origin check: here, a logon with a
    token."""
    page, _ = foreign_page
    result = page.evaluate(
        """async ({ base, url, user, token }) => {
          const { SpoolClient } = await import(`${base}/static/spool-client.js`);
          const { HAClient } = await import(`${base}/static/spool-ha.js`);
          const client = new SpoolClient(url, { name: 'elsewhere-import', userId: user,
                                                password: token });
          await client.connect();
          client.close();
          let dashboard;
          try { await fetch(`${base}/static/js/query.js`); dashboard = 'read'; }
          catch (e) { dashboard = 'refused'; }
          return { ha: typeof HAClient, dashboard };
        }""",
        {
            "base": auth_server.http_url,
            "url": auth_server.ws_url,
            "user": ADMIN_USER,
            "token": ADMIN_TOKEN,
        },
    )
    assert result == {"ha": "function", "dashboard": "refused"}
    clients = api(auth_server, "/api/clients")["clients"]
    assert not [c for c in clients if c["name"] == "elsewhere-import"]  # it logged off
    logons = api(auth_server, "/api/events", category="session")["events"]
    assert any(e["event"] == "logon" and e.get("client") == "elsewhere-import" for e in logons)
