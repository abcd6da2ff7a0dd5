"""The dashboard in Chromium against a real broker: what an operator sees and does.

Each test drives the pages like a person would (click, type, read) and checks the effect
through the REST API or a Python client, not through the page's own code.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
from playwright.sync_api import Browser, Locator, Page, Route, expect
from websockets.sync.client import connect

from spool.server.client.sync import SyncClient
from spool.server.passwords import hash_password
from tests.browser.conftest import (
    ADMIN_PASSWORD,
    ADMIN_TOKEN,
    ADMIN_USER,
    VIEWPORT,
    artifact_path,
)
from tests.support.server import SpoolProcess, config_xml, sow_topic
from tests.support.wait import wait_until

pytestmark = pytest.mark.browser


def api(server: SpoolProcess, path: str, token: str | None = None) -> Any:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    response = httpx.get(f"{server.http_url}{path}", headers=headers, timeout=10)
    response.raise_for_status()
    return response.json()


def subscription_state(server: SpoolProcess, client: str, sub_id: str) -> str | None:
    for sub in api(server, "/api/subscriptions")["subscriptions"]:
        if sub["client"] == client and sub["sub_id"] == sub_id:
            return str(sub["state"])
    return None


@pytest.fixture
def client_factory(dashboard_server: SpoolProcess) -> Iterator[Any]:
    """Connected Python clients, closed at the end of the test."""
    clients: list[SyncClient] = []

    def make(name: str) -> SyncClient:
        client = SyncClient(dashboard_server.ws_url, name)
        client.connect()
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


def publish(client: SyncClient, topic: str, count: int, start: int = 0) -> None:
    """Publish ``count`` messages with persisted acks and wait until they are durable."""
    for i in range(start, start + count):
        client.publish(topic, {"i": i, "qty": i % 50}, persisted=True)
    client.flush()


def sub_row(page: Page, client: str, sub_id: str) -> Locator:
    """The subscriptions table's row of one subscription (keyed by JSON [client, sub_id])."""
    key = json.dumps([client, sub_id], separators=(",", ":"))
    return page.locator(f"tr[data-key='{key}']")


# -- login and sessions -----------------------------------------------------------------


def test_log_in_and_act_with_the_session(page: Page, auth_server: SpoolProcess) -> None:
    page.goto(f"{auth_server.http_url}/clients")
    expect(page).to_have_url(re.compile(r"/login\?next=/clients"))
    page.fill("#username", ADMIN_USER)
    page.fill("#password", "not the password")
    page.click("button[type=submit]")
    expect(page.locator("#login-error")).to_contain_text("Invalid user name or password")

    page.fill("#username", ADMIN_USER)
    page.fill("#password", ADMIN_PASSWORD)
    page.click("button[type=submit]")
    expect(page).to_have_url(f"{auth_server.http_url}/clients")
    expect(page.locator("#instance-name")).to_have_text("spool-auth")
    assert page.locator('meta[name="csrf-token"]').get_attribute("content")

    # a POST from the page carries the session's CSRF token: the disconnect works
    with SyncClient(auth_server.ws_url, "feed-1", user_id=ADMIN_USER, password=ADMIN_TOKEN) as c:
        row = page.locator('tr[data-key="feed-1"]')
        expect(row).to_be_visible()
        row.locator('button[data-action="disconnect"]').click()
        page.locator('dialog [data-action="confirm"]').click()
        expect(page.locator("#page-alert")).to_contain_text("feed-1 disconnected")
        wait_until(lambda: c._client.closed.is_set(), message="client closed by the broker")
    clients = api(auth_server, "/api/clients", token=ADMIN_TOKEN)["clients"]
    assert all(c["name"] != "feed-1" for c in clients)

    page.locator("form[action='/logout'] button").click()
    expect(page).to_have_url(re.compile(r"/login"))


VIEWER_USER = "watcher"
VIEWER_PASSWORD = "looks but does not touch"
TAP_ACTION = """<Action><Name>tap</Name>
  <On><Module>amps-action-on-admin</Module></On>
  <Do><Module>amps-action-do-publish-message</Module>
    <Options><Topic>taps</Topic><Data>{"tap":1}</Data></Options></Do>
</Action>"""


@pytest.fixture(scope="module")
def viewer_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SpoolProcess]:
    """A broker with an admin and a user who may read but is no admin, an on-demand
    action, a SOW topic and a queue."""
    workdir = tmp_path_factory.mktemp("viewer")
    users = (
        f"<User><Name>{ADMIN_USER}</Name><PasswordHash>{hash_password(ADMIN_PASSWORD)}"
        f"</PasswordHash><Token>{ADMIN_TOKEN}</Token><Admin>true</Admin>"
        "<Read>.*</Read><Write>.*</Write></User>"
        f"<User><Name>{VIEWER_USER}</Name><PasswordHash>{hash_password(VIEWER_PASSWORD)}"
        "</PasswordHash><Read>.*</Read></User>"
    )
    sow = sow_topic("prices", "/sym") + (
        "<Queue><Name>jobs</Name><MessageType>json</MessageType>"
        "<UnderlyingTopic>jobs-in</UnderlyingTopic></Queue>"
    )
    xml = config_xml(
        workdir / "data", name="spool-viewer", users=users, actions=TAP_ACTION, sow=sow
    )
    proc = SpoolProcess(workdir, xml).start()
    yield proc
    proc.stop()


def test_a_user_who_is_no_admin_sees_the_action_buttons_disabled(
    page: Page, viewer_server: SpoolProcess
) -> None:
    page.goto(f"{viewer_server.http_url}/login")
    page.fill("#username", VIEWER_USER)
    page.fill("#password", VIEWER_PASSWORD)
    page.click("button[type=submit]")
    expect(page.locator("#instance-name")).to_have_text("spool-viewer")
    admin_needed = re.compile("admin is needed")

    def refused(button: Locator) -> None:
        expect(button).to_be_disabled()
        expect(button).to_have_attribute("title", admin_needed)

    creds = {"user_id": ADMIN_USER, "password": ADMIN_TOKEN}
    with SyncClient(viewer_server.ws_url, "viewed-1", **creds) as client:
        client.subscribe("viewed", bookmark="0")
        page.goto(f"{viewer_server.http_url}/clients")
        refused(page.locator('tr[data-key="viewed-1"] button[data-action="disconnect"]'))
        page.goto(f"{viewer_server.http_url}/subscriptions")
        row = page.locator("#subs-table tbody tr", has_text="viewed-1")
        refused(row.locator('button[data-action="pause"]'))
        row.locator("input[type=checkbox]").check()
        refused(page.locator("#pause-selected"))
        refused(page.locator("#resume-selected"))

    page.goto(f"{viewer_server.http_url}/actions")
    refused(page.locator('#actions-table tr[data-key="tap"] button[data-action="run-now"]'))

    page.goto(f"{viewer_server.http_url}/sow")
    refused(page.locator('tr.sow-topic button[data-action="compact"]'))
    page.goto(f"{viewer_server.http_url}/queues")
    refused(page.locator("#queues-table button.proxied-transfer"))

    page.goto(f"{viewer_server.http_url}/transaction-log")
    buttons = page.locator("#journals-table tbody button")
    expect(buttons.first).to_be_visible()
    for i in range(buttons.count()):
        refused(buttons.nth(i))


# -- overview ---------------------------------------------------------------------------


def test_overview_shows_the_instance_and_live_figures(
    page: Page, dashboard_server: SpoolProcess, client_factory: Any
) -> None:
    page.goto(dashboard_server.http_url)
    expect(page.locator("#instance-name")).to_have_text("spool-dash")
    expect(page.locator("#instance-kv")).to_contain_text("spool-dash")
    expect(page.locator("#live-status")).to_have_attribute("data-state", "open")
    before = api(dashboard_server, "/api/clients")["clients"]
    feeder = client_factory("overview-feeder")
    expect(page.locator("#kpi-clients")).to_have_text(str(len(before) + 1))

    # keep publishing until a one-second point shows a rate above zero
    def rate_shows() -> bool:
        publish(feeder, "overview", 200)
        return re.match(r"^[1-9]", page.locator("#kpi-in").inner_text()) is not None

    wait_until(rate_shows, timeout=15, interval=0.2, message="msgs in rate > 0")
    expect(page.locator("#kpi-ack")).not_to_have_text("\u2013")  # the "no value" dash
    expect(page.locator("#chart-rates canvas")).to_have_count(1)
    expect(page.locator("#disk-meters .meter").first).to_be_visible()


# -- clients ----------------------------------------------------------------------------


def test_a_client_appears_and_its_counts_rise(
    page: Page, dashboard_server: SpoolProcess, client_factory: Any
) -> None:
    page.goto(f"{dashboard_server.http_url}/clients")
    feeder = client_factory("pricer-7")
    row = page.locator('tr[data-key="pricer-7"]')
    expect(row).to_be_visible()
    msgs_in = row.locator('td[data-field="msgs_in"]')
    expect(msgs_in).to_have_text("0")
    publish(feeder, "prices", 40)
    expect(msgs_in).to_have_text("40")
    publish(feeder, "prices", 35, start=40)
    expect(msgs_in).to_have_text("75")
    page.fill("#filter", "no-such-client")
    expect(row).to_have_count(0)
    page.fill("#filter", "pricer")
    expect(row).to_be_visible()


# -- subscriptions ----------------------------------------------------------------------


def test_pause_and_resume_a_bookmark_subscription(
    page: Page, dashboard_server: SpoolProcess, client_factory: Any
) -> None:
    feeder = client_factory("replay-feeder")
    publish(feeder, "ticks", 100)
    reader = client_factory("replay-reader")
    reader.subscribe("ticks", bookmark="0", sub_id="book-1")
    reader.subscribe("ticks", sub_id="plain-1")
    page.goto(f"{dashboard_server.http_url}/subscriptions")
    row = sub_row(page, "replay-reader", "book-1")
    plain = sub_row(page, "replay-reader", "plain-1")
    expect(row).to_be_visible()
    # pause and resume apply to bookmark subscriptions only
    expect(plain.locator('button[data-action="pause"]')).to_be_disabled()

    row.locator('button[data-action="pause"]').click()
    wait_until(
        lambda: subscription_state(dashboard_server, "replay-reader", "book-1") == "paused",
        message="paused over REST",
    )
    expect(row.locator(".badge")).to_have_text("paused")
    row.locator('button[data-action="resume"]').click()
    wait_until(
        lambda: (
            subscription_state(dashboard_server, "replay-reader", "book-1") in ("replaying", "live")
        ),
        message="resumed over REST",
    )
    expect(row.locator('button[data-action="pause"]')).to_be_enabled()
    # the plain subscription counts what the live fan-out delivered to it
    publish(feeder, "ticks", 25, start=100)
    expect(plain.locator('td[data-field="delivered"]')).to_have_text("25")
    # its rate, from one poll to the next (a dash before the second poll)
    expect(plain.locator('td[data-field="rate"]')).to_have_text(re.compile(r"^\d"))


def test_resume_several_paused_subscriptions_together(
    page: Page, dashboard_server: SpoolProcess, client_factory: Any
) -> None:
    feeder = client_factory("together-feeder")
    publish(feeder, "fills", 50)
    reader = client_factory("together-reader")
    for sub_id in ("a", "b"):
        reader.subscribe("fills", bookmark="0", sub_id=sub_id, options="pause")
    page.goto(f"{dashboard_server.http_url}/subscriptions")
    page.fill("#filter", "together-reader")
    rows = [sub_row(page, "together-reader", s) for s in ("a", "b")]
    for row in rows:
        expect(row.locator(".badge")).to_have_text("paused")
        row.locator("td.check input").check()
    expect(page.locator("#selection")).to_have_text("2 selected")
    page.click("#resume-selected")
    expect(page.locator("#page-alert")).to_contain_text("resumed together")
    wait_until(
        lambda: all(
            subscription_state(dashboard_server, "together-reader", s) in ("replaying", "live")
            for s in ("a", "b")
        ),
        message="both resumed over REST",
    )


def test_an_action_the_broker_refuses_shows_its_reason_inline(
    page: Page, dashboard_server: SpoolProcess, client_factory: Any
) -> None:
    reader = client_factory("gone-soon")
    reader.subscribe("ticks", bookmark="0", sub_id="doomed")
    page.goto(f"{dashboard_server.http_url}/subscriptions")
    row = sub_row(page, "gone-soon", "doomed")
    expect(row).to_be_visible()
    # freeze the page's view: its refreshes of the list stay unanswered from now on
    page.route("**/api/subscriptions", lambda route: None)
    reader.unsubscribe("doomed")
    row.locator('button[data-action="pause"]').click()
    alert = page.locator("#page-alert")
    expect(alert).to_be_visible()
    expect(alert.locator(".reason")).to_have_text("not found")
    expect(alert).to_contain_text("pause gone-soon/doomed")


# -- query ------------------------------------------------------------------------------


def test_the_query_page_streams_messages_from_the_browser(
    page: Page, dashboard_server: SpoolProcess, client_factory: Any
) -> None:
    feeder = client_factory("query-feeder")
    publish(feeder, "orders-q", 30)
    page.goto(f"{dashboard_server.http_url}/query")
    page.fill("#topic", "orders-q")
    page.fill("#filter", "/qty >= 10")
    page.select_option("#bookmark-kind", "0")
    page.click("#start")
    expect(page.locator("#q-state")).to_have_text("running")
    expect(page.locator("#q-count")).to_have_text("20")  # i = 10..29 replayed
    expect(page.locator("#q-completed")).to_have_text("reached live")
    publish(feeder, "orders-q", 15, start=30)  # qty 30..44: all match
    expect(page.locator("#q-count")).to_have_text("35")
    newest = page.locator("#messages-table tbody tr").first
    expect(newest.locator("td.body-cell")).to_have_text('{"i":44,"qty":44}')
    expect(newest.locator("td").nth(1)).to_have_text(re.compile(r"^\d+\|\d+\|$"))
    names = [c["name"] for c in api(dashboard_server, "/api/clients")["clients"]]
    assert any(n.startswith("dashboard-query-") for n in names)
    page.click("#stop")
    expect(page.locator("#q-state")).to_have_text("stopped")
    wait_until(
        lambda: (
            not any(
                c["name"].startswith("dashboard-query-")
                for c in api(dashboard_server, "/api/clients")["clients"]
            )
        ),
        message="the page's client went away",
    )


def test_the_query_page_shows_a_failure_ack_reason(
    page: Page, dashboard_server: SpoolProcess
) -> None:
    page.goto(f"{dashboard_server.http_url}/query")
    page.fill("#topic", "orders-q")
    page.fill("#filter", "/qty >")
    page.click("#start")
    alert = page.locator("#page-alert")
    expect(alert.locator(".reason")).to_have_text("bad filter")
    expect(page.locator("#q-state")).to_have_text("failed")
    expect(page.locator("#start")).to_be_enabled()


# -- history, transaction log, events ---------------------------------------------------


def test_the_history_page_charts_the_stats_database(
    page: Page, dashboard_server: SpoolProcess
) -> None:
    metric = "instance/connections"  # sampled every interval for as long as the broker runs

    def samples() -> int:
        try:
            return len(api(dashboard_server, f"/api/stats?metric={metric}")["points"])
        except httpx.HTTPStatusError:  # 404 until the sampler wrote the series once
            return 0

    wait_until(lambda: samples() >= 2, timeout=20, message="two samples")
    page.goto(f"{dashboard_server.http_url}/history?metric={metric}&last=900")
    expect(page.locator("#points-label")).to_have_text(re.compile(r"^[1-9][\d,]* points"))
    expect(page.locator("#chart-history canvas")).to_have_count(1)
    expect(page.locator("#chart-history .empty-note")).to_be_hidden()
    expect(page.locator("#summary")).to_contain_text(metric)
    page.click('#presets button[data-range="86400"]')
    expect(page).to_have_url(re.compile(r"last=86400"))
    page.fill("#metric", "no/such/metric")
    page.click("#show")
    expect(page.locator("#page-alert .reason")).to_have_text("not found")


def test_the_transaction_log_page_lists_journals_and_archives_after_asking(
    page: Page, dashboard_server: SpoolProcess, client_factory: Any
) -> None:
    feeder = client_factory("journal-feeder")
    padding = "x" * 400
    for i in range(3000):  # ~1.3 MB: the 1 MB journal rolls over at least once
        feeder.publish("bulk", {"i": i, "pad": padding})
    feeder.flush()

    def journals() -> list[dict[str, Any]]:
        return list(api(dashboard_server, "/api/transaction_log")["journals"])

    closed = [j for j in journals() if j["state"] == "closed"]
    assert closed, journals()
    oldest = min(closed, key=lambda j: j["id"])
    page.goto(f"{dashboard_server.http_url}/transaction-log")
    expect(page.locator("#totals")).to_contain_text("durable seq")
    rows = page.locator("#journals-table tbody tr")
    expect(rows).to_have_count(len(journals()))
    active = page.locator("#journals-table tbody tr", has=page.locator(".badge.active"))
    expect(active.locator('button[data-action="remove"]')).to_be_disabled()

    row = page.locator(f'#journals-table tbody tr[data-id="{oldest["id"]}"]')
    row.locator('button[data-action="remove"]').click()
    dialog = page.locator("dialog")
    expect(dialog).to_contain_text(f"Remove journal {oldest['id']}")
    dialog.locator('[data-action="cancel"]').click()
    expect(dialog).to_have_count(0)
    assert any(j["id"] == oldest["id"] for j in journals())

    row.locator('button[data-action="archive"]').click()
    # the oldest journal takes no other with it, preallocated files included; archived
    # journals stay readable
    expect(dialog).to_contain_text(f"Archive journal {oldest['id']}?")
    expect(dialog).not_to_contain_text("older")
    expect(dialog).to_contain_text("replays can still read them")
    page.locator('dialog [data-action="confirm"]').click()
    expect(page.locator("#page-alert")).to_contain_text(f"journal {oldest['id']}")
    wait_until(
        lambda: next(j for j in journals() if j["id"] == oldest["id"])["state"] == "archived",
        message="archived over REST",
    )
    expect(row.locator(".badge").first).to_have_text("archived")


def publish_delayed(server: SpoolProcess, *messages: tuple[str, str]) -> None:
    """Publish ``(topic, options)`` each over a websocket of its own (the Python client
    sends no publish options) and check each processed ack."""
    with connect(server.ws_url) as ws:
        ws.send(orjson.dumps({"c": "logon", "cid": "l", "client_name": "delayed-feeder",
                              "a": "processed"}))  # fmt: skip
        ws.recv(timeout=10)
        for n, (topic, options) in enumerate(messages, 1):
            body = orjson.dumps({"n": n})
            header = {"c": "publish", "t": topic, "s": n, "cid": f"p{n}", "a": "processed",
                      "o": options, "l": len(body)}  # fmt: skip
            ws.send(orjson.dumps(header) + body)
            ack = orjson.loads(ws.recv(timeout=10))
            assert ack["cid"] == f"p{n}" and ack["status"] == "success", ack


def test_the_transaction_log_page_shows_the_delayed_messages(
    page: Page, dashboard_server: SpoolProcess
) -> None:
    publish_delayed(
        dashboard_server,
        ("reminders", "deliver_after=1h"),
        ("orders", "deliver_after=3h"),
        ("reminders", "deliver_after=2h"),
    )
    page.goto(f"{dashboard_server.http_url}/transaction-log")
    kv = page.locator("#delayed-kv")
    expect(kv).to_contain_text("pending3")
    expect(kv).to_contain_text("retryingno")
    topics = page.locator("#delayed-topics tbody tr")
    expect(topics).to_have_count(2)
    expect(topics.nth(0)).to_have_text("orders1")  # in name order
    expect(topics.nth(1)).to_have_text("reminders2")
    upcoming = page.locator("#delayed-messages tbody tr")
    expect(upcoming).to_have_count(3)
    expect(upcoming.nth(0).locator("td").nth(1)).to_have_text("reminders")
    expect(upcoming.nth(2).locator("td").nth(1)).to_have_text("orders")
    expect(page.locator("#delayed-next-updated")).to_have_text("every pending message")


def test_the_delayed_panels_stay_hidden_without_a_transaction_log(
    page: Page, dashboard_server: SpoolProcess
) -> None:
    # an instance without a log answers 404 (tests/unit/web/test_delayed_api.py)
    def not_found(route: Route) -> None:
        route.fulfill(status=404, content_type="application/json", body=json.dumps(
            {"error": "not found",
             "detail": "delayed delivery needs a transaction log on this instance"}))  # fmt: skip

    page.route("**/api/delayed*", not_found)
    page.goto(f"{dashboard_server.http_url}/transaction-log")
    expect(page.locator("#totals")).to_contain_text("durable seq")
    expect(page.locator("#delayed")).to_be_hidden()
    expect(page.locator("#delayed-next")).to_be_hidden()
    expect(page.locator("#page-alert")).to_be_hidden()


def test_the_events_page_follows_the_event_log(
    page: Page, dashboard_server: SpoolProcess, client_factory: Any
) -> None:
    page.goto(f"{dashboard_server.http_url}/events")
    expect(page.locator("#live-note")).to_have_text("live")
    client_factory("events-newcomer")
    newest = page.locator("#events-table tbody tr", has_text="events-newcomer").first
    expect(newest).to_contain_text("logon")
    page.select_option("#level", "error")
    expect(page.locator("#events-table tbody tr", has_text="events-newcomer")).to_have_count(0)


def test_the_events_page_leaves_out_empty_fields_and_wraps_between_words(
    page: Page, dashboard_server: SpoolProcess, client_factory: Any
) -> None:
    client_factory("events-wrapper-desk-7")  # logs on with no user: the instance has none
    served = httpx.get(f"{dashboard_server.http_url}/events", timeout=10).text
    assert "events-wrapper-desk-7" in served
    assert "=None" not in served

    page.set_viewport_size({"width": 768, "height": 1024})
    page.goto(f"{dashboard_server.http_url}/events")
    expect(page.locator("#live-note")).to_have_text("live")
    row = page.locator("#events-table tbody tr", has_text="events-wrapper-desk-7").first
    details = row.locator("td").last
    expect(details).to_contain_text("client=events-wrapper-desk-7")
    expect(details).not_to_contain_text("=null")
    # each field=value on one line: the cell wraps at spaces, never inside a word
    lines, split = details.evaluate(
        """(td) => {
          const text = td.firstChild;
          const range = document.createRange();
          range.selectNodeContents(td);
          const lines = new Set([...range.getClientRects()].map((r) => Math.round(r.top))).size;
          const split = [];
          let at = 0;
          for (const word of text.data.split(" ")) {
            range.setStart(text, at);
            range.setEnd(text, at + word.length);
            if (new Set([...range.getClientRects()].map((r) => Math.round(r.top))).size > 1) {
              split.push(word);
            }
            at += word.length + 1;
          }
          return [lines, split];
        }"""
    )
    assert lines > 1, "the details fit on one line: nothing to check at this width"
    assert split == []


# -- theme ------------------------------------------------------------------------------


def test_the_theme_toggle_switches_and_is_remembered(
    page: Page, dashboard_server: SpoolProcess
) -> None:
    html = page.locator("html")
    page.goto(dashboard_server.http_url)
    expect(html).to_have_attribute("data-theme", "dark")
    expect(page.locator("#chart-rates canvas")).to_have_count(1)
    page.screenshot(path=artifact_path("theme-dark"))
    dark_bg = page.evaluate("() => getComputedStyle(document.body).backgroundColor")
    page.click("#theme-toggle")
    expect(html).to_have_attribute("data-theme", "light")
    assert page.evaluate("() => getComputedStyle(document.body).backgroundColor") != dark_bg
    expect(page.locator("#chart-rates canvas")).to_have_count(1)  # rebuilt, not lost
    page.reload()
    expect(html).to_have_attribute("data-theme", "light")
    assert page.evaluate("() => localStorage.getItem('spool.theme')") == "light"
    page.screenshot(path=artifact_path("theme-light"))
    page.click("#theme-toggle")
    expect(html).to_have_attribute("data-theme", "dark")


@pytest.mark.parametrize(
    ("path", "field"),
    [("/query", "#ws-password"), ("/sow", "#ws-password"), ("/fabric", "input[name=token]")],
)
def test_a_secret_never_goes_into_a_url_before_the_page_script_runs(
    browser: Browser, auth_server: SpoolProcess, path: str, field: str
) -> None:
    """A form the page's script handles is not a browser form: pressed before the script
    ran (a slow network, scripts blocked), the browser would submit it itself, as a GET
    with the password or token in the URL (in the history, the access logs, the Referer).
    With scripts off, Enter in the field sends nothing."""
    ctx = browser.new_context(viewport=VIEWPORT, java_script_enabled=False)  # type: ignore[arg-type]
    try:
        page = ctx.new_page()
        page.goto(f"{auth_server.http_url}/login")
        page.fill("#username", ADMIN_USER)
        page.fill("#password", ADMIN_PASSWORD)
        page.click("button[type=submit]")
        expect(page.locator("#instance-name")).to_have_text("spool-auth")
        page.goto(f"{auth_server.http_url}{path}")
        sent: list[str] = []
        page.on("request", lambda request: sent.append(request.url))
        form = page.locator("form", has=page.locator(field))
        for required in form.locator("input[required]").all():
            required.fill("orders")  # the browser submits nothing while one is empty
        page.fill(field, "s3cret-value")
        page.press(field, "Enter")  # waits for a navigation it starts to commit
        assert not [url for url in sent if "s3cret" in url], sent
        assert "s3cret" not in page.url
    finally:
        ctx.close()
