"""The overview's *Slow consumers* and *Disconnects by cause* panels in Chromium, against a
broker with a 1 MB buffer and a 1 s SlowClientTimeout: a subscriber in its own process that
reads (almost) nothing spills, then is cut for taking nothing."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from spool.server.client.sync import SyncClient
from tests.support.server import ROOT, SpoolProcess, config_xml

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def small_buffer_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SpoolProcess]:
    workdir: Path = tmp_path_factory.mktemp("slow-consumers")
    xml = config_xml(
        workdir / "data",
        name="spool-slow",
        tuning="<SlowClientBufferLimit>1MB</SlowClientBufferLimit>"
        "<SlowClientTimeout>1s</SlowClientTimeout>",
        transport_extra="<MaxMessageSize>256KB</MaxMessageSize>",
    )
    proc = SpoolProcess(workdir, xml).start()
    yield proc
    proc.stop()


def test_the_overview_shows_a_spill_and_a_slow_client_cut_for_taking_nothing(
    page: Page, small_buffer_server: SpoolProcess
) -> None:
    server = small_buffer_server
    page.goto(server.http_url)
    slow = page.locator("#slow-kv")
    causes = page.locator("#disconnects-kv")
    expect(slow).to_contain_text("spills0")
    expect(causes).to_contain_text("slow: took nothing0")
    # a subscriber that reads one byte a second: it takes nothing, for the broker
    reader = subprocess.Popen(
        [sys.executable, "-m", "tests.support.steady_reader", server.ws_url, "burst", "5000", "1"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
    )
    try:
        assert reader.stdout is not None
        assert reader.stdout.readline().strip() == b"ready"
        with SyncClient(server.ws_url, "burster") as pub:
            pad = "x" * 1000
            for i in range(5000):
                pub.publish("burst", {"i": i, "pad": pad})
            pub.flush()
        expect(slow).to_contain_text("spills1")
        expect(causes).to_contain_text("slow: took nothing1")
        expect(causes.locator("dt", has_text="slow: took nothing")).to_have_attribute(
            "title", "read nothing for Tuning/SlowClientTimeout while messages waited"
        )
    finally:
        reader.kill()
        reader.communicate()  # reaps it and closes its stdout
