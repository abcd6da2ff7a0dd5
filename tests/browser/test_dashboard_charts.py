"""The Overview and Queues charts open with the stats database's history of their window.

The broker here is fresh for this module and no page is opened before the traffic is
sampled, so the dashboard's live feed (which starts with the first page) holds nothing
from before a page opened: a point older than that on a chart came from the stats
database. The chart is read like an operator would: hover its left edge and read the
legend (uPlot shows the nearest point's time and values there).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect

from spool.server.client.sync import SyncClient
from tests.browser.conftest import VIEWPORT, PageErrors
from tests.browser.test_dashboard import api, publish
from tests.browser.test_history_page import COLLECT_CHARTS
from tests.support.server import SpoolProcess, config_xml
from tests.support.wait import wait_until

pytestmark = pytest.mark.browser

QUEUE = (
    "<Queue><Name>work</Name><MessageType>json</MessageType>"
    "<UnderlyingTopic>work-in</UnderlyingTopic></Queue>"
)


@pytest.fixture(scope="module")
def charts_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SpoolProcess]:
    """A broker with one queue and stats every second, no page opened on it yet."""
    workdir = tmp_path_factory.mktemp("charts")
    proc = SpoolProcess(workdir, config_xml(workdir / "data", name="spool-charts", sow=QUEUE))
    proc.start()
    yield proc
    proc.stop()


def stored(server: SpoolProcess, metric: str) -> list[list[float]]:
    """The stats database's samples of ``metric`` over the last hour ([] before the first)."""
    try:
        return list(api(server, f"/api/stats?metric={metric}")["points"])
    except httpx.HTTPStatusError:  # 404 until the sampler wrote the series once
        return []


def leftmost_point(page: Page, chart: str) -> dict[str, str]:
    """Hover the chart's left edge and read its legend: {series label: value}."""
    over = page.locator(f"{chart} .u-over")
    box = over.bounding_box()
    assert box is not None
    page.mouse.move(box["x"] + 2, box["y"] + box["height"] / 2)
    rows = page.locator(f"{chart} .u-legend .u-series")
    labels = rows.locator(".u-label").all_inner_texts()
    values = rows.locator(".u-value").all_inner_texts()
    return dict(zip(labels, values, strict=True))


def seconds_before(opened: float, hhmmss: str) -> float:
    """How long before ``opened`` (epoch seconds) the UTC time of day ``hhmmss`` was."""
    h, m, s = (int(x) for x in hhmmss.split(":"))
    return (opened % 86400 - (h * 3600 + m * 60 + s)) % 86400


def test_the_overview_rates_chart_opens_with_the_stored_minutes(
    page: Page, charts_server: SpoolProcess
) -> None:
    with SyncClient(charts_server.ws_url, "charts-feeder") as feeder:

        def sampled_traffic() -> bool:
            publish(feeder, "charts", 50)
            points = stored(charts_server, "instance/msgs_in_rate")
            return len(points) >= 3 and any(v > 0 for _, v in points)

        wait_until(sampled_traffic, timeout=30, interval=0.2, message="stored msgs in rate > 0")
        opened = time.time()
        page.goto(charts_server.http_url)
        expect(page.locator("#live-status")).to_have_attribute("data-state", "open")
        expect(page.locator("#chart-rates .empty-note")).to_be_hidden()

        def older_point() -> dict[str, str] | None:
            legend = leftmost_point(page, "#chart-rates")
            when = legend.get("time (UTC)", "")
            if re.fullmatch(r"\d\d:\d\d:\d\d", when) and 2 <= seconds_before(opened, when) < 600:
                return legend
            return None

        legend = wait_until(older_point, timeout=10, interval=0.2, message="a stored point")
        assert re.fullmatch(r"[\d.,]+\s*[kMG]?/s", legend["in"]), legend
        assert re.fullmatch(r"[\d.,]+\s*[kMG]?/s", legend["out"]), legend
        expect(page.locator("#page-alert")).to_be_hidden()


def test_the_queues_charts_open_with_the_stored_minutes(
    page: Page, charts_server: SpoolProcess
) -> None:
    with SyncClient(charts_server.ws_url, "charts-queue-feeder") as feeder:
        publish(feeder, "work-in", 3)

    def sampled_depth() -> bool:
        points = stored(charts_server, "queues/work/depth")
        return len(points) >= 3 and points[-1][1] >= 3

    wait_until(sampled_depth, timeout=30, interval=0.2, message="stored queue depth")
    opened = time.time()
    page.goto(f"{charts_server.http_url}/queues")
    expect(page.locator("#queues-table tr.queue-row", has_text="work")).to_be_visible()
    expect(page.locator("#chart-depth .empty-note")).to_be_hidden()

    def older_point(chart: str) -> dict[str, str] | None:
        legend = leftmost_point(page, chart)
        when = legend.get("time (UTC)", "")
        if re.fullmatch(r"\d\d:\d\d:\d\d", when) and 2 <= seconds_before(opened, when) < 900:
            return legend
        return None

    depth = wait_until(lambda: older_point("#chart-depth"), timeout=10, interval=0.2,
                       message="a stored depth point")  # fmt: skip
    assert re.fullmatch(r"[\d,]+", depth["depth"]), depth
    age: Any = wait_until(lambda: older_point("#chart-age"), timeout=10, interval=0.2,
                          message="a stored age point")  # fmt: skip
    assert age["oldest message"] != "\u2013", age  # the "no value" dash
    expect(page.locator("#page-alert")).to_be_hidden()


def test_the_queues_age_chart_labels_ages_with_their_unit(
    browser: Browser, charts_server: SpoolProcess
) -> None:
    """The age axis is drawn on a canvas: its labels are read from the chart object."""
    ctx = browser.new_context(viewport=VIEWPORT)  # type: ignore[arg-type]
    ctx.add_init_script(COLLECT_CHARTS)
    page = ctx.new_page()
    errors = PageErrors(page)
    try:
        with SyncClient(charts_server.ws_url, "charts-age-feeder") as feeder:
            publish(feeder, "work-in", 2)  # no consumer: they wait, and age
        page.goto(f"{charts_server.http_url}/queues")
        expect(page.locator("#chart-age .empty-note")).to_be_hidden()

        def axis() -> list[str] | None:
            labels: list[str] = page.evaluate(
                "() => window.charts.find((c) => c.root.closest('#chart-age')).axes[1]._values"
            )
            # ticks above 0: the oldest message has aged since it was published
            return labels if labels and len(labels) >= 3 else None

        labels = wait_until(axis, timeout=20, interval=0.3, message="age axis ticks")
        assert all(re.fullmatch(r"\d+(\.\d+)? (s|min|h|d)", label) for label in labels), labels
        assert len(set(labels)) == len(labels), labels
        legend = page.locator("#chart-age .u-legend .u-series").nth(1).locator(".u-value")
        over = page.locator("#chart-age .u-over")
        box = over.bounding_box()
        assert box is not None
        page.mouse.move(box["x"] + box["width"] - 2, box["y"] + box["height"] / 2)
        expect(legend).to_have_text(re.compile(r"^\d+(\.\d+)? (s|min|h|d)$"))
    finally:
        ctx.close()
    assert errors.errors == [], "JavaScript errors on the page"
