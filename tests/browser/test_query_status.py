"""The Query page's status line says what became of the page's subscription: a refused
subscribe fails with its reason and keeps nothing of the query before it; a replay of a
past range says it is complete, and the page's subscription ends with it."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Page, expect

from tests.browser.test_dashboard import api, client_factory, publish
from tests.support.server import SpoolProcess
from tests.support.wait import wait_until

pytestmark = pytest.mark.browser

__all__ = ["client_factory"]  # a fixture of test_dashboard.py, used here too

#: what the status line shows for "none" (an en dash)
NO_VALUE = "\u2013"


def page_clients(server: SpoolProcess) -> list[str]:
    """The Query page's websocket clients connected now."""
    names = (c["name"] for c in api(server, "/api/clients")["clients"])
    return [n for n in names if n.startswith("dashboard-query-")]


def test_a_refused_subscribe_says_failed_with_its_reason_and_nothing_stale(
    page: Page, dashboard_server: SpoolProcess, client_factory: Any
) -> None:
    publish(client_factory("status-feeder"), "status-refused", 3)
    page.goto(f"{dashboard_server.http_url}/query")
    page.fill("#topic", "status-refused")
    page.select_option("#bookmark-kind", "0")
    page.click("#start")
    expect(page.locator("#q-completed")).to_have_text("reached live")
    expect(page.locator("#q-subid")).not_to_have_text(NO_VALUE)
    page.click("#stop")
    expect(page.locator("#q-state")).to_have_text("stopped")

    page.fill("#filter", "/qty >")
    page.click("#start")
    expect(page.locator("#q-state")).to_have_text("failed")
    expect(page.locator("#q-detail")).to_have_text("bad filter")
    expect(page.locator("#q-completed")).to_have_text(NO_VALUE)
    expect(page.locator("#q-subid")).to_have_text(NO_VALUE)
    expect(page.locator("#q-bookmark")).to_have_text(NO_VALUE)
    expect(page.locator("#q-count")).to_have_text("0")
    expect(page.locator("#start")).to_be_enabled()

    # the next query starts with a clean status line
    page.fill("#filter", "")
    page.click("#start")
    expect(page.locator("#q-state")).to_have_text("running")
    expect(page.locator("#q-detail")).to_have_text("")
    page.click("#stop")


def test_a_replay_of_a_past_range_says_complete_and_stops(
    page: Page, dashboard_server: SpoolProcess, client_factory: Any
) -> None:
    publish(client_factory("range-feeder"), "status-range", 5)
    page.goto(f"{dashboard_server.http_url}/query")
    page.fill("#topic", "status-range")
    page.select_option("#bookmark-kind", "custom")
    page.fill("#bookmark", "[0:0|1|]")  # everything recorded so far, then complete
    page.click("#start")
    expect(page.locator("#q-count")).to_have_text("5")
    expect(page.locator("#q-completed")).to_have_text("complete")
    expect(page.locator("#q-state")).to_have_text("stopped")
    expect(page.locator("#q-detail")).to_have_text("replay complete")
    expect(page.locator("#messages-table tbody tr")).to_have_count(5)
    expect(page.locator("#start")).to_be_enabled()
    expect(page.locator("#stop")).to_be_disabled()
    wait_until(lambda: not page_clients(dashboard_server), message="the page's client left")


def test_an_open_replay_still_runs_on_once_it_reached_live(
    page: Page, dashboard_server: SpoolProcess, client_factory: Any
) -> None:
    publish(client_factory("open-feeder"), "status-open", 2)
    page.goto(f"{dashboard_server.http_url}/query")
    page.fill("#topic", "status-open")
    page.select_option("#bookmark-kind", "0")
    page.click("#start")
    expect(page.locator("#q-completed")).to_have_text("reached live")
    expect(page.locator("#q-state")).to_have_text("running")
    expect(page.locator("#q-detail")).to_have_text("")
    page.click("#stop")
    expect(page.locator("#q-state")).to_have_text("stopped")
