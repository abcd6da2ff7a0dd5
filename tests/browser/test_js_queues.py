"""static/spool-client.js queue consumers in Chromium against a real broker: explicit
ack / cancel per message with the delivery count, and the auto-ack helper."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, expect

from spool.server.client import Client, subscribe_queue
from tests.support.server import SpoolProcess, config_xml

pytestmark = pytest.mark.browser

QUEUE = (
    "<Queue><Name>jobs</Name><MessageType>json</MessageType>"
    "<UnderlyingTopic>jobs-in</UnderlyingTopic><MaxPerSubscriptionBacklog>10"
    "</MaxPerSubscriptionBacklog></Queue>"
)
PRELUDE = """
const { SpoolClient } = await import('/static/spool-client.js');
const within = (promise, ms, what) => Promise.race([promise, new Promise((_, reject) =>
  setTimeout(() => reject(new Error(`timed out: ${what}`)), ms))]);
const waitFor = async (cond, what) => {
  for (let i = 0; i < 500 && !cond(); i++) await new Promise((r) => setTimeout(r, 10));
  if (!cond()) throw new Error(`timed out: ${what}`);
};
"""


@pytest.fixture(scope="module")
def queue_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SpoolProcess]:
    workdir: Path = tmp_path_factory.mktemp("queues")
    proc = SpoolProcess(workdir, config_xml(workdir / "data", name="spool-q", sow=QUEUE)).start()
    yield proc
    proc.stop()


def run(page: Page, server: SpoolProcess, body: str) -> Any:
    page.goto(f"{server.http_url}/query")
    return page.evaluate(f"async ({{url}}) => {{ {PRELUDE}\n{body} }}", {"url": server.ws_url})


def depth(server: SpoolProcess) -> int:
    return int(httpx.get(f"{server.http_url}/api/queues/jobs", timeout=10).json()["depth"])


def test_ack_cancel_and_auto_ack(page: Page, queue_server: SpoolProcess) -> None:
    result = run(
        page,
        queue_server,
        """
        const pub = new SpoolClient(url, { name: 'js-q-pub' });
        const worker = new SpoolClient(url, { name: 'js-q-worker' });
        await pub.connect(); await worker.connect();
        for (let n = 0; n < 6; n++) pub.publish('jobs-in', { n });
        await pub.flush();
        const seen = [];
        let cancelled = false;
        await worker.queueSubscribe('jobs', { maxBacklog: 3 }, (m) => {
          const n = m.json().n;
          seen.push([n, m.deliveryCount, m.leasePeriodMs > 0]);
          if (n === 0 && !cancelled) { cancelled = true; m.cancel(); } else { m.ack(); }
        });
        await waitFor(() => seen.length >= 7, 'seven deliveries');
        await worker.flush();
        await worker.unsubscribe(worker.subscriptions[0]);
        const auto = new SpoolClient(url, { name: 'js-q-auto' });
        await auto.connect();
        for (let n = 10; n < 13; n++) pub.publish('jobs-in', { n });
        await pub.flush();
        const autoSeen = [];
        await auto.queueSubscribe('jobs', { maxBacklog: 1, autoAck: true }, async (m) => {
          autoSeen.push(m.json().n);
        });
        await waitFor(() => autoSeen.length >= 3, 'auto-acked messages');
        await auto.flush();
        pub.close(); worker.close(); auto.close();
        return { seen, autoSeen };
        """,
    )
    seen = result["seen"]
    assert [n for n, _, _ in seen if n == 0] == [0, 0]
    assert [dc for n, dc, _ in seen if n == 0] == [1, 2]  # the cancel came back, counted
    assert sorted(n for n, _, _ in seen) == [0, 0, 1, 2, 3, 4, 5]
    assert all(leased for _, _, leased in seen)
    assert sorted(result["autoSeen"]) == [10, 11, 12]
    assert depth(queue_server) == 0


def test_the_dashboard_queues_page(page: Page, queue_server: SpoolProcess) -> None:
    """Depth, leases and lease table from /api/queues, the charts, and the proxied-transfer
    switch answered with the broker's reason. The clients run on their own loop in a
    thread (the sync Playwright API owns this thread's loop)."""
    leased = threading.Event()
    release = threading.Event()

    async def lease_two() -> None:
        async with Client(queue_server.ws_url, "dash-pub") as pub:
            for n in range(5):
                pub.publish("jobs-in", {"n": n})
            await pub.flush()
        async with Client(queue_server.ws_url, "dash-worker") as c:
            sub = await subscribe_queue(c, "jobs", max_backlog=2)
            await sub.get(10)
            await sub.get(10)
            leased.set()
            await asyncio.to_thread(release.wait, 60)
        # leaving: the connection closes and its leases return to the queue

    worker = threading.Thread(target=asyncio.run, args=(lease_two(),))
    worker.start()
    try:
        assert leased.wait(30)
        page.goto(f"{queue_server.http_url}/queues")
        row = page.locator("#queues-table tr.queue-row", has_text="jobs")
        expect(row.locator('[data-field="depth"]')).to_have_text("5")
        expect(row.locator('[data-field="leased"]')).to_have_text("2")
        expect(row.locator('[data-field="consumers"]')).to_have_text("1")
        expect(page.locator("#leases-table tbody tr")).to_have_count(2)
        expect(page.locator("#leases-table")).to_contain_text("dash-worker/")
        expect(page.locator("#chart-depth canvas")).to_have_count(1)
        expect(page.locator("#chart-age canvas")).to_have_count(1)
        row.locator("button.proxied-transfer").click()
        page.locator('dialog [data-action="confirm"]').click()
        expect(page.locator("#page-alert")).to_contain_text("not replicated")
    finally:
        release.set()
        worker.join(30)
    expect(row.locator('[data-field="leased"]')).to_have_text("0")
    expect(row.locator('[data-field="consumers"]')).to_have_text("0")
