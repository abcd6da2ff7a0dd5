"""The dashboard's layout at the three widths it supports (docs/dashboard.md, "Layout").

Every page of the navigation, at 1280x800, 1440x900 and 768x1024, with a publisher running
and clients with long names: the document never scrolls sideways, the top bar's clock,
theme toggle and log-out button are inside the viewport, and a wide table scrolls inside
its own box, where the Clients table's Disconnect button can be reached. With
SPOOL_SCREENSHOTS=1 it also writes each page at 1440x900 to docs/pages/NAME.png (the
pictures docs/dashboard.md shows: ``make screenshots``).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import BrowserContext, Page, expect

from spool.server.client.sync import SyncClient
from spool.server.passwords import hash_password
from spool.web.dashboard import PAGES
from tests.browser.conftest import ADMIN_PASSWORD, ADMIN_TOKEN, ADMIN_USER
from tests.support.server import SpoolProcess, config_xml

pytestmark = pytest.mark.browser

SIZES = [(1280, 800), (1440, 900), (768, 1024)]
#: where the pages' pictures go, and the size they are taken at
SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "pages"
SCREENSHOT_SIZE = (1440, 900)
NAV = [p for p in PAGES if p.nav]
LONG_NAME = "market-data-feed-handler-" + "eu-west-primary-" * 4 + "publisher"
TOPIC = "prices/" + "eu-west/" * 6 + "quotes"
TOP_BAR_CONTROLS = ["#clock", "#theme-toggle", "form[action='/logout'] button"]
#: the first elements reaching past the right edge (for the failure message)
WIDER_THAN = """(width) => [...document.querySelectorAll("body *")]
  .filter((e) => e.getBoundingClientRect().right > width).slice(0, 6)
  .map((e) => `${e.tagName.toLowerCase()}#${e.id}.${e.className}`)"""


@pytest.fixture(scope="module")
def busy_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SpoolProcess]:
    """A broker with users (so the top bar has its log-out button), a client with a long
    name publishing all the time and a second one reading."""
    workdir = tmp_path_factory.mktemp("layout")
    users = (
        f"<User><Name>{ADMIN_USER}</Name><PasswordHash>{hash_password(ADMIN_PASSWORD)}"
        f"</PasswordHash><Token>{ADMIN_TOKEN}</Token><Admin>true</Admin>"
        "<Read>.*</Read><Write>.*</Write></User>"
    )
    proc = SpoolProcess(
        workdir, config_xml(workdir / "data", name="spool-layout", users=users)
    ).start()
    stop = threading.Event()
    ready = threading.Event()
    failures: list[BaseException] = []

    def publish() -> None:
        creds = {"user_id": ADMIN_USER, "password": ADMIN_TOKEN}
        try:
            with (
                SyncClient(proc.ws_url, LONG_NAME, **creds) as feed,
                SyncClient(proc.ws_url, LONG_NAME.replace("publisher", "reader"), **creds) as rd,
            ):
                rd.subscribe(TOPIC)
                i = 0
                while not stop.is_set():
                    feed.publish(TOPIC, {"i": i, "px": i % 97})
                    i += 1
                    if i % 50 == 0:
                        feed.flush()
                        ready.set()
                        stop.wait(0.05)
        except BaseException as exc:
            failures.append(exc)
            ready.set()

    worker = threading.Thread(target=publish, name="layout-publisher", daemon=True)
    try:
        worker.start()
        assert ready.wait(30) and not failures, f"the publisher failed: {failures}"
        yield proc
    finally:
        stop.set()
        worker.join(30)
        proc.stop()
    assert not failures, failures


@pytest.fixture
def logged_in(context: BrowserContext, page: Page, busy_server: SpoolProcess) -> Page:
    page.goto(f"{busy_server.http_url}/login")
    page.fill("#username", ADMIN_USER)
    page.fill("#password", ADMIN_PASSWORD)
    page.click("button[type=submit]")
    expect(page.locator("#instance-name")).to_have_text("spool-layout")
    return page


def assert_fits(page: Page, where: str) -> None:
    """No sideways scroll of the document; the top bar's controls inside the viewport."""
    width, scroll = page.evaluate("() => [window.innerWidth, document.documentElement.scrollWidth]")
    if scroll > width:
        wide = page.evaluate(WIDER_THAN, width)
        pytest.fail(f"{where}: the page scrolls sideways ({scroll} > {width}): {wide}")
    height = page.evaluate("() => window.innerHeight")
    for selector in TOP_BAR_CONTROLS:
        control = page.locator(selector)
        expect(control).to_be_visible()
        box = control.bounding_box()
        assert box is not None, f"{where}: {selector} has no box"
        inside = (
            box["x"] >= 0
            and box["y"] >= 0
            and box["x"] + box["width"] <= width
            and box["y"] + box["height"] <= height
        )
        assert inside, f"{where}: {selector} at {box} is outside the {width}px viewport"


@pytest.mark.parametrize(("width", "height"), SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
def test_every_page_fits_the_width_with_traffic(
    logged_in: Page, busy_server: SpoolProcess, width: int, height: int
) -> None:
    page = logged_in
    page.set_viewport_size({"width": width, "height": height})
    for p in NAV:
        page.goto(f"{busy_server.http_url}{p.path}")
        expect(page.locator("#live-status")).to_have_attribute("data-state", "open")
        # the ticker has a live figure (not the "no value" dash): the bar at its widest
        expect(page.locator("#ticker [data-live='msgs_in']")).not_to_have_text("\u2013")
        if p.name == "clients":
            expect(page.locator(f'tr[data-key="{LONG_NAME}"]')).to_be_visible()
        assert_fits(page, f"{p.path} at {width}x{height}")
        if (width, height) == SCREENSHOT_SIZE and os.environ.get("SPOOL_SCREENSHOTS") == "1":
            SCREENSHOTS.mkdir(exist_ok=True)
            page.screenshot(path=str(SCREENSHOTS / f"{p.name}.png"))

    # the widest table scrolls in its own box; its last column is reachable there
    page.goto(f"{busy_server.http_url}/clients")
    button = page.locator(f'tr[data-key="{LONG_NAME}"] button[data-action="disconnect"]')
    button.scroll_into_view_if_needed()
    expect(button).to_be_in_viewport()
    assert_fits(page, f"/clients scrolled to Disconnect at {width}x{height}")
