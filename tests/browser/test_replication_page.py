"""The dashboard's replication page against two real instances (A -> B, sync): links in
and out, configured and effective sync type, downgrade / upgrade / reconnect buttons, a
refused link with its reason, the history charts."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.support.replication import Cluster, destination
from tests.support.wait import wait_until

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root: Path = tmp_path_factory.mktemp("replication-page")
    cluster = Cluster(root, ["a", "b", "c"])
    cluster.add(
        "a",
        destinations=[
            destination("b", [cluster.address("b")], exclude="replicate"),
            destination("c", [cluster.address("c")], group="elsewhere", sync=False,
                        exclude="replicate"),
        ],
    )  # fmt: skip
    cluster.add("b")
    cluster.add("c")
    cluster.start()
    wait_until(lambda: cluster.destination("a", "b")["connected"], 30)
    yield cluster
    cluster.stop()


def test_links_in_and_out_and_the_sync_buttons(page: Page, pair: Cluster) -> None:
    a = pair.procs["a"]
    page.goto(f"{a.http_url}/replication")
    row_b = page.locator('#destinations-table tbody tr[data-key="b"]')
    expect(row_b).to_contain_text("b @ b")
    expect(row_b.locator('[data-field="sync"] .badge')).to_have_text("sync")
    expect(row_b.locator('[data-field="link"] .badge')).to_have_text("streaming")
    expect(row_b.locator('button[data-action="upgrade"]')).to_be_disabled()
    # the group mismatch refuses c's link: its reason shows in the row
    row_c = page.locator('#destinations-table tbody tr[data-key="c"]')
    expect(row_c).to_contain_text("group mismatch", timeout=15_000)
    expect(row_c.locator('button[data-action="downgrade"]')).to_be_disabled()  # async

    row_b.locator('button[data-action="downgrade"]').click()
    page.locator('dialog [data-action="confirm"]').click()
    expect(page.locator("#page-alert")).to_contain_text("b: downgrade done (now async)")
    expect(row_b.locator('[data-field="sync"] .badge')).to_have_text("async")
    expect(row_b).to_contain_text("configured sync")
    assert pair.destination("a", "b")["effective_sync_type"] == "async"

    row_b.locator('button[data-action="upgrade"]').click()
    page.locator('dialog [data-action="confirm"]').click()
    expect(row_b.locator('[data-field="sync"] .badge')).to_have_text("sync", timeout=15_000)
    expect(page.locator("#events-table")).to_contain_text("downgraded")
    expect(page.locator("#events-table")).to_contain_text("upgraded")

    row_b.locator('button[data-action="reconnect"]').click()
    expect(page.locator("#page-alert")).to_contain_text("b: reconnect done")
    wait_until(lambda: pair.destination("a", "b")["disconnects"] >= 1, 20)
    expect(row_b.locator('[data-field="link"] .badge')).to_have_text("streaming", timeout=15_000)


def test_the_destination_sees_the_incoming_link(page: Page, pair: Cluster) -> None:
    b = pair.procs["b"]
    page.goto(f"{b.http_url}/replication")
    expect(page.locator("#summary")).to_contain_text("0 destinations")
    expect(page.locator("#incoming-table tbody")).to_contain_text("a @ a")
    expect(page.locator("#incoming-table tbody .badge")).to_have_text("streaming")
    # a link with nothing to send says so, not "0"
    expect(page.locator("#incoming-table tbody td").nth(5)).to_have_text("caught up")
    # the link's events: no user configured, so none named
    connected = page.locator("#events-table tbody tr", has_text="connected").first
    expect(connected).to_contain_text("from ")
    expect(connected).not_to_contain_text("as user")


@pytest.mark.parametrize(
    ("messages", "seconds", "shown"),
    [
        (0, 0, "caught up"),
        (0, None, "caught up"),
        (1, 0, "1 message"),
        (1500, None, "1,500 messages"),
        (12, 2.5, "12 messages · 2.5 s"),
        (0, 0.25, "0 messages · 250 ms"),
        (None, None, "\u2013"),  # the "no value" dash
    ],
)
def test_how_far_behind_a_link_is_reads_as_words(
    static_origin: Page, messages: int | None, seconds: float | None, shown: str
) -> None:
    got = static_origin.evaluate(
        "async ([m, s]) => (await import('/static/js/ui.js')).fmtBehind(m, s)", [messages, seconds]
    )
    assert got == shown


def test_the_history_charts_draw_the_stats_of_the_chosen_destination(
    page: Page, pair: Cluster
) -> None:
    a = pair.procs["a"]
    # the stats sampler (1 s here) has written the link's series
    wait_until(
        lambda: (
            "replication/out/b/messages_behind" in pair.api("a", "/api/stats/metrics")["metrics"]
        ),
        20,
    )
    page.goto(f"{a.http_url}/replication")
    expect(page.locator("#chart-link")).to_have_text("b")
    expect(page.locator("#chart-messages canvas")).to_have_count(1)
    expect(page.locator("#chart-messages .empty-note")).to_be_hidden(timeout=15_000)
