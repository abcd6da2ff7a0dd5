"""The fabric page against three real instances A -> B -> C: the
page on A merges the three instances' /api/fabric (B and C are other origins that allow
A's), draws three nodes and their links, a downgrade clicked on A -> B reaches A's REST
state and the page, and killing C turns its node and links "down" within two refresh
intervals; the page manages B's client and subscription. A peer that does not allow the
page's origin is "unknown" (with the origin to add), not down, while its link is up.
Also writes docs/fabric.png when SPOOL_FABRIC_SCREENSHOT is set (the
`make fabric-screenshot` target)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import BrowserContext, Page, expect

from spool.server.client.sync import SyncClient
from spool.server.passwords import hash_password
from tests.browser.conftest import ADMIN_PASSWORD, ADMIN_TOKEN, ADMIN_USER, PageErrors
from tests.support.replication import Cluster, destination
from tests.support.wait import wait_until

pytestmark = pytest.mark.browser

#: the page's refresh interval (templates/fabric.html data-refresh)
REFRESH_S = 2.0
ROOT = Path(__file__).resolve().parents[2]


def _origin(cluster: Cluster, name: str) -> str:
    host, port = cluster.address(name)
    return f"http://{host}:{port}"


def _allow(*origins: str) -> str:
    return f"<AllowedOrigins>{' '.join(origins)}</AllowedOrigins>"


@pytest.fixture
def chain(tmp_path: Path) -> Iterator[Cluster]:
    cluster = Cluster(tmp_path, ["a", "b", "c"])
    a, b, c = (_origin(cluster, n) for n in "abc")
    cluster.add("a", group="east", admin_extra=_allow(b, c),
                destinations=[destination("b", [cluster.address("b")], group="east",
                                          exclude="replicate")])  # fmt: skip
    cluster.add("b", group="east", admin_extra=_allow(a),
                destinations=[destination("c", [cluster.address("c")], group="west",
                                          passthrough=(".*",), exclude="replicate")])  # fmt: skip
    cluster.add("c", group="west", admin_extra=_allow(a))
    cluster.start()
    wait_until(lambda: cluster.destination("a", "b")["connected"], 30)
    wait_until(lambda: cluster.destination("b", "c")["connected"], 30)
    yield cluster
    cluster.stop()


def test_three_instances_a_downgrade_and_a_dead_instance(page: Page, chain: Cluster) -> None:
    a = chain.procs["a"]
    page.goto(f"{a.http_url}/fabric")
    instances = page.locator("#fabric-instances tbody")
    for name, group in (("a", "east"), ("b", "east"), ("c", "west")):
        row = instances.locator(f'tr[data-key="{name}"]')
        expect(row.locator('[data-field="state"] .badge')).to_have_text("up", timeout=15_000)
        expect(row.locator('[data-field="group"]')).to_have_text(group)
    links = page.locator("#fabric-links tbody")
    ab = links.locator('tr[data-key="a->b"]')
    bc = links.locator('tr[data-key="b->c"]')
    expect(ab.locator('[data-field="state"] .badge')).to_have_text("ok")
    expect(bc.locator('[data-field="state"] .badge')).to_have_text("ok")
    expect(ab.locator('[data-field="sync"] .badge')).to_have_text("sync")
    # the graph: three instance nodes in two group boxes, two edges
    counts = page.evaluate(
        "() => new Promise((ok) => setTimeout(() => ok(document.querySelectorAll("
        "'#fabric-graph canvas').length), 0))"
    )
    assert counts >= 1
    if os.environ.get("SPOOL_FABRIC_SCREENSHOT"):
        page.wait_for_timeout(500)  # the layout's animation frame, for the picture only
        page.screenshot(path=str(ROOT / "docs" / "fabric.png"), full_page=True)

    # a downgrade clicked on A -> B: A's REST state and the page
    ab.locator('button[data-action="downgrade"]').click()
    page.locator('dialog [data-action="confirm"]').click()
    expect(page.locator("#page-alert")).to_contain_text("a → b: downgrade done (now async)")
    assert chain.destination("a", "b")["effective_sync_type"] == "async"
    # ... and B's: the source tells its destination (a sync notice on the link)
    wait_until(
        lambda: [i["sync_type"] for i in chain.replication("b")["incoming"] if i["name"] == "a"]
        == ["async"],
        10, message="b sees the link from a async",
    )  # fmt: skip
    expect(ab.locator('[data-field="sync"] .badge')).to_have_text("async")
    events = chain.api("a", "/api/events?category=admin")
    assert any(
        e.get("action") == "replication.downgrade" and e.get("target") == "b"
        for e in events.get("events", events)
        if isinstance(e, dict)
    ), events

    # operations on another instance from this page: b's client and subscription
    reader = SyncClient(chain.procs["b"].ws_url, "reader-on-b")
    reader.connect()
    try:
        reader.subscribe("md", bookmark="0", sub_id="replay-1")
        page.locator('#fabric-instances tr[data-key="b"] button[data-action="manage"]').click()
        sub = page.locator('#fabric-subscriptions tbody tr[data-key="reader-on-b/replay-1"]')
        sub.locator('button[data-action="pause"]').click()
        expect(page.locator("#page-alert")).to_contain_text("b: pause reader-on-b/replay-1 done")
        expect(sub.locator(".badge")).to_have_text("paused")
        sub.locator('button[data-action="resume"]').click()
        expect(sub.locator('button[data-action="pause"]')).to_be_enabled()
        client = page.locator('#fabric-clients tbody tr[data-key="reader-on-b"]')
        client.locator('button[data-action="disconnect"]').click()
        expect(page.locator("#page-alert")).to_contain_text("b: disconnect reader-on-b done")
        expect(client).to_have_count(0)
    finally:
        reader.close()
    on_b = chain.api("b", "/api/events?category=admin")
    actions = [(e.get("action"), e.get("target")) for e in on_b.get("events", [])]
    for recorded in (("subscriptions.pause", "reader-on-b/replay-1"),
                     ("subscriptions.resume", "reader-on-b/replay-1"),
                     ("clients.disconnect", "reader-on-b")):  # fmt: skip
        assert recorded in actions, actions

    # C dies: its node and links are down within two refresh intervals
    chain.procs["c"].kill()
    killed = time.monotonic()
    deadline_ms = int(2 * REFRESH_S * 1000)
    expect(instances.locator('tr[data-key="c"] [data-field="state"] .badge')).to_have_text(
        "down", timeout=deadline_ms
    )
    expect(bc.locator('[data-field="state"] .badge')).to_have_text("down", timeout=deadline_ms)
    assert time.monotonic() - killed <= 2 * REFRESH_S + 0.5
    assert page.evaluate("() => document.querySelectorAll('#fabric-graph canvas').length") >= 1


def test_with_users_each_instance_takes_the_token_given_for_it(page: Page, tmp_path: Path) -> None:
    """A and B with <Users>: the page, logged on to A, cannot read B until the operator
    gives it B's token (kept in the tab); then B is up, and an action on B made from A's
    page is recorded in B's event log with B's user."""
    cluster = Cluster(tmp_path, ["a", "b"])
    a_origin, b_origin = _origin(cluster, "a"), _origin(cluster, "b")
    users = (
        f"<User><Name>{ADMIN_USER}</Name><PasswordHash>{hash_password(ADMIN_PASSWORD)}"
        f"</PasswordHash><Token>{ADMIN_TOKEN}</Token><Admin>true</Admin></User>"
    )
    to_b = destination("b", [cluster.address("b")], exclude="replicate", user=ADMIN_USER,
                       secret=ADMIN_TOKEN)  # fmt: skip
    cluster.add("a", users=users, admin_extra=_allow(b_origin), destinations=[to_b])
    cluster.add("b", users=users, admin_extra=_allow(a_origin))
    cluster.start()
    bearer = {"Authorization": f"Bearer {ADMIN_TOKEN}"}

    def api(name: str, path: str) -> Any:
        url = f"{cluster.procs[name].http_url}{path}"
        response = httpx.get(url, headers=bearer, timeout=10)
        response.raise_for_status()
        return response.json()

    try:
        wait_until(lambda: api("a", "/api/replication")["destinations"][0]["connected"], 30)
        page.goto(f"{cluster.procs['a'].http_url}/login?next=/fabric")
        page.fill("#username", ADMIN_USER)
        page.fill("#password", ADMIN_PASSWORD)
        page.click("button[type=submit]")
        expect(page).to_have_url(f"{cluster.procs['a'].http_url}/fabric")
        b_state = page.locator('#fabric-instances tr[data-key="b"] [data-field="state"]')
        expect(b_state).to_contain_text("not authenticated", timeout=15_000)
        expect(b_state.locator(".badge")).to_have_text("unknown")

        page.fill('#fabric-credentials input[name="instance"]', "b")
        page.fill('#fabric-credentials input[name="token"]', ADMIN_TOKEN)
        page.click('#fabric-credentials button[type="submit"]')
        expect(page.locator("#fabric-credential-list")).to_contain_text("b: token saved")
        expect(b_state.locator(".badge")).to_have_text("up", timeout=10_000)
        assert ADMIN_TOKEN not in (page.context.cookies().__repr__())

        with SyncClient(cluster.procs["b"].ws_url, "feed-b", user_id=ADMIN_USER,
                        password=ADMIN_TOKEN):  # fmt: skip
            page.locator('#fabric-instances tr[data-key="b"] button[data-action="manage"]').click()
            row = page.locator('#fabric-clients tbody tr[data-key="feed-b"]')
            row.locator('button[data-action="disconnect"]').click()
            expect(page.locator("#page-alert")).to_contain_text("b: disconnect feed-b done")
        events = api("b", "/api/events?category=admin")["events"]
        assert any(
            e.get("action") == "clients.disconnect" and e.get("user") == ADMIN_USER for e in events
        ), events
    finally:
        cluster.stop()


def test_the_route_trace_follows_a_topic_and_marks_a_link_that_drops(
    page: Page, tmp_path: Path
) -> None:
    """A -> B -> C where B's destination C takes only ``orders``: the trace of ``orders``
    on A's page reaches C over two sync hops; ``trades`` stops at B, and the page says why;
    B -> C is marked as a link that drops (B's report, read by A's page)."""
    cluster = Cluster(tmp_path, ["a", "b", "c"])
    a, b, c = (_origin(cluster, n) for n in "abc")
    cluster.add("a", admin_extra=_allow(b, c),
                destinations=[destination("b", [cluster.address("b")], exclude="replicate")])  # fmt: skip
    cluster.add("b", admin_extra=_allow(a),
                destinations=[destination("c", [cluster.address("c")], topics=(("orders", None),),
                                          exclude="replicate")])  # fmt: skip
    cluster.add("c", admin_extra=_allow(a))
    cluster.start()
    try:
        wait_until(lambda: cluster.destination("a", "b")["connected"], 30)
        wait_until(lambda: cluster.destination("b", "c")["connected"], 30)
        # a learns c's configuration through b (the fabric view): the REST trace says so
        wait_until(
            lambda: [r["instance"] for r in cluster.api("a", "/api/fabric/route?topic=orders")
                     ["reached"]] == ["b", "c"],
            20, message="a's route trace reaches c",
        )  # fmt: skip
        page.goto(f"{cluster.procs['a'].http_url}/fabric")
        bc = page.locator('#fabric-links tbody tr[data-key="b->c"]')
        expect(bc.locator('[data-field="drops"]')).to_have_text("drops", timeout=15_000)
        assert "recorded topics no topic block takes" in (
            bc.locator('[data-field="drops"]').get_attribute("title") or ""
        )
        expect(
            page.locator('#fabric-links tbody tr[data-key="a->b"] [data-field="drops"]')
        ).to_have_count(0)

        page.fill('#fabric-route-form input[name="topic"]', "orders")
        page.click('#fabric-route-form button[type="submit"]')
        expect(page.locator("#fabric-route-summary")).to_have_text(
            '"orders" published on a reaches 2 instances'
        )
        reached = page.locator("#fabric-route-reached tbody")
        expect(reached.locator('tr[data-key="c"] [data-field="route"]')).to_have_text(
            "a → b (sync) → c (sync)"
        )
        expect(reached.locator('tr[data-key="b"] [data-field="route"]')).to_have_text(
            "a → b (sync)"
        )
        expect(page.locator("#fabric-route-stops li")).to_have_count(0)

        page.fill('#fabric-route-form input[name="topic"]', "trades")
        page.click('#fabric-route-form button[type="submit"]')
        expect(page.locator("#fabric-route-summary")).to_have_text(
            '"trades" published on a reaches 1 instance'
        )
        expect(page.locator('#fabric-route-stops li[data-key="b->c"]')).to_have_text(
            "not to c from b: no topic block of b's destination 'c' takes 'trades'"
        )
        expect(reached.locator("tr")).to_have_count(1)
    finally:
        cluster.stop()


def test_a_peer_that_refuses_the_page_is_unknown_and_its_link_up(
    context: BrowserContext, tmp_path: Path
) -> None:
    """A -> B where B does not list A's dashboard in its AllowedOrigins: the browser's call
    to B fails like a network error, but A sees its link to B connected, so B is
    ``unknown`` with the origin to add, and the link keeps A's view (up), with no ``down``
    anywhere; once B is really gone (SIGKILL) A sees the link drop, and both are down.
    The browser logs B's CORS refusal as a console error: the only one this page may have."""
    page = context.new_page()
    errors = PageErrors(page)
    cluster = Cluster(tmp_path, ["a", "b"])
    cluster.add("a", destinations=[destination("b", [cluster.address("b")],
                                               exclude="replicate")])  # fmt: skip
    cluster.add("b")
    cluster.start()
    try:
        wait_until(lambda: cluster.destination("a", "b")["connected"], 30)
        a_url = cluster.procs["a"].http_url
        page.goto(f"{a_url}/fabric")
        b_state = page.locator('#fabric-instances tr[data-key="b"] [data-field="state"]')
        expect(b_state.locator(".badge")).to_have_text("unknown", timeout=15_000)
        expect(b_state).to_contain_text(f"unknown: add {a_url} to b's Admin/AllowedOrigins")
        ab = page.locator('#fabric-links tbody tr[data-key="a->b"] [data-field="state"]')
        expect(ab.locator(".badge")).to_have_text("ok")
        expect(ab).to_contain_text("connected")
        expect(page.locator(".badge.down")).to_have_count(0)
        expect(page.locator("#summary")).not_to_contain_text("down")

        cluster.procs["b"].kill()
        deadline_ms = int(2 * REFRESH_S * 1000) + 5_000  # A's link notices, then a refresh
        expect(b_state.locator(".badge")).to_have_text("down", timeout=deadline_ms)
        expect(ab.locator(".badge")).to_have_text("down", timeout=deadline_ms)
        expect(b_state).not_to_contain_text("AllowedOrigins")
    finally:
        cluster.stop()
    b_api = f"{cluster.procs['b'].http_url}/api/fabric"
    refused = f"Access to fetch at '{b_api}' from origin '{a_url}' has been blocked by CORS"
    assert [e for e in errors.errors if refused not in e] == []
