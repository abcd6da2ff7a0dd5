"""The alert banner in Chromium: a write outage shows on an open page and goes away.

The broker runs under tests/support/faulty_serve.py, so its journal fsyncs fail with EIO
while the test's control file says so (no root, no tmpfs needed). The page is opened
before the outage and never reloaded: the banner comes and goes with the live stream
(static/js/shell.js); a page opened during the outage has it from the server.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, expect

from spool.server.client import Client, subscribe_queue
from spool.server.client.sync import SyncClient
from spool.server.protocol import errors
from tests.support.server import SpoolProcess, config_xml

pytestmark = pytest.mark.browser

RETRY = "<WriteRetryInterval>200ms</WriteRetryInterval>"


@pytest.fixture
def faulty_server(tmp_path: Path) -> Iterator[tuple[SpoolProcess, Path]]:
    control = tmp_path / "faults"
    proc = SpoolProcess(
        tmp_path / "run", config_xml(tmp_path / "data", txlog_extra=RETRY), control=control
    ).start()
    yield proc, control
    proc.stop()


def test_a_write_outage_banner_comes_and_goes_with_the_live_stream(
    page: Page, faulty_server: tuple[SpoolProcess, Path]
) -> None:
    proc, control = faulty_server
    page.goto(proc.http_url + "/subscriptions")
    expect(page.locator("#live-status")).to_have_attribute("data-state", "open")
    banner = page.locator('#alerts [data-alert="txlog-refusing-writes"]')
    expect(banner).to_have_count(0)
    with SyncClient(proc.ws_url, "pub") as c:
        control.write_text("fsync EIO\n")
        last = c.publish("orders", b'{"n":1}', persisted=True)
        with pytest.raises(errors.TxlogFull):
            c.wait_persisted(last, timeout=10)
        # the open page shows it within a second or two, cause and since when included
        expect(banner).to_be_visible(timeout=10_000)
        expect(banner).to_contain_text("Transaction log refusing writes")
        expect(banner).to_contain_text("fsync failed")
        expect(banner.locator("time")).to_have_text(proc_since(proc))
        assert "error" in (banner.get_attribute("class") or "")
        # another page, opened now, has it from the server
        other = page.context.new_page()
        other.goto(proc.http_url + "/transaction-log")
        expect(other.locator('#alerts [data-alert="txlog-refusing-writes"]')).to_be_visible()
        other.close()
        # the disk is fine again: the log retries, the banner goes
        control.unlink()
        expect(banner).to_have_count(0, timeout=15_000)
        c.flush(timeout=10)


def proc_since(proc: SpoolProcess) -> str:
    """The outage's start as the API reports it."""
    outage = httpx.get(proc.http_url + "/api/transaction_log", timeout=10).json()["write_outage"]
    assert outage is not None
    return str(outage["since"])


QUEUE = (
    "<Queue><Name>work</Name><MessageType>json</MessageType>"
    "<UnderlyingTopic>work-in</UnderlyingTopic><LeasePeriod>30s</LeasePeriod></Queue>"
)
RULE = (
    "<Alerts><Rule><Name>work-old</Name><Metric>queue_age</Metric><Queue>work</Queue>"
    "<Above>1s</Above><For>1s</For><Level>warning</Level></Rule></Alerts>"
)


@pytest.fixture
def rule_server(tmp_path: Path) -> Iterator[SpoolProcess]:
    proc = SpoolProcess(
        tmp_path / "run", config_xml(tmp_path / "data", sow=QUEUE, admin_extra=RULE)
    ).start()
    yield proc
    proc.stop()


def test_an_alert_rule_banner_and_its_overview_row_come_and_go(
    page: Page, rule_server: SpoolProcess
) -> None:
    proc = rule_server
    page.goto(proc.http_url + "/")
    expect(page.locator("#live-status")).to_have_attribute("data-state", "open")
    row = page.locator('#alert-rules tr[data-key="work-old"]')
    expect(page.locator("#alert-rules-panel")).to_be_visible()
    expect(row).to_have_attribute("data-state", "inactive")
    expect(row).to_contain_text("queue_age work")
    expect(row).to_contain_text("above 1s for 1s")
    banner = page.locator('#alerts [data-alert="rule-work-old"]')
    expect(banner).to_have_count(0)
    with SyncClient(proc.ws_url, "pub") as c:
        c.publish("work-in", b'{"n":1}', persisted=True)
        c.flush(timeout=10)
    # older than 1s, held for 1s: the open page shows the banner from the live stream
    expect(banner).to_be_visible(timeout=15_000)
    expect(banner).to_contain_text("Alert rule work-old")
    expect(banner).to_contain_text("queue work")
    assert "warning" in (banner.get_attribute("class") or "")
    expect(row).to_have_attribute("data-state", "firing", timeout=10_000)
    # a consumer takes the message: the rule clears, the banner goes
    with ThreadPoolExecutor(1) as pool:  # the client's own loop, beside Playwright's
        pool.submit(asyncio.run, consume_one(proc)).result(timeout=60)
    expect(banner).to_have_count(0, timeout=15_000)
    expect(row).to_have_attribute("data-state", "inactive", timeout=10_000)


async def consume_one(proc: SpoolProcess) -> None:
    """Take the queue's one message and ack it."""
    async with Client(proc.ws_url, "worker") as c:
        sub = await subscribe_queue(c, "work")
        async for message in sub:
            message.ack()
            break
        await c.flush()
