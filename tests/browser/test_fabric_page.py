"""The fabric page against three real instances A -> B -> C (issue 19 acceptance): the
page on A merges the three instances' /api/fabric (B and C are other origins that allow
A's), draws three nodes and their links, a downgrade clicked on A -> B reaches A's REST
state and the page, and killing C turns its node and links "down" within two refresh
intervals; the page manages B's client and subscription. Also writes docs/fabric.png when SPOOL_FABRIC_SCREENSHOT is set (the
`make fabric-screenshot` target)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from server.client.sync import SyncClient
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
