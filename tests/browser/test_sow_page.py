"""The dashboard's SOW page in Chromium against a real broker: the topics with their
counts, a query that shows the records (key column first, a record expands to its JSON),
a publish that updates its row live, deletes (by another client, and from the page) that
remove rows, a record leaving the filter, compaction, and the page's CSP.

The page is driven like an operator would; effects are made and checked with a Python
client and the REST API, not through the page's own code.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from playwright.sync_api import Locator, Page, expect

from spool.server.client.sync import SyncClient
from tests.support.server import SpoolProcess, config_xml, sow_topic

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def sow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SpoolProcess]:
    workdir = tmp_path_factory.mktemp("sow-page")
    sow = (
        sow_topic("prices", "/sym")
        + sow_topic("scratch", "/id", durability="transient")
        + sow_topic("bulk", "/id", durability="transient")
    )
    xml = config_xml(workdir / "data", name="spool-sow", journal_size="4MB", sow=sow)
    proc = SpoolProcess(workdir, xml).start()
    yield proc
    proc.stop()


@pytest.fixture
def feeder(sow_server: SpoolProcess, request: pytest.FixtureRequest) -> Iterator[SyncClient]:
    client = SyncClient(sow_server.ws_url, f"feeder-{request.node.name[:40]}")
    client.connect()
    yield client
    client.close()


def put(client: SyncClient, topic: str, *docs: dict[str, Any]) -> None:
    """Publish and wait until durable (so the page's query cannot miss them)."""
    for doc in docs:
        client.publish(topic, doc, persisted=True)
    client.flush()


def row(page: Page, key: str) -> Locator:
    return page.locator(f"#records-table tr.record[data-key='{key}']")


def cells(page: Page, key: str) -> list[str]:
    return [t.strip() for t in row(page, key).locator("td").all_inner_texts()]


def test_a_query_shows_the_records_and_follows_publishes_and_deletes(
    page: Page, sow_server: SpoolProcess, feeder: SyncClient
) -> None:
    put(feeder, "prices", *({"sym": s, "px": px, "venue": {"id": 7}}
                            for s, px in (("CC", 30), ("AA", 10), ("BB", 20))))  # fmt: skip
    page.goto(f"{sow_server.http_url}/sow")
    topic_row = page.locator("#topics-table tr.sow-topic[data-key='prices']")
    expect(topic_row.locator("[data-field='records']")).to_have_text("3")
    expect(topic_row.locator("[data-field='durability']")).to_have_text("persistent")

    page.fill("#topic", "prices")
    page.fill("#orderby", "/px DESC")
    page.click("#start")
    expect(page.locator("#s-state")).to_have_text("live")
    expect(page.locator("#s-snapshot")).to_have_text("complete")
    records = page.locator("#records-table tr.record")
    expect(records).to_have_count(3)
    # the key column first, then the fields in the order first seen, then the topic
    headers = page.locator("#records-table thead th").all_inner_texts()
    assert [h.strip() for h in headers] == ["key", "sym", "px", "venue", "topic"]
    assert [r.strip() for r in records.locator("td.sow-key").all_inner_texts()] == [
        "CC", "BB", "AA",
    ]  # fmt: skip
    assert cells(page, "BB") == ["BB", "BB", "20", '{"id":7}', "prices"]

    # a publish updates its row in place, live
    put(feeder, "prices", {"sym": "BB", "px": 25, "venue": {"id": 8}})
    expect(row(page, "BB").locator("td").nth(2)).to_have_text("25")
    assert cells(page, "BB") == ["BB", "BB", "25", '{"id":8}', "prices"]
    expect(page.locator("#s-updates")).to_have_text("1")
    # a new key is added at the end
    put(feeder, "prices", {"sym": "DD", "px": 5})
    expect(records).to_have_count(4)
    expect(records.last.locator("td.sow-key")).to_have_text("DD")

    # a record expands to its JSON
    row(page, "BB").click()
    detail = page.locator("#records-table tr.detail pre.json")
    expect(detail).to_have_text('{\n  "sym": "BB",\n  "px": 25,\n  "venue": {\n    "id": 8\n  }\n}')
    put(feeder, "prices", {"sym": "BB", "px": 26, "venue": {"id": 8}})
    expect(detail).to_contain_text('"px": 26')

    # a delete by another client removes the row
    assert feeder.sow_delete("prices", keys=["CC"]) == 1
    expect(row(page, "CC")).to_have_count(0)
    expect(records).to_have_count(3)
    expect(page.locator("#s-removed")).to_have_text("1")

    # a delete from the page (the expanded record's button, confirmed) removes it too
    page.locator("#records-table tr.detail button[data-action='delete']").click()
    page.locator("dialog.confirm button[data-action='confirm']").click()
    expect(row(page, "BB")).to_have_count(0)
    expect(page.locator("#page-alert")).to_contain_text("1 record deleted from prices")
    assert sorted(m.key or "" for m in feeder.sow("prices").records) == ["AA", "DD"]
    expect(topic_row.locator("[data-field='records']")).to_have_text("2")

    page.click("#stop")
    expect(page.locator("#s-state")).to_have_text("stopped")


def test_a_record_that_stops_matching_leaves_the_grid(
    page: Page, sow_server: SpoolProcess, feeder: SyncClient
) -> None:
    put(feeder, "scratch", *({"id": i, "qty": i * 10} for i in range(5)))
    page.goto(f"{sow_server.http_url}/sow?topic=scratch&filter=/qty%20%3E%3D%2020")
    page.click("#start")
    records = page.locator("#records-table tr.record")
    expect(records).to_have_count(3)
    put(feeder, "scratch", {"id": 3, "qty": 1})  # out of the filter: oof match
    expect(row(page, "3")).to_have_count(0)
    put(feeder, "scratch", {"id": 0, "qty": 99})  # into the filter: a new row
    expect(row(page, "0")).to_have_count(1)
    expect(records).to_have_count(3)


def test_the_grid_holds_at_most_10000_rows_and_counts_the_rest(
    page: Page, sow_server: SpoolProcess, feeder: SyncClient
) -> None:
    for start in range(0, 10_003, 1000):
        for i in range(start, min(start + 1000, 10_003)):
            feeder.publish("bulk", {"id": i}, persisted=True)
        feeder.flush()
    page.goto(f"{sow_server.http_url}/sow?topic=bulk")
    page.fill("#top-n", "")  # the whole topic
    page.click("#start")
    # 10,000 rows take the page a few seconds on a loaded machine: wait longer (a condition)
    slow = 30_000
    expect(page.locator("#s-snapshot")).to_have_text("complete", timeout=slow)
    expect(page.locator("#s-records")).to_have_text("10,000", timeout=slow)
    expect(page.locator("#s-hidden")).to_have_text("3")
    assert page.locator("#records-table tr.record").count() == 10_000
    shown = page.locator("#records-table tr.record").last.get_attribute("data-key")
    assert shown is not None
    feeder.publish("bulk", {"id": int(shown), "v": 1}, persisted=True)
    feeder.flush()
    expect(page.locator("#s-updates")).to_have_text("1", timeout=slow)
    expect(row(page, shown).locator("td").nth(2)).to_have_text("1")
    expect(page.locator("#s-hidden")).to_have_text("3")


def test_a_bad_filter_shows_the_broker_s_reason(page: Page, sow_server: SpoolProcess) -> None:
    page.goto(f"{sow_server.http_url}/sow")
    page.fill("#topic", "prices")
    page.fill("#filter", "/px >")
    page.click("#start")
    expect(page.locator("#page-alert .reason")).to_have_text("bad filter")
    expect(page.locator("#s-state")).to_have_text("failed")
    expect(page.locator("#start")).to_be_enabled()


def test_compact_from_the_topics_table(
    page: Page, sow_server: SpoolProcess, feeder: SyncClient
) -> None:
    put(feeder, "prices", *({"sym": "ZZ", "px": i} for i in range(50)))
    page.goto(f"{sow_server.http_url}/sow")
    topic_row = page.locator("#topics-table tr.sow-topic[data-key='prices']")
    # the transient topic has no file, so no Compact button
    scratch = page.locator("#topics-table tr.sow-topic[data-key='scratch']")
    expect(scratch.locator("button", has_text="Query")).to_be_visible()
    expect(scratch.locator("button[data-action='compact']")).to_have_count(0)
    topic_row.locator("button[data-action='compact']").click()
    page.locator("dialog.confirm button[data-action='confirm']").click()
    expect(page.locator("#page-alert")).to_contain_text("prices compacted")
    info = httpx.get(f"{sow_server.http_url}/api/sow/prices", timeout=10).json()
    assert info["last_compaction"] is not None
    expect(topic_row.locator("[data-field='last_compaction']")).to_have_text(
        info["last_compaction"]
    )


def test_the_page_keeps_the_csp_without_inline_code(page: Page, sow_server: SpoolProcess) -> None:
    response = page.goto(f"{sow_server.http_url}/sow")
    assert response is not None
    csp = response.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "style-src 'self'" in csp
    expect(page.locator("#topics-table tr.sow-topic")).not_to_have_count(0)
    inline = page.evaluate(
        """() => ({
            scripts: [...document.scripts].filter((s) => !s.src).length,
            styled: document.querySelectorAll('[style]').length,
            styleTags: document.querySelectorAll('style').length,
        })"""
    )
    assert inline == {"scripts": 0, "styled": 0, "styleTags": 0}


def test_an_instance_without_a_sow_says_so(page: Page, dashboard_server: SpoolProcess) -> None:
    page.goto(f"{dashboard_server.http_url}/sow")
    expect(page.locator("#topics-table tbody")).to_contain_text(
        "the SOW is not configured on this instance"
    )
