"""The dashboard's Publish page in Chromium against a real broker with users: a publish
from the page reaches a live subscriber byte for byte, a persisted ack shows its
bookmark, a user without the write entitlement sees the broker's refusal (and nothing is
published), and a message re-published from a Query result row reaches the subscriber as
a new message.

The page is driven like an operator would; what was published is checked with a Python
client subscribed from the test process, not through the page's own code.

Also writes docs/publish.png when SPOOL_SCREENSHOTS is set.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Locator, Page, expect

from spool.server.client.sync import SyncClient, SyncSubscription
from spool.server.passwords import hash_password
from tests.browser.conftest import PageErrors, artifact_path
from tests.support.server import SpoolProcess, config_xml, sow_topic

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
VIEWPORT = {"width": 1440, "height": 900}

WRITER = "desk"
WRITER_PASSWORD = "a desk password for the publish page"
WRITER_TOKEN = "desk-token-for-the-publish-page-0123456789"
READER = "viewer"
READER_PASSWORD = "a viewer password for the publish page"

BOOKMARK = re.compile(r"^\d+\|\d+\|$")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SpoolProcess]:
    """A broker with a user who may write every topic and one who may only read."""
    workdir = tmp_path_factory.mktemp("publish-page")
    users = (
        f"<User><Name>{WRITER}</Name><PasswordHash>{hash_password(WRITER_PASSWORD)}"
        f"</PasswordHash><Token>{WRITER_TOKEN}</Token>"
        "<Read>.*</Read><Write>.*</Write></User>"
        f"<User><Name>{READER}</Name><PasswordHash>{hash_password(READER_PASSWORD)}"
        "</PasswordHash><Read>.*</Read></User>"
    )
    xml = config_xml(
        workdir / "data", name="spool-publish", users=users, sow=sow_topic("pub-prices", "/sym")
    )
    proc = SpoolProcess(workdir, xml).start()
    yield proc
    proc.stop()


@pytest.fixture
def page(browser: Browser, request: pytest.FixtureRequest) -> Iterator[Page]:
    """The conftest's page at the size the page is shown at (1440x900)."""
    ctx = browser.new_context(viewport=VIEWPORT)  # type: ignore[arg-type]
    page = ctx.new_page()
    errors = PageErrors(page)
    yield page
    if not page.is_closed():
        page.screenshot(path=artifact_path(request.node.nodeid))
    ctx.close()
    assert errors.errors == [], "JavaScript errors on the page"


@pytest.fixture
def watcher(server: SpoolProcess, request: pytest.FixtureRequest) -> Iterator[SyncClient]:
    """A client of the test process, as the writing user."""
    name = f"watcher-{request.node.name[:40]}"
    client = SyncClient(server.ws_url, name, user_id=WRITER, password=WRITER_TOKEN)
    client.connect()
    yield client
    client.close()


def log_in(page: Page, server: SpoolProcess, user: str, password: str, path: str) -> None:
    page.goto(f"{server.http_url}{path}")
    page.fill("#username", user)
    page.fill("#password", password)
    page.click("button[type=submit]")
    expect(page).to_have_url(f"{server.http_url}{path}")
    page.wait_for_load_state("load")  # the page's module runs before: its form is live


def fill_message(page: Page, topic: str, body: str, *, ack: str, password: str) -> None:
    page.fill("#topic", topic)
    page.fill("#body", body)
    page.select_option("#ack-mode", ack)
    page.fill("#ws-password", password)


def next_body(sub: SyncSubscription) -> bytes:
    return sub.get(timeout=20).data


def test_a_publish_from_the_page_reaches_a_live_subscriber(
    page: Page, server: SpoolProcess, watcher: SyncClient
) -> None:
    sub = watcher.subscribe("pub-orders")
    log_in(page, server, WRITER, WRITER_PASSWORD, "/publish")
    nav = [t.strip() for t in page.locator("nav.nav a").all_inner_texts()]
    assert nav[nav.index("Query") + 1] == "Publish"
    expect(page.locator("#ws-user")).to_have_value(WRITER)

    body = '{"id": 7,\n "note": "quantité ✓"}'
    fill_message(page, "pub-orders", body, ack="processed", password=WRITER_PASSWORD)
    page.fill("#correlation-id", "order-7")
    page.click("#publish")
    expect(page.locator("#p-result")).to_have_text("published")
    expect(page.locator("#p-ack")).to_have_text("processed: success")
    message = sub.get(timeout=20)
    assert message.data == body.encode()
    assert message.correlation_id == "order-7"
    expect(page.locator("#p-client")).to_have_text(re.compile(r"^dashboard-publish-[0-9a-f]{6}$"))

    # several at once, without an ack: the page only knows they were sent
    page.fill("#correlation-id", "")
    page.fill("#body", "plain text, not JSON")
    page.select_option("#ack-mode", "none")
    page.fill("#count", "3")
    page.click("#publish")
    expect(page.locator("#p-result")).to_have_text("sent")
    expect(page.locator("#p-count")).to_have_text("3")
    assert [next_body(sub) for _ in range(3)] == [b"plain text, not JSON"] * 3
    rows = page.locator("#results-table tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.first.locator("td").nth(4)).to_have_text("sent")


def test_a_persisted_ack_shows_its_bookmark(
    page: Page, server: SpoolProcess, watcher: SyncClient
) -> None:
    sub = watcher.subscribe("pub-orders")
    log_in(page, server, WRITER, WRITER_PASSWORD, "/publish")
    body = '{"id": 8, "qty": 20}'
    fill_message(page, "pub-orders", body, ack="persisted", password=WRITER_PASSWORD)
    page.click("#publish")
    expect(page.locator("#p-result")).to_have_text("published")
    expect(page.locator("#p-ack")).to_have_text("persisted: success")
    expect(page.locator("#p-bookmark")).to_have_text(BOOKMARK)
    message = sub.get(timeout=20)
    assert message.data == body.encode()
    assert page.locator("#p-bookmark").inner_text() == message.bookmark
    expect(page.locator("#results-table tbody tr").first.locator("td").last).to_have_text(
        str(message.bookmark)
    )
    if os.environ.get("SPOOL_SCREENSHOTS"):
        page.screenshot(path=str(ROOT / "docs" / "publish.png"))


def test_a_user_without_the_write_entitlement_sees_the_broker_s_refusal(
    page: Page, server: SpoolProcess, watcher: SyncClient
) -> None:
    sub = watcher.subscribe("pub-orders")
    log_in(page, server, READER, READER_PASSWORD, "/publish")
    fill_message(page, "pub-orders", '{"id": 9}', ack="persisted", password=READER_PASSWORD)
    page.click("#publish")
    expect(page.locator("#p-result")).to_have_text("refused")
    alert = page.locator("#page-alert")
    expect(alert.locator(".reason")).to_have_text("not entitled")
    expect(alert).to_contain_text("may not publish to 'pub-orders'")
    expect(page.locator("#p-ack")).to_have_text("persisted: failure")
    expect(page.locator("#p-bookmark")).to_have_text("\u2013")  # no bookmark

    # without an ack the refusal still comes, when the broker sends it
    page.click("#page-alert button.close")
    page.select_option("#ack-mode", "none")
    page.click("#publish")
    expect(alert.locator(".reason")).to_have_text("not entitled")
    expect(page.locator("#p-result")).to_have_text("refused")
    # newest first: the publish was sent, then the broker refused it
    results = page.locator("#results-table tbody tr td:nth-child(5)")
    expect(results).to_have_text(["refused", "sent", "refused"])

    # nothing was published: the next message the subscriber gets is the one sent after
    watcher.publish("pub-orders", b"after the refusals", persisted=True)
    watcher.flush()
    assert next_body(sub) == b"after the refusals"


def query_live(page: Page, topic: str) -> None:
    """Start a live-only query of ``topic`` on the Query page (logged in)."""
    page.fill("#topic", topic)
    page.fill("#ws-password", WRITER_PASSWORD)
    page.click("#start")
    expect(page.locator("#q-state")).to_have_text("running")


def re_publish(page: Page, row: Locator) -> Page:
    """Press a Query row's Re-publish: the Publish page it opens in a new tab."""
    with page.context.expect_page() as opened:
        row.locator("button[data-action='republish']").click()
    publish = opened.value
    expect(publish).to_have_url(re.compile(r"/publish\?republish=1$"))
    return publish


def test_re_publish_from_a_query_result_reaches_the_subscriber(
    page: Page, server: SpoolProcess, watcher: SyncClient
) -> None:
    log_in(page, server, WRITER, WRITER_PASSWORD, "/query")
    query_live(page, "pub-orders")
    body = '{"id": 10, "qty": 5}'
    watcher.publish("pub-orders", body, persisted=True, correlation_id="first-10")
    watcher.flush()
    row = page.locator("#messages-table tbody tr").first
    expect(row.locator("td.body-cell")).to_have_text(body)
    original = row.locator("td").nth(1).inner_text()
    assert BOOKMARK.match(original)

    sub = watcher.subscribe("pub-orders")
    publish = re_publish(page, row)
    errors = PageErrors(publish)
    expect(publish.locator("#topic")).to_have_value("pub-orders")
    expect(publish.locator("#body")).to_have_value(body)
    expect(publish.locator("#correlation-id")).to_have_value("first-10")
    expect(publish.locator("#sow-key")).to_have_value("")
    expect(publish.locator("#ack-mode")).to_have_value("persisted")
    expect(publish.locator("#republish-note")).to_contain_text(original)

    # the operator may edit before publishing
    publish.fill("#correlation-id", "again-10")
    publish.fill("#ws-password", WRITER_PASSWORD)
    publish.click("#publish")
    expect(publish.locator("#p-result")).to_have_text("published")
    new = publish.locator("#p-bookmark")
    expect(new).to_have_text(BOOKMARK)
    assert new.inner_text() != original
    expect(publish.locator("#page-alert")).to_contain_text(
        f"as a new message with the new bookmark {new.inner_text()} (the original: {original})"
    )
    message = sub.get(timeout=20)
    assert message.data == body.encode()
    assert message.bookmark == new.inner_text()
    assert message.correlation_id == "again-10"
    # the Query page, still open, gets the new message too
    expect(page.locator("#q-count")).to_have_text("2")
    publish.screenshot(path=artifact_path("test_re_publish_the_publish_tab"))
    assert errors.errors == [], "JavaScript errors on the Publish tab"


def test_re_publish_of_a_sow_record_keeps_its_key(
    page: Page, server: SpoolProcess, watcher: SyncClient
) -> None:
    log_in(page, server, WRITER, WRITER_PASSWORD, "/query")
    query_live(page, "pub-prices")  # a SOW subscription: its deliveries carry the key
    body = '{"sym": "AA", "px": 10.5}'
    watcher.publish("pub-prices", body, persisted=True)
    watcher.flush()
    row = page.locator("#messages-table tbody tr").first
    expect(row.locator("td.body-cell")).to_have_text(body)
    key = watcher.sow("pub-prices").records[0].key

    sub = watcher.subscribe("pub-prices")
    publish = re_publish(page, row)
    errors = PageErrors(publish)
    expect(publish.locator("#sow-key")).to_have_value(str(key))
    expect(publish.locator("#body")).to_have_value(body)
    publish.fill("#ws-password", WRITER_PASSWORD)
    publish.click("#publish")
    expect(publish.locator("#p-result")).to_have_text("published")
    message = sub.get(timeout=20)
    assert message.data == body.encode()
    assert message.bookmark == publish.locator("#p-bookmark").inner_text()
    assert message.header.get("k") == key
    assert errors.errors == [], "JavaScript errors on the Publish tab"
