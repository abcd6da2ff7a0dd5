"""The client page (/clients/NAME) in Chromium against a real broker with users.

A slow consumer (a client in its own process that reads a few kilobytes a second) holds two
subscriptions: a live one to a quiet topic, which keeps up, and a bookmark one to a topic
published to far faster than it reads, whose lag grows. The page is read like an operator
would; what it does is checked through the REST API. Also writes docs/client.png (at
1440x900) when SPOOL_SCREENSHOTS=1 is set.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, expect

from spool.server.client.sync import SyncClient
from spool.server.passwords import hash_password
from tests.browser.conftest import ADMIN_PASSWORD, ADMIN_TOKEN, ADMIN_USER
from tests.browser.test_dashboard_charts import leftmost_point, seconds_before
from tests.browser.test_dashboard_layout import SIZES, assert_fits
from tests.support.server import SpoolProcess, config_xml
from tests.support.wait import wait_until

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
VIEWER_USER = "watcher"
VIEWER_PASSWORD = "looks but does not touch"
WATCHED = "ticker-feed-1"
QUIET = "heartbeats"
BUSY = "ticks"
#: bytes per second the watched client reads: far less than is published to BUSY
READ_RATE = 8000
#: seconds behind the busy subscription is before the tests look at it
BEHIND_S = 5.0
#: what a cell shows without a value
NO_VALUE = "\u2013"
NOTHING = re.compile(f"^(0|{NO_VALUE})$")


@pytest.fixture(scope="module")
def detail_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SpoolProcess]:
    """A broker with an admin and a user who is no admin, stats every second."""
    workdir = tmp_path_factory.mktemp("client-page")
    users = (
        f"<User><Name>{ADMIN_USER}</Name><PasswordHash>{hash_password(ADMIN_PASSWORD)}"
        f"</PasswordHash><Token>{ADMIN_TOKEN}</Token><Admin>true</Admin>"
        "<Read>.*</Read><Write>.*</Write></User>"
        f"<User><Name>{VIEWER_USER}</Name><PasswordHash>{hash_password(VIEWER_PASSWORD)}"
        "</PasswordHash><Read>.*</Read></User>"
    )
    # a small buffer per client: a live subscription that cannot keep up spills to a
    # catch-up read of the log soon, instead of after 64 MB
    xml = config_xml(
        workdir / "data",
        name="spool-detail",
        users=users,
        tuning="<SlowClientBufferLimit>512KB</SlowClientBufferLimit>",
        transport_extra="<MaxMessageSize>256KB</MaxMessageSize>",
    )
    proc = SpoolProcess(workdir, xml)
    proc.start()
    yield proc
    proc.stop()


def api(server: SpoolProcess, path: str) -> httpx.Response:
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    return httpx.get(f"{server.http_url}{path}", headers=headers, timeout=10)


def subscriptions(server: SpoolProcess, client: str) -> dict[str, dict[str, object]]:
    answer = api(server, f"/api/subscriptions?client={client}").json()
    return {s["sub_id"]: s for s in answer["subscriptions"]}


@pytest.fixture(scope="module")
def watched(detail_server: SpoolProcess) -> Iterator[str]:
    """The client the tests look at, in its own process: a live subscription ``quiet`` to a
    topic published to once a second, and a bookmark subscription ``busy`` to a topic
    published to far faster than it reads, so its replay falls further behind."""
    server = detail_server
    publisher = SyncClient(server.ws_url, "ticks-publisher", user_id=ADMIN_USER,
                           password=ADMIN_TOKEN)  # fmt: skip
    publisher.connect()
    publisher.publish(BUSY, {"i": -1}, persisted=True)
    publisher.publish(QUIET, {"i": -1}, persisted=True)
    publisher.flush()
    args = [server.ws_url, WATCHED, ADMIN_USER, ADMIN_TOKEN, QUIET, BUSY, str(READ_RATE)]
    consumer = subprocess.Popen(
        [sys.executable, "-m", "tests.support.slow_consumer", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
    )
    stop = threading.Event()

    def publish() -> None:
        i = 0
        pad = "x" * 8000
        while not stop.wait(0.02):
            publisher.publish(BUSY, {"i": i, "pad": pad})
            if i % 50 == 0:
                publisher.publish(QUIET, {"i": i})
            i += 1

    worker = threading.Thread(target=publish, name="busy-publisher", daemon=True)
    try:
        assert consumer.stdout is not None
        assert consumer.stdout.readline().strip() == b"ready"
        worker.start()

        # seconds behind, not just a moment: the buffers on the way (the broker's, the
        # kernel's) are full, and from now on the lag only grows
        def behind() -> bool:
            busy = subscriptions(server, WATCHED).get("busy", {})
            return float(str(busy.get("seconds_behind", 0))) >= BEHIND_S

        wait_until(behind, timeout=90, interval=0.2, message="the busy subscription behind")
        yield WATCHED
    finally:
        stop.set()
        worker.join(30)
        publisher.close()
        consumer.kill()
        consumer.communicate()  # reaps it and closes its stdout


def log_in(page: Page, server: SpoolProcess, user: str, password: str) -> None:
    page.goto(f"{server.http_url}/login")
    page.fill("#username", user)
    page.fill("#password", password)
    page.click("button[type=submit]")
    expect(page.locator("#instance-name")).to_have_text("spool-detail")


def sampled(server: SpoolProcess, metric: str) -> bool:
    """Whether the stats database holds a few samples of ``metric``, one of them not 0."""
    answer = api(server, f"/api/stats?metric={metric}")
    if answer.status_code == 404:  # until the sampler wrote the series once
        return False
    points = answer.json()["points"]
    return len(points) >= 3 and any(v > 0 for _, v in points)


def test_a_live_client_shows_its_facts_subscriptions_lag_events_and_history(
    page: Page, detail_server: SpoolProcess, watched: str
) -> None:
    server = detail_server
    # connected for a while: the stats database holds some of its seconds
    wait_until(lambda: sampled(server, f"clients/{WATCHED}/msgs_out_rate"), timeout=30,
               interval=0.2, message="stored msgs in rate of the client")  # fmt: skip
    log_in(page, server, ADMIN_USER, ADMIN_PASSWORD)
    # reached from the Clients page by its name
    page.goto(f"{server.http_url}/clients")
    page.locator(f'tr[data-key="{WATCHED}"] a.client-link').click()
    opened = time.time()
    expect(page).to_have_url(f"{server.http_url}/clients/{WATCHED}")
    expect(page.locator("#client-state")).to_have_text("connected")
    facts = page.locator("#facts")
    expect(facts.locator('dd[data-fact="user"]')).to_have_text(ADMIN_USER)
    expect(facts.locator('dd[data-fact="remote address"]')).to_contain_text("127.0.0.1")
    expect(facts.locator('dd[data-fact="messages out"]')).not_to_have_text(NOTHING)
    expect(page.locator("#disconnect")).to_be_enabled()

    # the rates chart opens with the stored history, older than the page
    expect(page.locator("#chart-rates .empty-note")).to_be_hidden()

    def older_point() -> dict[str, str] | None:
        legend = leftmost_point(page, "#chart-rates")
        when = legend.get("time (UTC)", "")
        if re.fullmatch(r"\d\d:\d\d:\d\d", when) and 2 <= seconds_before(opened, when) < 600:
            return legend
        return None

    legend = wait_until(older_point, timeout=10, interval=0.2, message="a stored point")
    assert re.fullmatch(r"[\d.,]+\s*[kMG]?/s", legend["out"]), legend

    # both subscriptions with what they were delivered; the busy one falls behind
    rows = page.locator("#client-subs-table tbody tr")
    expect(rows).to_have_count(2)
    quiet_row = page.locator('#client-subs-table tr[data-key="quiet"]')
    busy_row = page.locator('#client-subs-table tr[data-key="busy"]')
    expect(quiet_row.locator('td[data-field="state"]')).to_have_text("live")
    expect(busy_row.locator('td[data-field="state"]')).to_have_text(re.compile("replaying|live"))
    delivered = subscriptions(server, WATCHED)
    assert int(str(delivered["quiet"]["delivered"])) > 0
    assert int(str(delivered["busy"]["delivered"])) >= 1
    expect(quiet_row.locator('td[data-field="delivered"]')).not_to_have_text(NOTHING)
    expect(busy_row.locator('td[data-field="delivered"]')).not_to_have_text(NOTHING)
    expect(quiet_row.locator('td[data-field="rate"]')).not_to_have_text(NO_VALUE)
    expect(busy_row.locator('td[data-field="trend"]')).to_have_attribute("data-trend", "growing")
    expect(busy_row.locator('td[data-field="lag_msgs"]')).not_to_have_text(NOTHING)
    expect(busy_row.locator('td[data-field="seconds_behind"]')).not_to_have_text(NOTHING)
    assert float(str(subscriptions(server, WATCHED)["busy"]["seconds_behind"])) >= BEHIND_S

    # its events: the logon
    expect(page.locator("#client-events-table tbody")).to_contain_text("session/logon")

    # a row opens the subscription's detail, with its own address
    busy_row.click()
    expect(page).to_have_url(f"{server.http_url}/clients/{WATCHED}/subs/busy")
    expect(page.locator("#sub-detail")).to_be_visible()
    expect(page.locator("#sub-detail-id")).to_have_text("busy")
    expect(page.locator("#chart-sub-lag-s .empty-note")).to_be_hidden()
    expect(page.locator("#chart-sub-lag-msgs .empty-note")).to_be_hidden()
    expect(page.locator("#page-alert")).to_be_hidden()


def test_the_subscriptions_page_links_to_a_subscription_of_the_client(
    page: Page, detail_server: SpoolProcess, watched: str
) -> None:
    server = detail_server
    log_in(page, server, ADMIN_USER, ADMIN_PASSWORD)
    page.goto(f"{server.http_url}/subscriptions")
    page.locator("#subs-table tbody tr", has_text="quiet").get_by_role("link", name="quiet").click()
    expect(page).to_have_url(f"{server.http_url}/clients/{WATCHED}/subs/quiet")
    expect(page.locator("#sub-detail-id")).to_have_text("quiet")
    expect(page.locator("#chart-sub-rate .empty-note")).to_be_hidden()


def test_disconnect_ends_the_client_and_the_page_keeps_its_last_facts(
    page: Page, detail_server: SpoolProcess, watched: str
) -> None:
    server = detail_server
    name = "short-lived-1"
    with SyncClient(server.ws_url, name, user_id=ADMIN_USER, password=ADMIN_TOKEN) as doomed:
        doomed.publish(QUIET, {"i": 0}, persisted=True)
        doomed.flush()
        log_in(page, server, ADMIN_USER, ADMIN_PASSWORD)
        page.goto(f"{server.http_url}/clients/{name}")
        expect(page.locator("#client-state")).to_have_text("connected")
        expect(page.locator('#facts dd[data-fact="messages in"]')).to_have_text("1")
        page.locator("#disconnect").click()
        page.locator('dialog [data-action="confirm"]').click()
        expect(page.locator("#page-alert")).to_contain_text(f"{name} disconnected")
        wait_until(lambda: api(server, f"/api/clients/{name}").status_code == 404,
                   timeout=15, interval=0.1, message="the client gone from the API")  # fmt: skip
        expect(page.locator("#client-state")).to_have_text("disconnected")
        expect(page.locator('#facts dd[data-fact="messages in"]')).to_have_text("1")
        expect(page.locator("#disconnect")).to_be_disabled()
    # opened after it left: not a 404 page, the facts of its last disconnect
    page.reload()
    expect(page.locator("#client-state")).to_have_text("disconnected")
    expect(page.locator('#facts dd[data-fact="reason"]')).to_contain_text("disconnected by admin")
    expect(page.locator('#facts dd[data-fact="remote address"]')).to_contain_text("127.0.0.1")
    expect(page.locator("#client-subs-table tbody")).to_contain_text("No subscription")
    expect(page.locator("#client-events-table tbody")).to_contain_text("session/disconnected")


def test_a_user_who_is_no_admin_sees_disconnect_disabled(
    page: Page, detail_server: SpoolProcess, watched: str
) -> None:
    log_in(page, detail_server, VIEWER_USER, VIEWER_PASSWORD)
    page.goto(f"{detail_server.http_url}/clients/{WATCHED}")
    expect(page.locator("#client-state")).to_have_text("connected")
    button = page.locator("#disconnect")
    expect(button).to_be_disabled()
    expect(button).to_have_attribute("title", re.compile("admin is needed"))


@pytest.mark.parametrize(("width", "height"), SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
def test_the_client_page_fits_the_width(
    page: Page, detail_server: SpoolProcess, watched: str, width: int, height: int
) -> None:
    log_in(page, detail_server, ADMIN_USER, ADMIN_PASSWORD)
    page.set_viewport_size({"width": width, "height": height})
    page.goto(f"{detail_server.http_url}/clients/{WATCHED}/subs/busy")
    expect(page.locator("#live-status")).to_have_attribute("data-state", "open")
    expect(page.locator('#client-subs-table tr[data-key="busy"] td[data-field="trend"]'))\
        .to_have_attribute("data-trend", "growing")  # fmt: skip
    expect(page.locator("#client-events-table tbody tr").first).to_be_visible()
    expect(page.locator("#chart-rates .empty-note")).to_be_hidden()
    assert_fits(page, f"/clients/{WATCHED}/subs/busy at {width}x{height}")
    if (width, height) == (1440, 900) and os.environ.get("SPOOL_SCREENSHOTS") == "1":
        fast_rate = page.locator('#client-subs-table tr[data-key="quiet"] td[data-field="rate"]')
        expect(fast_rate).not_to_have_text(NO_VALUE)
        page.wait_for_timeout(5000)  # a few live points on the charts, for the picture only
        page.screenshot(path=str(ROOT / "docs" / "client.png"))
