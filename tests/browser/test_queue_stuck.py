"""A stuck queue in Chromium: a message no consumer's filter matches waits while the
consumer has room; the open Queues page shows the alert banner (from the live stream),
the row marked stuck with the message's age, and the message browser says why it
waits. When a consumer that takes it comes, the banner goes away."""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from spool.server.client import Client, subscribe_queue
from tests.support.server import SpoolProcess, config_xml

pytestmark = pytest.mark.browser

QUEUE = (
    "<Queue><Name>work</Name><MessageType>json</MessageType>"
    "<UnderlyingTopic>work-in</UnderlyingTopic><MaxPerSubscriptionBacklog>4"
    "</MaxPerSubscriptionBacklog><StuckMessageAge>1s</StuckMessageAge></Queue>"
)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[SpoolProcess]:
    proc = SpoolProcess(tmp_path, config_xml(tmp_path / "data", name="spool-stuck", sow=QUEUE))
    proc.start()
    yield proc
    proc.stop()


def test_a_message_no_consumer_matches_is_shown_stuck_with_its_reason(
    page: Page, server: SpoolProcess
) -> None:
    subscribed = threading.Event()
    take_it = threading.Event()
    taken = threading.Event()

    async def clients() -> None:
        async with Client(server.ws_url, "pub") as pub:
            pub.publish("work-in", {"kind": "even", "n": 0})
            await pub.flush()
        async with Client(server.ws_url, "odd-worker") as c:
            await subscribe_queue(c, "work", max_backlog=4, filter="/kind = 'odd'")
            subscribed.set()
            await asyncio.to_thread(take_it.wait, 120)
            async with Client(server.ws_url, "any-worker") as c2:
                sub = await subscribe_queue(c2, "work", max_backlog=4)
                msg = await sub.get(30)
                msg.ack()
                await sub.settled()
                taken.set()

    worker = threading.Thread(target=asyncio.run, args=(clients(),))
    worker.start()
    try:
        assert subscribed.wait(30)
        page.goto(f"{server.http_url}/queues")
        expect(page.locator("#live-status")).to_have_attribute("data-state", "open")
        banner = page.locator('#alerts [data-alert="queue-stuck:work"]')
        expect(banner).to_be_visible(timeout=15_000)
        expect(banner).to_contain_text("Queue work is stuck")
        expect(banner).to_contain_text("no consumer's filter matches it")
        row = page.locator("#queues-table tr.queue-row", has_text="work")
        expect(row).to_have_attribute("data-stuck", "1", timeout=10_000)
        # stuck means it waited StuckMessageAge (1 s) at the least
        expect(row.locator('[data-field="oldest_undelivered_age"]')).to_have_text(
            re.compile(r"^00:(00:0[1-9]|00:[1-5]\d|0[1-9]:\d\d)$")
        )
        expect(row.locator('[data-field="consumers"]')).to_have_text("1")
        row.locator("a.browse").click()
        expect(page).to_have_url(f"{server.http_url}/queues/messages?queue=work")
        cells = page.locator("#messages-table tbody tr").first
        expect(cells.locator("td.reason")).to_have_attribute("data-reason", "no_consumer_matches")
        expect(cells.locator("td.reason")).to_contain_text("no consumer's filter matches it")
        expect(cells.locator("td.data")).to_contain_text('"kind":"even"')
        expect(page.locator("#page-info")).to_contain_text("1 shown of 1")
        # a consumer that takes it: delivered, acked, the banner goes from the open page
        take_it.set()
        assert taken.wait(30)
        expect(banner).to_have_count(0, timeout=15_000)
        page.locator("#refresh").click()
        expect(page.locator("#messages-table tbody")).to_contain_text("no message")
    finally:
        take_it.set()
        worker.join(60)
