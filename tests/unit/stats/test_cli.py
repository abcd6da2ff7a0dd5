"""`spool stats report|query`: CSV out, read-only in."""

from __future__ import annotations

import argparse
import csv
import io
from pathlib import Path

import pytest

from spool.server.stats.cli import register
from spool.server.stats.store import StatsStore
from spool.server.stats.timeparse import parse_time

T0 = parse_time("20240501T000000Z")


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser(prog="spool")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    code = args.func(args)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def db(tmp_path: Path) -> Path:
    store = StatsStore.open(tmp_path / "stats.db")
    store.writer.write(
        T0, {"clients/feed/msgs_in": 1.0, "clients/feedx/msgs_in": 9.0, "host/cpu_percent": 12.5}
    )
    store.writer.write(T0 + 10, {"clients/feed/msgs_in": 2.0})
    store.close()
    return tmp_path / "stats.db"


def test_report_everything(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["stats", "report", str(db)], capsys)
    assert code == 0
    rows = list(csv.reader(io.StringIO(out)))
    assert rows[0] == ["metric", "time", "value"]
    assert rows[1:] == [
        ["clients/feed/msgs_in", "2024-05-01T00:00:00.000Z", "1.0"],
        ["clients/feed/msgs_in", "2024-05-01T00:00:10.000Z", "2.0"],
        ["clients/feedx/msgs_in", "2024-05-01T00:00:00.000Z", "9.0"],
        ["host/cpu_percent", "2024-05-01T00:00:00.000Z", "12.5"],
    ]


def test_report_by_metric_prefix_and_since(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        ["stats", "report", str(db), "--metric", "clients/feed", "--since", "20240501T000005Z"],
        capsys,
    )
    assert code == 0
    assert out.splitlines()[1:] == ["clients/feed/msgs_in,2024-05-01T00:00:10.000Z,2.0"]


def test_report_bad_since(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["stats", "report", str(db), "--since", "soon"], capsys)
    assert code == 2 and "soon" in err


def test_query_prints_csv(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["stats", "query", str(db), "SELECT path FROM metric ORDER BY path"], capsys)
    assert code == 0
    assert out.splitlines() == [
        "path",
        "clients/feed/msgs_in",
        "clients/feedx/msgs_in",
        "host/cpu_percent",
    ]


def test_query_cannot_write(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["stats", "query", str(db), "DELETE FROM sample"], capsys)
    assert code == 2 and "readonly" in err.replace(" ", "").lower()
    store = StatsStore.open(db)
    try:
        assert len(store.reader.list_metrics()) == 3
    finally:
        store.close()


def test_missing_database(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["stats", "query", str(tmp_path / "nope.db"), "SELECT 1"], capsys)
    assert code == 2 and "no stats database" in err
