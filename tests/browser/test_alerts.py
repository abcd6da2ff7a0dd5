"""The alert banner in Chromium: a write outage shows on an open page and goes away.

The broker runs under tests/support/faulty_serve.py, so its journal fsyncs fail with EIO
while the test's control file says so (no root, no tmpfs needed). The page is opened
before the outage and never reloaded: the banner comes and goes with the live stream
(static/js/shell.js); a page opened during the outage has it from the server.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, expect

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
