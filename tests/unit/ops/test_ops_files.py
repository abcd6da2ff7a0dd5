"""The operations files (server/ops): the alert rules pass promtool's checks and its unit
tests (tests/unit/ops/alerts_test.yml: each alert fires on trouble after its ``for`` and
not on healthy series), every alert has such a test, the dashboard's queries are PromQL
and its layout is sound, and ``spool ops`` prints the files as shipped. The metric names
are checked against a real broker in tests/integration/test_ops_metrics.py."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from spool.server import ops
from spool.server.cli import main

ROOT = Path(__file__).resolve().parents[3]
OPS = ROOT / "server" / "ops"
ALERTS = OPS / "alerts.yml"
DASHBOARD = OPS / "grafana-dashboard.json"
ALERT_TESTS = Path(__file__).with_name("alerts_test.yml")


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("promtool")
    assert tool, "promtool is missing: `make test` installs it (Debian's prometheus package)"
    return subprocess.run([tool, *args], capture_output=True, text=True, timeout=120, check=False)


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def queries() -> list[str]:
    return [t["expr"] for p in dashboard()["panels"] for t in p.get("targets", [])]


def test_the_alert_rules_pass_promtools_check() -> None:
    done = promtool("check", "rules", str(ALERTS))
    assert done.returncode == 0, done.stdout + done.stderr


def test_each_alert_fires_on_trouble_and_not_on_healthy_series() -> None:
    done = promtool("test", "rules", str(ALERT_TESTS))
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_alert_has_a_unit_test() -> None:
    rules = yaml.safe_load(ALERTS.read_text())
    alerts = {r["alert"] for g in rules["groups"] for r in g["rules"]}
    cases = yaml.safe_load(ALERT_TESTS.read_text())
    tested = {
        check["alertname"]
        for case in cases["tests"]
        for check in case["alert_rule_test"]
        if check.get("exp_alerts")
    }
    assert alerts == tested


def test_the_dashboards_queries_are_promql(tmp_path: Path) -> None:
    """promtool parses each query as a recording rule (Grafana's variables given values)."""
    exprs = queries()
    assert exprs
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {
                        "record": f"dashboard:query_{i}",
                        "expr": e.replace("$instance", ".*").replace("$__rate_interval", "5m"),
                    }
                    for i, e in enumerate(exprs)
                ],
            }
        ]
    }
    path = tmp_path / "dashboard-rules.yml"
    path.write_text(yaml.safe_dump(rules))
    done = promtool("check", "rules", str(path))
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_dashboards_panels_are_laid_out_and_read_the_chosen_source() -> None:
    board = dashboard()
    panels = board["panels"]
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    taken: set[tuple[int, int]] = set()
    for p in panels:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24, p["title"]
        cells = {
            (x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])
        }
        assert not cells & taken, f"{p['title']} overlaps another panel"
        taken |= cells
        if p["type"] != "row":
            assert p["targets"] and p["datasource"]["uid"] == "${datasource}", p["title"]
            assert all(t["datasource"]["uid"] == "${datasource}" for t in p["targets"])
    names = {v["name"] for v in board["templating"]["list"]}
    assert names == {"datasource", "instance"}
    assert all('instance=~"$instance"' in e for e in queries())


@pytest.mark.parametrize(("what", "path"), [("alerts", ALERTS), ("grafana", DASHBOARD)])
def test_spool_ops_prints_each_file_as_shipped(
    what: str, path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert ops.read(what) == path.read_text()
    assert main(["ops", what]) == 0
    assert capsys.readouterr().out == path.read_text()
