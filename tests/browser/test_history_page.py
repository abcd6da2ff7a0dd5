"""The History page in Chromium against a real broker: the series it opens on, several
series overlaid, and times in UTC on a browser whose clock is in another time zone.

The page is read like an operator reads it: the form, the legend under the chart (uPlot
shows the time and the values of the point under the cursor there) and the summary. The
time axis is drawn on a canvas: its labels are read from the chart object, which an init
script collects as the page builds it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect

from spool.server.client.sync import SyncClient
from tests.browser.conftest import VIEWPORT, PageErrors
from tests.browser.test_dashboard import api
from tests.support.server import SpoolProcess
from tests.support.wait import wait_until

pytestmark = pytest.mark.browser

#: a time zone far from UTC all year (no daylight saving time): a time shown in the
#: browser's local time instead of UTC is off by hours
ZONE = "Asia/Kolkata"

#: keeps every uPlot chart the page builds in `window.charts` (uPlot is a classic script
#: assigning the global `uPlot`; the setter wraps its constructor)
COLLECT_CHARTS = """
(() => {
  let wrapped;
  Object.defineProperty(window, "uPlot", {
    configurable: true,
    get: () => wrapped,
    set(real) {
      wrapped = function (...args) {
        const chart = new real(...args);
        (window.charts ??= []).push(chart);
        return chart;
      };
      Object.assign(wrapped, real);
      wrapped.prototype = real.prototype;
    },
  });
})();
"""


@pytest.fixture
def zoned_page(browser: Browser) -> Iterator[Page]:
    """A page whose browser clock is in :data:`ZONE`, its charts collected."""
    ctx = browser.new_context(viewport=VIEWPORT, timezone_id=ZONE)  # type: ignore[arg-type]
    ctx.add_init_script(COLLECT_CHARTS)
    page = ctx.new_page()
    errors = PageErrors(page)
    yield page
    ctx.close()
    assert errors.errors == [], "JavaScript errors on the page"


def sampled(server: SpoolProcess, metric: str, count: int = 2) -> list[list[float]]:
    """Wait until the stats database holds ``count`` samples of ``metric``; return them."""

    def points() -> list[list[float]] | None:
        try:
            found = list(api(server, f"/api/stats?metric={metric}")["points"])
        except httpx.HTTPStatusError:  # 404 until the sampler wrote the series once
            return None
        return found if len(found) >= count else None

    result: list[list[float]] = wait_until(points, timeout=30, message=f"{count} samples")
    return result


def legend(page: Page, x_fraction: float) -> dict[str, str]:
    """Hover the chart at ``x_fraction`` of its width and read its legend."""
    over = page.locator("#chart-history .u-over")
    box = over.bounding_box()
    assert box is not None
    page.mouse.move(box["x"] + box["width"] * x_fraction, box["y"] + box["height"] / 2)
    rows = page.locator("#chart-history .u-legend .u-series")
    labels = rows.locator(".u-label").all_inner_texts()
    values = rows.locator(".u-value").all_inner_texts()
    return dict(zip(labels, values, strict=True))


def utc_clock(epoch: float, template: str = "%H:%M:%S") -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime(template)


def test_times_are_utc_on_a_browser_in_another_time_zone(
    zoned_page: Page, dashboard_server: SpoolProcess
) -> None:
    metric = "instance/connections"  # sampled every interval for as long as the broker runs
    sampled(dashboard_server, metric)
    page = zoned_page
    page.goto(f"{dashboard_server.http_url}/history?metric={metric}&last=900")
    expect(page.locator("#chart-history .empty-note")).to_be_hidden()

    def hovered() -> str | None:
        when = legend(page, 0.995).get("time (UTC)", "")
        return when if re.fullmatch(r"(\d\d-\d\d )?\d\d:\d\d:\d\d", when) else None

    when = wait_until(hovered, timeout=10, interval=0.2, message="a point under the cursor")
    points = api(dashboard_server, f"/api/stats?metric={metric}")["points"]
    # the day is shown only when the window holds two UTC days (near midnight)
    form = "%m-%d %H:%M:%S" if len(when) > 8 else "%H:%M:%S"
    times = {utc_clock(t, form) for t, _ in points}
    assert when in times, (when, sorted(times)[-5:])

    axis: Any = page.evaluate(
        "() => { const x = window.charts.at(-1).axes[0];"
        " return { splits: x._splits, values: x._values }; }"
    )
    assert axis["values"], axis
    for split, label in zip(axis["splits"], axis["values"], strict=True):
        forms = (utc_clock(split, f) for f in ("%H:%M:%S", "%H:%M", "%m-%d %H:%M"))
        assert label in forms, axis

    # over two days, a time alone would not say which day: the legend shows it
    page.goto(f"{dashboard_server.http_url}/history?metric={metric}&last=172800")
    expect(page.locator("#chart-history .empty-note")).to_be_hidden()
    when = wait_until(hovered, timeout=10, interval=0.2, message="a point under the cursor")
    assert re.fullmatch(r"\d\d-\d\d \d\d:\d\d:\d\d", when), when
    # a point of that range is a bucket of samples: a day of the two-day window
    now = time.time()
    assert when[:5] in {utc_clock(now - days * 86400, "%m-%d") for days in range(3)}, when


def series_shown(page: Page) -> list[str]:
    """The series listed above the chart, in order."""
    return [
        str(s.get_attribute("data-metric"))
        for s in page.locator("#series-list [data-metric]").all()
    ]


def url_metrics(page: Page) -> list[str]:
    """The series the page's URL names (``metric=a&metric=b``)."""
    return parse_qs(urlsplit(page.url).query).get("metric", [])


def test_several_series_are_overlaid_and_kept_in_the_url(
    page: Page, dashboard_server: SpoolProcess
) -> None:
    first, second, third = "instance/connections", "instance/subscriptions", "process/threads"
    for metric in (first, second, third):
        sampled(dashboard_server, metric)
    page.goto(f"{dashboard_server.http_url}/history?metric={first}&metric={second}&last=900")
    expect(page.locator("#chart-history .empty-note")).to_be_hidden()
    expect(page.locator("#series-list [data-metric]")).to_have_count(2)
    assert series_shown(page) == [first, second]
    labels = page.locator("#chart-history .u-legend .u-series .u-label")
    expect(labels).to_have_text(["time (UTC)", first, second])
    markers = page.locator("#chart-history .u-legend .u-series .u-marker")
    colours = markers.evaluate_all("ms => ms.slice(1).map(m => getComputedStyle(m).borderColor)")
    assert len(set(colours)) == 2, colours
    rows = page.locator("#summary tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.nth(0)).to_contain_text(first)
    expect(rows.nth(1)).to_contain_text(second)
    for row in rows.all():  # each series its own summary: samples, last, min, max, mean
        expect(row.locator("td").nth(1)).to_have_text(re.compile(r"^[1-9][\d,]*$"))

    # add a third: typed and added, listed last, charted, in the URL
    page.fill("#metric", third)
    page.click("#add-metric")
    expect(labels).to_have_text(["time (UTC)", first, second, third])
    assert url_metrics(page) == [first, second, third]
    expect(rows).to_have_count(3)

    # remove the first: the others stay, in order
    page.locator(f'#series-list [data-metric="{first}"] button.remove').click()
    expect(labels).to_have_text(["time (UTC)", second, third])
    expect(rows).to_have_count(2)
    assert series_shown(page) == [second, third]
    assert url_metrics(page) == [second, third]

    # the view, pasted elsewhere, opens the same
    page.goto(page.url)
    expect(labels).to_have_text(["time (UTC)", second, third])


def test_an_old_single_metric_url_still_opens_that_series(
    page: Page, dashboard_server: SpoolProcess
) -> None:
    metric = "instance/connections"
    sampled(dashboard_server, metric)
    page.goto(f"{dashboard_server.http_url}/history?metric={metric}&last=900")
    labels = page.locator("#chart-history .u-legend .u-series .u-label")
    expect(labels).to_have_text(["time (UTC)", metric])
    expect(page.locator("#summary tbody tr")).to_have_count(1)
    expect(page.locator("#summary")).to_contain_text(metric)


def test_without_a_series_in_the_url_it_opens_on_the_instance_rates(
    page: Page, dashboard_server: SpoolProcess
) -> None:
    # a client's series sort before the instance's ("clients/..." < "instance/...")
    with SyncClient(dashboard_server.ws_url, "aaa-history-client") as client:
        client.publish("history-rates", {"i": 1})
        client.flush()

        def listed() -> bool:
            names = api(dashboard_server, "/api/stats/metrics")["metrics"]
            return "clients/aaa-history-client/msgs_in_rate" in names

        wait_until(listed, timeout=30, message="the client's series listed")
        sampled(dashboard_server, "instance/msgs_out_rate")
        page.goto(f"{dashboard_server.http_url}/history")
        rates = ["instance/msgs_in_rate", "instance/msgs_out_rate"]
        labels = page.locator("#chart-history .u-legend .u-series .u-label")
        expect(labels).to_have_text(["time (UTC)", *rates])
        assert series_shown(page) == rates
        assert url_metrics(page) == rates
        expect(page.locator("#summary tbody tr")).to_have_count(2)


def test_from_and_to_are_utc_in_24_hour_form_on_a_browser_in_another_time_zone(
    zoned_page: Page, dashboard_server: SpoolProcess
) -> None:
    """A browser's own date-time input shows its locale (12-hour AM/PM in en-US) under a
    "(UTC)" label: the range fields are plain UTC text, 24-hour, and what is typed there
    is the range asked for."""
    metric = "instance/connections"
    page = zoned_page
    page.goto(f"{dashboard_server.http_url}/history?metric={metric}&last=3600")
    expect(page.locator("#t1")).to_have_value(re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$"))
    shown = datetime.strptime(page.input_value("#t1"), "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)
    # UTC, not the browser's zone (five and a half hours away)
    assert abs(shown.timestamp() - datetime.now(UTC).timestamp()) < 3600

    page.fill("#t0", "2026-01-02 13:00:00")
    page.fill("#t1", "2026-01-02 14:30:00")
    with page.expect_request(lambda r: "/api/stats?" in r.url and "metric=" in r.url) as asked:
        page.press("#t1", "Enter")
    query = parse_qs(urlsplit(asked.value.url).query)
    assert (query["t0"], query["t1"]) == (["2026-01-02T13:00:00Z"], ["2026-01-02T14:30:00Z"])
    url = parse_qs(urlsplit(page.url).query)
    assert (url["t0"], url["t1"]) == (["2026-01-02 13:00:00"], ["2026-01-02 14:30:00"])
