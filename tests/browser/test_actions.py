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


#: an action run by each large trade (it stores a copy on another topic), and one whose
#: messages fire it again: a loop the broker cuts, and one posting to a closed port
PER_MESSAGE = """
<Webhooks><Allow>http://127.0.0.1:1/hooks/</Allow></Webhooks>
<Action><Name>notify</Name>
  <On><Module>amps-action-on-publish-message</Module><Options>
    <Topic>notices</Topic></Options></On>
  <Do><Module>spool-action-do-webhook</Module><Options>
    <Url>http://127.0.0.1:1/hooks/notices</Url><Body>{{AMPS_DATA}}</Body>
    <Retries>0</Retries></Options></Do>
</Action>
<Action><Name>loop</Name>
  <On><Module>amps-action-on-publish-message</Module><Options>
    <Topic>^loop/</Topic></Options></On>
  <Do><Module>amps-action-do-publish-message</Module><Options>
    <Topic>loop/{{AMPS_TOPIC}}</Topic><Data>{"n":1}</Data></Options></Do>
</Action>
<Action><Name>big-trades</Name>
  <On><Module>amps-action-on-publish-message</Module><Options>
    <Topic>trades</Topic><Filter>/qty &gt;= 10</Filter></Options></On>
  <Do><Module>amps-action-do-publish-message</Module>
      <Options><Topic>big-trades</Topic><Data>{{AMPS_DATA}}</Data></Options></Do>
</Action>"""
MATCHING, OTHERS = 5, 3


@pytest.fixture(scope="module")
def per_message_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SpoolProcess]:
    workdir = tmp_path_factory.mktemp("dash-per-message")
    xml = config_xml(
        workdir / "data", name="spool-per-message", journal_size="1MB", actions=PER_MESSAGE,
        tuning="<ActionHistoryInterval>10s</ActionHistoryInterval>",
    )  # fmt: skip
    proc = SpoolProcess(workdir, xml).start()
    yield proc
    proc.stop()


def test_an_action_run_by_messages_shows_its_tally_and_windows_and_no_run_button(
    page: Page, per_message_server: SpoolProcess
) -> None:
    page.goto(f"{per_message_server.http_url}/actions")
    row = page.locator('#actions-table tr[data-key="big-trades"]')
    triggers = row.locator('td[data-field="triggers"]')
    expect(triggers).to_contain_text("each message published to trades where /qty >= 10")
    expect(triggers.locator('[data-count="offered"] b')).to_have_text("0")
    expect(row.locator('td[data-field="next_run"]')).to_have_text("each message")
    expect(row.locator('button[data-action="run-now"]')).to_be_hidden()
    expect(row.locator("td").last).to_have_attribute(
        "title", "Runs once per matching message, not on demand"
    )
    expect(row.locator('td[data-field="last"]')).to_have_text("never")

    with SyncClient(per_message_server.ws_url, "trader") as trader:
        for qty in [10 + i for i in range(MATCHING)] + [1] * OTHERS:
            trader.publish("trades", {"qty": qty}, persisted=True)
        trader.flush()

    # the page refreshes itself: the counts arrive without a reload
    count = lambda key: triggers.locator(f'[data-count="{key}"]')  # noqa: E731
    expect(count("offered").locator("b")).to_have_text(str(MATCHING + OTHERS))
    expect(count("matched").locator("b")).to_have_text(str(MATCHING))
    expect(count("runs").locator("b")).to_have_text(str(MATCHING))
    expect(count("derived").locator("b")).to_have_text(str(MATCHING))
    expect(row.locator('td[data-field="runs"]')).to_have_text(str(MATCHING))
    for lost in ("dropped", "failed", "loop_cut"):
        expect(count(lost)).to_have_text(f"0 {lost.replace('_', ' ')}")
        expect(count(lost)).not_to_have_class("count warn")
    expect(triggers.locator('[data-field="webhooks"]')).to_have_count(0)

    # the first history window closes after ActionHistoryInterval (10 s)
    counted = f"{MATCHING + OTHERS} events: {MATCHING} runs, {MATCHING} succeeded"
    history = page.locator("#history-table tbody tr", has_text=counted)
    expect(history).to_have_count(1, timeout=30_000)
    expect(history.locator('td[data-field="outcome"]')).to_have_text("succeeded")
    expect(history.locator('td[data-field="trigger"]')).to_have_attribute(
        "title", "amps-action-on-publish-message"
    )
    expect(row.locator('td[data-field="outcome"]')).to_have_text(f"succeeded {counted}")
    expect(row.locator('td[data-field="last"]')).not_to_have_text("never")
    (action,) = [a for a in api(per_message_server, "/api/actions")["actions"]
                 if a["name"] == "big-trades"]  # fmt: skip
    assert action["events"]["offered"] == MATCHING + OTHERS


def test_messages_an_action_did_not_run_for_are_emphasised(
    page: Page, per_message_server: SpoolProcess
) -> None:
    page.goto(f"{per_message_server.http_url}/actions")
    triggers = page.locator('#actions-table tr[data-key="loop"] td[data-field="triggers"]')
    expect(triggers.locator('[data-count="loop_cut"]')).to_have_text("0 loop cut")
    with SyncClient(per_message_server.ws_url, "looper") as looper:
        looper.publish("loop/a", {"n": 0}, persisted=True)
        looper.flush()
    # four derived hops run, the fifth message is kept out of the lane
    cut = triggers.locator('[data-count="loop_cut"]')
    expect(cut).to_have_text("1 loop cut")
    expect(cut).to_have_class("count warn")
    expect(triggers.locator('[data-count="runs"]')).to_have_text("4 runs")
    expect(triggers.locator('[data-count="derived"]')).to_have_text("4 derived")
    expect(triggers.locator('[data-count="dropped"]')).to_have_class("count")


def test_an_action_with_a_webhook_step_shows_its_posts(
    page: Page, per_message_server: SpoolProcess
) -> None:
    page.goto(f"{per_message_server.http_url}/actions")
    triggers = page.locator('#actions-table tr[data-key="notify"] td[data-field="triggers"]')
    posts = triggers.locator('[data-field="webhooks"]')
    expect(posts.locator(".muted")).to_have_text("webhooks")
    expect(posts.locator('[data-count="webhooks_failed"]')).to_have_text("0 failed")
    with SyncClient(per_message_server.ws_url, "notifier") as notifier:
        notifier.publish("notices", {"n": 1}, persisted=True)
        notifier.flush()
    # nothing listens on port 1: the post fails (no retry), and says so
    failed = posts.locator('[data-count="webhooks_failed"]')
    expect(failed).to_have_text("1 failed")
    expect(failed).to_have_class("count warn")
    expect(posts.locator('[data-count="webhooks_sent"]')).to_have_text("0 sent")
    expect(triggers.locator('[data-count="runs"]')).to_have_text("1 runs")
