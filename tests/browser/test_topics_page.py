"""The Topics page and what it leads to, in Chromium at 1440x900 against a real broker: the
list with its counts, a topic's link that opens the Query page replaying it, "Replay from
here" on a result row, and the JSON-lines and CSV exports of the rows shown.

Messages are published with a Python client; what the page shows is checked against what
was published, the downloads against the table.

Also writes docs/topics.png when SPOOL_SCREENSHOTS=1.
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, BrowserContext, Locator, Page, expect

from spool.server.client.sync import SyncClient
from tests.browser.conftest import ADMIN_PASSWORD, ADMIN_USER
from tests.support.server import ROOT, SpoolProcess, config_xml, sow_topic

pytestmark = pytest.mark.browser

#: the size the Topics page is checked (and pictured) at
VIEWPORT = {"width": 1440, "height": 900}
EXPORT_FIELDS = ["bookmark", "timestamp", "topic", "sow_key", "correlation_id", "body"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SpoolProcess]:
    workdir = tmp_path_factory.mktemp("topics-page")
    xml = config_xml(
        workdir / "data", name="spool-topics", journal_size="4MB", sow=sow_topic("prices", "/sym")
    )
    proc = SpoolProcess(workdir, xml).start()
    feeder = SyncClient(proc.ws_url, "topics-feeder")
    feeder.connect()
    try:
        for i in range(3):
            feeder.publish("orders", {"i": i, "side": "buy"}, persisted=True)
        for sym, px in (("AA", 10), ("BB", 20)):
            feeder.publish("prices", {"sym": sym, "px": px}, persisted=True)
        for i in range(6):
            # a body that needs quoting in CSV (comma, quote) and a correlation id
            feeder.publish(
                "ticks", {"i": i, "note": f'a, "b" {i}'}, persisted=True, correlation_id=f"c{i}"
            )
        feeder.flush()
    finally:
        feeder.close()
    yield proc
    proc.stop()


@pytest.fixture
def context(browser: Browser) -> Iterator[BrowserContext]:
    ctx = browser.new_context(viewport=VIEWPORT, accept_downloads=True)  # type: ignore[arg-type]
    yield ctx
    ctx.close()


def topic_row(page: Page, topic: str) -> Locator:
    return page.locator(f"#topics-table tr.topic-row[data-key='{topic}']")


def result_rows(page: Page) -> Locator:
    return page.locator("#messages-table tbody tr:not(.empty)")


def shown(page: Page) -> list[dict[str, str]]:
    """The result table's rows, top (newest) first: bookmark, topic, body."""
    out = []
    for tr in result_rows(page).all():
        cells = tr.locator("td").all_inner_texts()
        out.append({"bookmark": cells[1], "topic": cells[3], "body": cells[4]})
    return out


def replay(page: Page, server: SpoolProcess, topic: str, count: int) -> None:
    """Open the Topics page and follow ``topic``'s link: the Query page replays it."""
    page.goto(f"{server.http_url}/topics")
    topic_row(page, topic).locator("a.query-link").click()
    expect(page.locator("#q-completed")).to_have_text("reached live")
    expect(result_rows(page)).to_have_count(count)


def test_the_list_shows_each_topic_with_its_kind_and_counts(
    page: Page, server: SpoolProcess
) -> None:
    page.goto(f"{server.http_url}/topics")
    orders, prices = topic_row(page, "orders"), topic_row(page, "prices")
    expect(orders.locator("[data-field='messages']")).to_have_text("3")
    expect(orders.locator("[data-field='kind']")).to_have_text("plain")
    expect(orders.locator("[data-field='sow_records']")).to_have_text(
        "\u2013"
    )  # the "no value" dash
    expect(prices.locator("[data-field='kind']")).to_have_text("sow")
    expect(prices.locator("[data-field='messages']")).to_have_text("2")
    expect(prices.locator("[data-field='sow_records']")).to_have_text("2")
    expect(topic_row(page, "ticks").locator("[data-field='messages']")).to_have_text("6")
    expect(prices.locator("a.sow")).to_be_visible()
    expect(orders.locator("a.sow")).to_be_hidden()
    assert prices.locator("a.sow").get_attribute("href") == "/sow?topic=prices"

    # sorted by name, then by messages (most first) with a click on the header
    expect(page.locator("#topics-table tr.topic-row").first).to_have_attribute("data-key", "orders")
    page.click("#topics-table th[data-sort='messages']")
    expect(page.locator("#topics-table tr.topic-row").first).to_have_attribute("data-key", "ticks")
    if os.environ.get("SPOOL_SCREENSHOTS") == "1":
        page.screenshot(path=str(ROOT / "docs" / "topics.png"))


def test_a_topic_opens_the_query_page_replaying_it(page: Page, server: SpoolProcess) -> None:
    replay(page, server, "orders", 3)
    assert page.url.endswith("/query?topic=orders&bookmark=0")
    expect(page.locator("#topic")).to_have_value("orders")
    rows = shown(page)
    assert [json.loads(r["body"])["i"] for r in rows] == [2, 1, 0]
    assert {r["topic"] for r in rows} == {"orders"}


def test_replay_from_here_starts_after_the_rows_bookmark(page: Page, server: SpoolProcess) -> None:
    replay(page, server, "ticks", 6)
    before = shown(page)
    # the row of i = 2 (rows are newest first: i = 5, 4, 3, 2, 1, 0)
    chosen = result_rows(page).nth(3)
    assert json.loads(before[3]["body"])["i"] == 2
    chosen.locator("button.replay").click()
    expect(page.locator("#q-completed")).to_have_text("reached live")
    expect(result_rows(page)).to_have_count(3)
    after = shown(page)
    # the new result's first row (the oldest, at the bottom) is the one after the bookmark
    assert [json.loads(r["body"])["i"] for r in after] == [5, 4, 3]
    assert after == before[:3]
    expect(page.locator("#bookmark-kind")).to_have_value("custom")
    expect(page.locator("#bookmark")).to_have_value(before[3]["bookmark"])


def download(page: Page, button: str) -> str:
    with page.expect_download() as info:
        page.click(button)
    path = info.value.path()
    return Path(path).read_bytes().decode("utf-8")  # as written: CRLF kept


def test_the_exports_hold_exactly_the_rows_shown(page: Page, server: SpoolProcess) -> None:
    replay(page, server, "ticks", 6)
    rows = shown(page)

    lines = download(page, "#export-jsonl").splitlines()
    records: list[dict[str, Any]] = [json.loads(line) for line in lines]
    assert [list(r) for r in records] == [EXPORT_FIELDS] * len(rows)
    assert [{k: r[k] for k in ("bookmark", "topic", "body")} for r in records] == rows
    assert [r["correlation_id"] for r in records] == [f"c{i}" for i in (5, 4, 3, 2, 1, 0)]
    assert all(r["timestamp"] for r in records)

    text = download(page, "#export-csv")
    assert text.endswith("\r\n")
    table = list(csv.reader(io.StringIO(text, newline="")))
    assert table[0] == EXPORT_FIELDS
    assert [dict(zip(EXPORT_FIELDS, r, strict=True)) for r in table[1:]] == [
        {k: "" if v is None else str(v) for k, v in r.items()} for r in records
    ]


def test_with_users_the_link_fills_the_form_and_waits_for_the_password(
    page: Page, auth_server: SpoolProcess
) -> None:
    page.goto(f"{auth_server.http_url}/login?next=/query%3Ftopic%3Dorders%26bookmark%3D0")
    page.fill("#username", ADMIN_USER)
    page.fill("#password", ADMIN_PASSWORD)
    page.click("button[type=submit]")
    expect(page).to_have_url(f"{auth_server.http_url}/query?topic=orders&bookmark=0")
    expect(page.locator("#topic")).to_have_value("orders")
    expect(page.locator("#bookmark-kind")).to_have_value("0")
    # the websocket needs the password or token, which a URL does not carry
    expect(page.locator("#ws-password")).to_be_focused()
    expect(page.locator("#q-state")).to_have_text("idle")
