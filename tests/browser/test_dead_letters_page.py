"""Dead letters in Chromium: poison messages leave their queue after MaxDeliveries for
its dead-letter topic; the Queues page links to them; the dead-letters page shows each
with why, and sends them back one at a time, as a selection and all that match a filter;
a consumer that works them gets each exactly once, with its first bookmark as lineage."""

from __future__ import annotations

import asyncio
import queue as queues
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, expect

from spool.server.client import Client, subscribe_queue
from tests.support.server import SpoolProcess, config_xml, sow_topic
from tests.support.wait import wait_until

pytestmark = pytest.mark.browser

SOW = (
    "<Queue><Name>work</Name><MessageType>json</MessageType>"
    "<UnderlyingTopic>work-in</UnderlyingTopic><MaxPerSubscriptionBacklog>4"
    "</MaxPerSubscriptionBacklog><LeasePeriod>1s</LeasePeriod><MaxDeliveries>2</MaxDeliveries>"
    "<DeadLetter><Topic>work-dead</Topic></DeadLetter></Queue>"
    + sow_topic("work-dead", "/dead_letter/bookmark")
)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[SpoolProcess]:
    proc = SpoolProcess(tmp_path, config_xml(tmp_path / "data", name="spool-dead", sow=SOW))
    proc.start()
    yield proc
    proc.stop()


def queue_info(server: SpoolProcess) -> dict[str, Any]:
    r = httpx.get(f"{server.http_url}/api/queues/work", timeout=10)
    assert r.status_code == 200, r.text
    info: dict[str, Any] = r.json()
    return info


def poison(server: SpoolProcess) -> dict[int, str]:
    """Three messages a consumer takes and never acks, until each is past MaxDeliveries:
    their original bookmarks by ``n``."""

    async def run() -> dict[int, str]:
        async with Client(server.ws_url, "pub") as pub, Client(server.ws_url, "bad") as bad:
            for n in (1, 2, 3):
                pub.publish("work-in", {"n": n})
            await pub.flush()
            sub = await subscribe_queue(bad, "work", max_backlog=4)
            first: dict[int, str] = {}
            seen = 0
            while seen < 6:  # each delivered twice, the second lease ends unacked too
                msg = await sub.get(30)
                first.setdefault(msg.json()["n"], msg.bookmark)
                seen += 1
            await asyncio.to_thread(
                wait_until, lambda: queue_info(server)["dead_lettered"] == 3, 30, 0.05,
                "three dead letters",
            )  # fmt: skip
            return first

    # the page's Playwright runs an event loop in this thread: the clients get their own
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, run()).result()


def test_dead_letters_are_shown_and_redriven_from_the_page(
    page: Page, server: SpoolProcess
) -> None:
    originals = poison(server)
    assert queue_info(server)["depth"] == 0
    got: queues.Queue[tuple[int, str]] = queues.Queue()
    subscribed = threading.Event()
    done = threading.Event()

    async def worker() -> None:
        async with Client(server.ws_url, "good") as c:
            sub = await subscribe_queue(c, "work", max_backlog=4)
            subscribed.set()
            while not done.is_set():
                try:
                    msg = await sub.get(0.2)
                except TimeoutError:
                    continue
                got.put((msg.json()["n"], msg.message.header["x"]))
                msg.ack()
            await sub.settled()

    thread = threading.Thread(target=asyncio.run, args=(worker(),))
    thread.start()
    try:
        assert subscribed.wait(30)
        page.goto(f"{server.http_url}/queues")
        row = page.locator("#queues-table tr.queue-row", has_text="work-in")
        link = row.locator("a.dead-letters")
        expect(link).to_be_visible()
        link.click()
        expect(page).to_have_url(f"{server.http_url}/queues/dead-letters?queue=work")
        table = page.locator("#letters-table tbody")
        expect(table.locator("tr")).to_have_count(3)
        for n, bookmark in originals.items():
            letter = table.locator(f'tr[data-bookmark="{bookmark}"]')
            expect(letter).to_have_attribute("data-reason", "max_deliveries")
            expect(letter.locator("td").nth(4)).to_have_text("2")  # deliveries
            expect(letter.locator("td.data")).to_have_text(f'{{"n":{n}}}')
        expect(page.locator("#dead-topic")).to_contain_text("work-dead")

        # one: the row's own button
        table.locator(f'tr[data-bookmark="{originals[1]}"] button.redrive-one').click()
        assert got.get(timeout=30) == (1, originals[1])
        expect(table.locator("tr")).to_have_count(2)

        # a selection: tick one row, confirm
        table.locator(f'tr[data-bookmark="{originals[2]}"] td.check input').check()
        expect(page.locator("#selection")).to_have_text("1 selected")
        page.locator("#redrive-selected").click()
        page.locator('dialog.confirm button[data-action="confirm"]').click()
        assert got.get(timeout=30) == (2, originals[2])
        expect(table.locator("tr")).to_have_count(1)

        # all that match a filter
        page.locator("#filter").fill("/message/n = 3")
        page.locator("#apply").click()
        expect(table.locator(f'tr[data-bookmark="{originals[3]}"]')).to_have_count(1)
        page.locator("#redrive-all").click()
        page.locator('dialog.confirm button[data-action="confirm"]').click()
        assert got.get(timeout=30) == (3, originals[3])
        expect(table).to_contain_text("no dead letter")
        expect(page.locator("#page-alert")).to_contain_text("1 sent back")

        # every letter stays, marked with where it went; none can be sent back again
        page.locator("#filter").fill("")
        page.locator("#show-redriven").check()
        expect(table.locator("tr")).to_have_count(3)
        expect(table.locator("td.sent-back")).to_contain_text(["work-in"] * 3)
        expect(table.locator("button.redrive-one:enabled")).to_have_count(0)
        expect(page.locator("#redrive-all")).to_be_disabled()
    finally:
        done.set()
        thread.join(60)
    # each message worked once: nothing came twice while the page was used
    assert got.empty()
    info = queue_info(server)
    assert (info["depth"], info["removed"].get("acked")) == (0, 3)
