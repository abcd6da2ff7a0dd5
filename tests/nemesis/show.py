"""Open nemesis reports in Chromium: each page must draw its three timelines without a
JavaScript error; a screenshot of each is saved.

``python -m tests.nemesis.show REPORT.html... [--png-dir DIR]`` prints one line per
report (its verdict, the charts drawn, the fault bands in the legend) and exits 1 when a
page did not draw or raised an error. The long runs' reports are looked at this way
(docs/nemesis.md "Long runs"); the browser tests check a generated report the same way.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path

from playwright.sync_api import Browser, Page, Playwright, sync_playwright
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS, PageErrors

__all__ = ["CHARTS", "Shown", "look", "main"]

#: the timelines a report draws (tests/nemesis/report.py)
CHARTS = ("chart-acked", "chart-latency", "chart-queue")


@dataclass
class Shown:
    """What a report page showed."""

    path: Path
    title: str
    verdict: str
    #: the timelines that drew a canvas
    charts: list[str] = field(default_factory=list)
    #: the fault kinds in the bands' legend
    legend: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return len(self.charts) == len(CHARTS) and not self.errors

    def line(self) -> str:
        state = "drawn" if self.ok else "NOT DRAWN"
        errors = f"; errors: {self.errors}" if self.errors else ""
        return (
            f"{self.path}: {self.verdict}, {len(self.charts)}/{len(CHARTS)} timelines "
            f"{state}, {len(self.legend)} fault kinds in the legend{errors}"
        )


def look(page: Page, report: Path, png: Path | None = None) -> Shown:
    """Load ``report`` in ``page``, wait for its timelines, and say what it shows
    (a screenshot of the top of the page, the timelines, to ``png``)."""
    errors = PageErrors(page)
    page.goto(report.resolve().as_uri())
    drawn = []
    for chart in CHARTS:
        canvas = page.locator(f"#{chart} canvas")
        try:
            canvas.first.wait_for(state="attached", timeout=10_000)
        except PlaywrightTimeout:
            continue  # a chart that never drew: reported
        drawn.append(chart)
    legend: list[str] = page.evaluate(
        """() => Array.from(document.querySelectorAll("#bands-legend .legend-band"))
            .map(band => band.nextSibling ? band.nextSibling.textContent : "")"""
    )
    verdict = page.locator("h1 span").first.inner_text()
    if png is not None:
        png.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(png))  # the heading and the three timelines
    return Shown(
        path=report, title=page.title(), verdict=verdict, charts=drawn, legend=legend,
        errors=list(errors.errors),
    )  # fmt: skip


def _browser(playwright: Playwright) -> Browser:
    return playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.nemesis.show", description=__doc__)
    parser.add_argument("reports", nargs="+", type=Path)
    parser.add_argument("--png-dir", type=Path, help="where the screenshots go")
    args = parser.parse_args(argv)
    ok = True
    with sync_playwright() as playwright:
        browser = _browser(playwright)
        try:
            for report in args.reports:
                page = browser.new_page(viewport={"width": 1400, "height": 900})
                png = None
                if args.png_dir is not None:
                    png = args.png_dir / f"{report.parent.name or report.stem}.png"
                shown = look(page, report, png)
                page.close()
                print(shown.line())
                ok = ok and shown.ok
        finally:
            browser.close()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
