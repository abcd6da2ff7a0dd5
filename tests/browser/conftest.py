"""Fixtures of the browser tests: Debian's Chromium driven by Playwright (sync API).

- ``browser``: one Chromium for the whole session.
- ``page``: a fresh context and page per test (1280x800, the size the dashboard is built
  for); uncaught JavaScript errors fail the test; a screenshot of the final state is saved
  to ``test-artifacts/browser/``.
- ``dashboard_server`` / ``auth_server``: real ``spool serve`` processes shared by a test
  module (starting one takes a second or two), the second with a configured user.
- ``static_origin``: pages of a made-up origin whose ``/static/`` is served from the
  repository by Playwright's request routing, for tests of the JavaScript alone;
  ``secure_static_origin`` the same on a secure-context origin (IndexedDB stores).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, Route, sync_playwright

from spool.server.passwords import hash_password
from tests.support.server import SpoolProcess, config_xml

ROOT = Path(__file__).resolve().parents[2]
STATIC = ROOT / "static"
ARTIFACTS = ROOT / "test-artifacts" / "browser"
CHROMIUM = Path(os.environ.get("SPOOL_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
VIEWPORT = {"width": 1280, "height": 800}
STATIC_ORIGIN = "http://spool.test"
#: a routed origin that is a secure context (a ``.localhost`` name), where the Web Locks API
#: and so the IndexedDB stores of the browser HA client exist
SECURE_STATIC_ORIGIN = "http://spool.localhost"

ADMIN_USER = "ops"
ADMIN_PASSWORD = "correct horse battery staple"
ADMIN_TOKEN = "ops-token-for-browser-tests-0123456789"

_CONTENT_TYPES = {".js": "text/javascript", ".css": "text/css", ".svg": "image/svg+xml"}


def artifact_path(name: str) -> Path:
    """Where a screenshot called ``name`` goes (test-artifacts/ is gitignored)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS / (re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:150] + ".png")


@pytest.fixture(scope="package")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        pytest.fail(
            f"Chromium not found at {CHROMIUM}: run `make browser` (apt-get install chromium)"
        )
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


class PageErrors:
    """Uncaught exceptions and console errors of a page (network 4xx are expected)."""

    def __init__(self, page: Page) -> None:
        self.errors: list[str] = []
        page.on("pageerror", lambda exc: self.errors.append(f"uncaught: {exc}"))
        page.on("console", self._console)

    def _console(self, message: object) -> None:
        kind = getattr(message, "type", "")
        text = str(getattr(message, "text", ""))
        # the browser logs every non-2xx fetch; the tests provoke some on purpose
        if kind == "error" and not text.startswith("Failed to load resource"):
            self.errors.append(f"console: {text}")


@pytest.fixture
def context(browser: Browser) -> Iterator[BrowserContext]:
    ctx = browser.new_context(viewport=VIEWPORT)  # type: ignore[arg-type]
    yield ctx
    ctx.close()


@pytest.fixture
def page(context: BrowserContext, request: pytest.FixtureRequest) -> Iterator[Page]:
    page = context.new_page()
    errors = PageErrors(page)
    yield page
    if not page.is_closed():
        page.screenshot(path=artifact_path(request.node.nodeid))
    assert errors.errors == [], "JavaScript errors on the page"


def _serve_static(route: Route) -> None:
    path = urlsplit(route.request.url).path
    if path.startswith("/static/"):
        file = (STATIC / path[len("/static/") :]).resolve()
        if file.is_file() and STATIC in file.parents:
            content_type = _CONTENT_TYPES.get(file.suffix, "application/octet-stream")
            route.fulfill(status=200, body=file.read_bytes(), content_type=content_type)
            return
        route.fulfill(status=404, body="not found")
        return
    route.fulfill(
        status=200, body="<!doctype html><title>spool test</title>", content_type="text/html"
    )


def _static_page(browser: Browser, origin: str) -> Iterator[Page]:
    ctx = browser.new_context(viewport=VIEWPORT)  # type: ignore[arg-type]
    ctx.route(f"{origin}/**", _serve_static)
    page = ctx.new_page()
    errors = PageErrors(page)
    page.goto(f"{origin}/")
    page.evaluate("async () => { window.spool = await import('/static/spool-client.js'); }")
    yield page
    ctx.close()
    assert errors.errors == []


@pytest.fixture(scope="module")
def static_origin(browser: Browser) -> Iterator[Page]:
    """A page on a routed origin with ``window.spool`` = the spool-client.js module."""
    yield from _static_page(browser, STATIC_ORIGIN)


@pytest.fixture(scope="module")
def secure_static_origin(browser: Browser) -> Iterator[Page]:
    """As ``static_origin``, on a secure-context origin (IndexedDB stores work there)."""
    yield from _static_page(browser, SECURE_STATIC_ORIGIN)


@pytest.fixture
def fresh_secure_origin(browser: Browser) -> Iterator[Page]:
    """As ``secure_static_origin``, in a browser context of its own: its storage starts
    empty (the origin's quota is checked when its storage is first written to)."""
    yield from _static_page(browser, SECURE_STATIC_ORIGIN)


def _start(workdir: Path, xml: str) -> SpoolProcess:
    return SpoolProcess(workdir, xml).start()


@pytest.fixture(scope="module")
def dashboard_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SpoolProcess]:
    """A broker recording every topic, no users (loopback is trusted), stats every second."""
    workdir = tmp_path_factory.mktemp("dashboard")
    proc = _start(workdir, config_xml(workdir / "data", name="spool-dash", journal_size="1MB"))
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def auth_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SpoolProcess]:
    """A broker with one admin user (password for the dashboard, token for the websocket)."""
    workdir = tmp_path_factory.mktemp("auth")
    users = (
        f"<User><Name>{ADMIN_USER}</Name><PasswordHash>{hash_password(ADMIN_PASSWORD)}"
        f"</PasswordHash><Token>{ADMIN_TOKEN}</Token><Admin>true</Admin></User>"
    )
    proc = _start(workdir, config_xml(workdir / "data", name="spool-auth", users=users))
    yield proc
    proc.stop()
