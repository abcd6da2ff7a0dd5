"""A nemesis report (tests/nemesis/report.py) opened in Chromium: its three timelines
draw, with the faults as bands and each anomaly where it first shows, without a
JavaScript error, from the page alone (uPlot inlined: no server, no network).

The report is built from a small history written here: two publishers, a kill and a
partition, a queue consumer's acks, one anomaly.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import Page

from tests.nemesis.checker import Anomaly, Verdict
from tests.nemesis.history import Event
from tests.nemesis.report import write_reports
from tests.nemesis.run import Result, Settings
from tests.nemesis.schedule import draw_schedule
from tests.nemesis.show import CHARTS, look

pytestmark = pytest.mark.browser

NAMES = ("a", "b", "c")


def _history() -> list[Event]:
    events = []
    for t in range(60):
        for pub in ("pub-1", "pub-2"):
            events.append(
                Event("invoke", 1000.0 + t, t, pub, "publish", {"last": 10 * t + 10}, "a")
            )
            events.append(
                Event("ok", 1000.0 + t, t + 0.05, pub, "publish", {"upto": 10 * t + 10}, "a")
            )
        events.append(Event("ok", 1000.0 + t, t + 0.1, "qc-a", "ack", {"n": t}, "a"))
    faults = [(0, "kill", 10.0, 14.0), (1, "partition", 30.0, 40.0)]
    for index, kind, start, end in faults:
        value = {"index": index, "kind": kind, "shape": "one", "targets": ["b"]}
        events.append(Event("info", 1000.0 + start, start, "nemesis", "start", value, None))
        events.append(Event("info", 1000.0 + end, end, "nemesis", "end", {"index": index}, None))
    return sorted(events, key=lambda e: e.mono)


def _result(anomalies: list[Anomaly]) -> Result:
    settings = Settings(minutes=1.0, seed=7, instances=3)
    return Result(
        settings=settings,
        schedule=draw_schedule(7, NAMES, 60.0, ("kill", "partition")),
        verdict=Verdict(anomalies=anomalies, checked={"messages acknowledged": 1200}),
        elapsed_s=60.0, injected={"kill": 1, "partition": 1}, skipped={}, misses=[],
        recovery_s={"kill": [1.5], "partition": [0.5]}, network="namespaces",
    )  # fmt: skip


def test_a_report_draws_its_timelines_with_fault_bands_and_anomalies(
    page: Page, tmp_path: Path
) -> None:
    lost = Anomaly("lost", "1 acknowledged message missing on b", instance="b", time=42.0)
    paths = write_reports(_result([lost]), _history(), tmp_path / "report")
    shown = look(page, paths["html"], tmp_path / "report.png")
    assert shown.ok, shown.line()
    assert shown.charts == list(CHARTS)
    assert shown.verdict == "FAIL" and "seed 7" in shown.title
    assert {"kill", "partition"} <= set(shown.legend)
    # the data the timelines drew: acks per second, the bands, the anomaly's time
    data = page.evaluate("() => ({acked: D.acked, bands: D.bands, anomalies: D.anomalies})")
    assert sum(data["acked"]) == 2 * 600
    assert [(b["kind"], b["from"], b["to"]) for b in data["bands"]] == [
        ("kill", 10.0, 14.0),
        ("partition", 30.0, 40.0),
    ]
    assert data["anomalies"] == [42.0]
    assert page.get_by_text("1 acknowledged message missing on b", exact=True).is_visible()
    assert (tmp_path / "report.png").stat().st_size > 0


def test_a_clean_report_says_pass_and_lists_no_anomaly(page: Page, tmp_path: Path) -> None:
    paths = write_reports(_result([]), _history(), tmp_path / "report")
    shown = look(page, paths["html"])
    assert shown.ok, shown.line()
    assert shown.verdict == "PASS"
    assert page.evaluate("() => D.anomalies") == []
    assert page.locator("h2", has_text="Anomalies (0)").is_visible()
