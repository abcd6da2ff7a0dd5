"""The actions page and the transaction-log plan in Chromium, against a real broker with
configured actions: what an operator sees, and "Run now" with its parameter form."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
from playwright.sync_api import Page, expect

from spool.server.client.sync import SyncClient
from tests.support.server import SpoolProcess, config_xml
from tests.support.wait import wait_until

pytestmark = pytest.mark.browser

#: what the dashboard shows for an absent value (an en dash)
NO_VALUE = "\u2013"

ACTIONS = """
<Action><Name>greet</Name>
  <On><Module>amps-action-on-admin</Module><Options>
    <Parameter><Name>who</Name><Pattern>[a-z]+</Pattern><Description>lower-case name</Description></Parameter>
    <Parameter><Name>mood</Name><Default>glad</Default></Parameter>
  </Options></On>
  <Do><Module>amps-action-do-publish-message</Module>
      <Options><Topic>greetings</Topic><Data>{"hello":"{{who}}","mood":"{{mood}}"}</Data></Options></Do>
</Action>
<Action><Name>nightly</Name>
  <On><Module>amps-action-on-schedule</Module><Options><Every>Daily 03:00</Every></Options></On>
  <Do><Module>amps-action-do-archive-journal</Module><Options><Age>1d</Age></Options></Do>
  <Do><Module>amps-action-do-remove-journal</Module><Options><Age>7d</Age></Options></Do>
</Action>"""


@pytest.fixture(scope="module")
def actions_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SpoolProcess]:
    workdir = tmp_path_factory.mktemp("dash-actions")
    xml = config_xml(workdir / "data", name="spool-acts", journal_size="1MB", actions=ACTIONS)
    proc = SpoolProcess(workdir, xml).start()
    yield proc
    proc.stop()


def api(server: SpoolProcess, path: str) -> Any:
    response = httpx.get(f"{server.http_url}{path}", timeout=10)
    response.raise_for_status()
    return response.json()


def test_run_an_on_admin_action_from_the_dashboard_with_its_parameters(
    page: Page, actions_server: SpoolProcess
) -> None:
    with SyncClient(actions_server.ws_url, "greeting-reader") as reader:
        sub = reader.subscribe("greetings")
        page.goto(f"{actions_server.http_url}/actions")
        greet = page.locator('#actions-table tr[data-key="greet"]')
        nightly = page.locator('#actions-table tr[data-key="nightly"]')
        greet_triggers = greet.locator('td[data-field="triggers"]')
        expect(greet_triggers).to_have_text("on demand: Run now, or POST /api/actions/greet")
        expect(nightly.locator('td[data-field="triggers"]')).to_have_text("daily at 03:00 UTC")
        expect(nightly.locator('td[data-field="next_run"]')).not_to_have_text(NO_VALUE)
        expect(nightly.locator('td[data-field="steps"]')).to_contain_text(
            "2. remove journals older than 7d"
        )
        expect(nightly.locator('button[data-action="run-now"]')).to_be_hidden()
        expect(greet.locator('td[data-field="last"]')).to_have_text("never")

        # a value the pattern refuses: the broker's reason shows inline, nothing ran
        greet.locator('button[data-action="run-now"]').click()
        dialog = page.locator('dialog[data-dialog="run"]')
        expect(dialog).to_contain_text("Run greet now?")
        expect(dialog).to_contain_text("lower-case name · must match [a-z]+ · required")
        expect(dialog.locator('input[data-parameter="mood"]')).to_have_value("glad")
        dialog.locator('input[data-parameter="who"]').fill("Bob")
        dialog.locator('[data-action="run"]').click()
        expect(page.locator("#page-alert")).to_contain_text("parameter 'who' must match '[a-z]+'")
        assert api(actions_server, "/api/action_runs")["runs"] == []

        greet.locator('button[data-action="run-now"]').click()
        dialog.locator('input[data-parameter="who"]').fill("bob")
        dialog.locator('input[data-parameter="mood"]').fill('very "glad"')
        dialog.locator('[data-action="run"]').click()
        expect(page.locator("#page-alert")).to_contain_text("greet: succeeded")
        message = sub.get(10)
        assert orjson.loads(message.data) == {"hello": "bob", "mood": 'very "glad"'}

    expect(greet.locator('td[data-field="outcome"] .badge')).to_have_text("succeeded")
    run = api(actions_server, "/api/action_runs")["runs"][0]
    assert (run["action"], run["user"], run["parameters"]) == (
        "greet", "local", {"who": "bob", "mood": 'very "glad"'},
    )  # fmt: skip
    row = page.locator(f'#history-table tr[data-key="{run["id"]}"]')
    expect(row.locator('td[data-field="outcome"]')).to_have_text("succeeded")
    expect(row.locator('td[data-field="trigger"]')).to_have_text("on demand by local")
    row.click()
    detail = page.locator('dialog[data-dialog="run-detail"]')
    expect(detail).to_contain_text(f"greet · run {run['id']} · succeeded")
    expect(detail).to_contain_text("amps-action-do-publish-message")
    expect(detail).to_contain_text("published to greetings (bookmark ")
    expect(detail).to_contain_text("who=bob")
    detail.locator('[data-action="close"]').click()
    expect(detail).to_have_count(0)

    # the history filter shows one action's runs
    page.select_option("#history-action", "nightly")
    expect(page.locator("#history-table tbody tr.empty")).to_have_count(1)


def test_the_transaction_log_page_shows_which_policy_touches_each_journal_next(
    page: Page, actions_server: SpoolProcess
) -> None:
    with SyncClient(actions_server.ws_url, "filler") as feed:
        pad = "p" * 200_000
        wait_until(
            lambda: (
                [feed.publish("orders", {"pad": pad}) for _ in range(5)] and feed.flush() is None
                and len([j for j in api(actions_server, "/api/transaction_log")["journals"]
                         if j["state"] == "closed"]) >= 2
            ),
            timeout=60, message="two closed journals",
        )  # fmt: skip
    journals = api(actions_server, "/api/transaction_log")["journals"]
    closed = next(j for j in journals if j["state"] == "closed")
    plan = closed["next_actions"][0]
    assert (plan["action"], plan["operation"]) == ("nightly", "archive")
    page.goto(f"{actions_server.http_url}/transaction-log")
    cell = page.locator(f'#journals-table tr[data-id="{closed["id"]}"] td[data-field="next"]')
    expect(cell).to_contain_text("archive by nightly")
    expect(cell).to_contain_text("at ")
    assert "remove by nightly" in (cell.get_attribute("title") or "")
    active = page.locator("#journals-table tbody tr", has=page.locator(".badge.active"))
    expect(active.locator('td[data-field="next"]')).to_contain_text(NO_VALUE)
