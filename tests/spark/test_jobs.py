"""The journal jobs: grep against spool.server.expr, export round trip, stats against Python."""

from __future__ import annotations

import base64
import io
import math
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

import httpx
import orjson
import pyarrow.dataset as ds
import pytest
from pyspark.sql import SparkSession

from spool.server.bookmarks import format_time_bookmark, format_timestamp_us
from spool.server.cli import main
from spool.server.expr import MessageView, compile_filter
from spool.server.pipeline.export import run_export
from spool.server.pipeline.grep import run_grep
from spool.server.pipeline.progress import Progress
from spool.server.pipeline.scope import Scope
from spool.server.pipeline.stats import run_stats
from spool.server.pipeline.statsdb import series_path
from spool.server.pipeline.tally import Tally
from tests.spark.conftest import INSTANCE, Journals, broker, env_without_java
from tests.support.server import ROOT

FILTERS = (
    "/qty > 50",
    "/qty BETWEEN 10 AND 20",
    "/sym = 'IBM'",
    "/sym IN ('MSFT', 'AAPL') AND /side = 'B'",
    "NOT /side = 'S'",
    "/px >= 104.5",
    "/sym LIKE '^Ü'",
    "UPPER(/sym) = 'AAPL'",
    "/tags[0] = 't3'",
    "/i % 7 = 0",
    "/qty > 90 OR /qty < 3",
    "/missing IS NULL AND /qty = 5",
    "/pad LIKE 'x{200,}'",
    "TOPIC() = 'md.ibm'",
    "TOPIC() LIKE '^audit' AND /qty < 40",
    "BOOKMARK() LIKE '7[|]$'",
    "TIMESTAMP() > '2000-01-01'",
    "/i BETWEEN 8000 AND 8100 OR /i = 15999",
    "/px * /qty > 9000",
    "/side = 'B' AND (/sym = 'IBM' OR /qty >= 96)",
)


def direct(journals: Journals, text: str) -> list[int]:
    """The oracle: spool.server.expr on every record, as the broker's replay evaluates it."""
    flt = compile_filter(text)
    return [
        r.seq
        for r in journals.records
        if flt.matches(
            MessageView(
                r.topic, r.body, bookmark=r.bookmark, timestamp=format_timestamp_us(r.timestamp_us)
            )
        )
    ]


def is_utf8(body: bytes) -> bool:
    try:
        body.decode()
    except UnicodeDecodeError:
        return False
    return True


def scope_of(j: Journals, **kw: str) -> Scope:
    return Scope.resolve(j.journal, j.archive, None, kw.get("start"), kw.get("end"))


def test_twenty_filters_equal_server_expr(spark: SparkSession, journals: Journals) -> None:
    recs = journals.records
    lo, hi = recs[7000], recs[11999]  # a range keeps the test to a couple of partitions
    scope = scope_of(journals, start=lo.bookmark, end=hi.bookmark)
    inside = Journals(journals.data, journals.journal, journals.archive,
                      [r for r in recs if lo.seq <= r.seq <= hi.seq])  # fmt: skip
    assert len(FILTERS) == 20
    for text in FILTERS:
        out = io.BytesIO()
        result = run_grep(spark, scope, filter_text=text, out=out)
        lines = [orjson.loads(line) for line in out.getvalue().splitlines()]
        expect = direct(inside, text)
        assert [ln["seq"] for ln in lines] == expect, text
        assert result.matches == len(expect) and result.scanned == len(inside.records)
        assert expect, f"{text} matches nothing: a useless oracle"


def test_grep_range_topic_and_output_shape(spark: SparkSession, journals: Journals) -> None:
    recs = journals.records
    # The three publishers interleave differently on every run: widen the range so that it
    # holds a body that is not UTF-8 on a topic the grep keeps, wherever that landed.
    binary = [r for r in recs if r.topic in ("orders", "audit/x") and not is_utf8(r.body)]
    inner = binary[len(binary) // 2]
    first, last = recs[min(3000, inner.seq - 2)], recs[max(7000, inner.seq)]
    scope = scope_of(journals, start=first.bookmark, end=format_time_bookmark(last.timestamp_us))
    out = io.BytesIO()
    run_grep(spark, scope, topic="^(orders|audit/.*)$", out=out)
    lines = [orjson.loads(line) for line in out.getvalue().splitlines()]
    # --to a time: up to the last record before the first one recorded after that time
    after = next(r.seq for r in recs if r.timestamp_us > last.timestamp_us)
    expect = [r for r in recs if first.seq <= r.seq < after and r.topic in ("orders", "audit/x")]
    assert [ln["seq"] for ln in lines] == [r.seq for r in expect]
    sample = next(ln for ln, r in zip(lines, expect, strict=True) if r.body.startswith(b"{"))
    assert set(sample) == {"seq", "bookmark", "timestamp", "topic", "data"}
    for ln, r in zip(lines, expect, strict=True):
        try:
            text = r.body.decode()
        except UnicodeDecodeError:
            assert base64.b64decode(ln["data_base64"]) == r.body and "data" not in ln
        else:
            assert ln["data"] == text and "data_base64" not in ln
    assert any("data_base64" in ln for ln in lines)


def test_export_round_trips_every_message(
    spark: SparkSession, journals: Journals, tmp_path: Path
) -> None:
    out = tmp_path / "export"
    result = run_export(spark, scope_of(journals), out, flatten="sym STRING, qty INT, px DOUBLE")
    assert result.records == len(journals.records) and not result.damage
    table = ds.dataset(out, format="parquet", partitioning="hive").to_table()
    rows = sorted(table.to_pylist(), key=lambda r: r["seq"])
    assert len(rows) == len(journals.records)
    topics = {p.name for p in out.iterdir() if p.is_dir()}
    assert topics == {f"topic={t}" for t in ("orders", "trades", "md.ibm", "audit%2Fx")}
    for row, rec in zip(rows, journals.records, strict=True):
        assert row["seq"] == rec.seq and row["bookmark"] == rec.bookmark
        assert row["data"] == rec.body and int(row["publisher_id"]) == rec.pub_hash
        assert row["corr_id"] == (rec.corr_id or None)
        assert str(row["date"]) == format_timestamp_us(rec.timestamp_us)[:10]
        if rec.body.startswith(b"{"):
            doc = orjson.loads(rec.body)
            assert (row["sym"], row["qty"]) == (doc["sym"], doc["qty"])
            assert math.isclose(row["px"], doc["px"])
        else:
            assert row["sym"] is None and row["qty"] is None


def oracle_windows(journals: Journals, seconds: int) -> dict[tuple[str, int], tuple[int, int]]:
    out: dict[tuple[str, int], list[int]] = defaultdict(lambda: [0, 0])
    for r in journals.records:
        w = (r.timestamp_us // 1_000_000) // seconds * seconds
        for key in ("all", r.topic):
            out[(key, w)][0] += 1
            out[(key, w)][1] += len(r.body)
    return {k: (v[0], v[1]) for k, v in out.items()}


def nearest_rank(values: list[int], slots: int, p: float) -> int:
    padded = sorted([0] * (slots - len(values)) + values)
    return padded[max(1, math.ceil(slots * p)) - 1]


def test_stats_equal_python_and_are_served_by_api_stats(
    spark: SparkSession, journals: Journals, tmp_path: Path
) -> None:
    proc = broker(tmp_path / "b").start()
    try:
        db = proc.workdir / "data" / "stats.db"
        result = run_stats(spark, scope_of(journals), intervals=(1, 60), db=db,
                           parquet=tmp_path / "stats")  # fmt: skip
        assert result.records == len(journals.records) and result.samples > 0
        windows = ds.dataset(tmp_path / "stats" / "windows").to_table().to_pylist()
        for seconds, name in ((1, "1s"), (60, "1m")):
            got = {
                (w["key"], w["window"]): (w["count"], w["bytes"])
                for w in windows
                if w["interval"] == name and w["dimension"] in ("all", "topics")
            }
            assert got == oracle_windows(journals, seconds)
        per_sec: dict[int, int] = Counter(r.timestamp_us // 1_000_000 for r in journals.records)
        minute = next(w for w in windows if w["interval"] == "1m" and w["dimension"] == "all")
        inside = [c for s, c in per_sec.items() if minute["window"] <= s < minute["window"] + 60]
        assert minute["rate_p50"] == nearest_rank(inside, 60, 0.5)
        assert minute["rate_p99"] == nearest_rank(inside, 60, 0.99)
        assert minute["rate_max"] == max(inside)
        pubs = {w["key"] for w in windows if w["dimension"] == "publishers"}
        assert pubs == {str(r.pub_hash) for r in journals.records}

        path = series_path(INSTANCE, "topics", "audit/x", "1s", "count")
        first = min(r.timestamp_us for r in journals.records) // 1_000_000
        last = max(r.timestamp_us for r in journals.records) // 1_000_000
        with httpx.Client(base_url=proc.http_url, timeout=30) as http:
            names = http.get("/api/stats/metrics").json()["metrics"]
            assert path in names
            answer = http.get(
                "/api/stats", params={"metric": path, "t0": str(first), "t1": str(last + 1)}
            )
            answer.raise_for_status()
            points = {int(t): v for t, v in answer.json()["points"]}
        audit = {w: c for (k, w), (c, _b) in oracle_windows(journals, 1).items() if k == "audit/x"}
        assert points == audit
    finally:
        proc.stop()


def test_cli_errors_are_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "spool.server.cli", "pipeline", "grep", str(tmp_path / "nope")],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"spool pipeline grep: journal directory {tmp_path / 'nope'} does not exist or is not a directory"
    ]


def test_cli_without_java(journals: Journals) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "spool.server.cli", "pipeline", "stats", str(journals.journal),
         "--archive", str(journals.archive), "--parquet", "/tmp/never"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False, env=env_without_java(),
    )  # fmt: skip
    assert done.returncode == 2
    assert "Spark needs Java 17 or newer: no java on PATH" in done.stderr


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["stats"], "give --db (the stats database) and/or --parquet DIR"),
        (["stats", "--parquet", "{taken}"], "exists already"),
        (["grep", "--parquet", "{taken}"], "exists already"),
        (["grep", "--topic", "("], "not a regular expression"),
        (["export", "{taken}"], "exists already (use --overwrite to replace it)"),
    ],
)
def test_cli_options_are_refused_before_spark_starts(
    journals: Journals, tmp_path: Path, argv: list[str], error: str
) -> None:
    """Without Java, Spark cannot start: the answer being about the options shows they were
    checked first (not after Spark's start-up, as a run that wastes it)."""
    taken = tmp_path / "taken"
    taken.mkdir()
    command, *rest = (a.format(taken=taken) for a in argv)
    done = subprocess.run(
        [sys.executable, "-m", "spool.server.cli", "pipeline", command, str(journals.journal),
         *rest, "--archive", str(journals.archive)],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False, env=env_without_java(),
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and error in done.stderr, done.stderr


def test_progress_line(spark: SparkSession, journals: Journals) -> None:
    tally = Tally(spark.sparkContext)
    out = io.StringIO()
    with Progress(spark.sparkContext, tally, "grep", out=out, every=0.05) as progress:
        run_grep(spark, scope_of(journals), filter_text="/qty = 1", out=io.BytesIO(), tally=tally)
        line = progress.line()
    assert line.startswith("grep: 16,000 records, ") and "records/s" in line
    assert out.getvalue().splitlines()[-1].startswith("grep: 16,000 records, ")


def test_cli_grep_in_process(
    spark: SparkSession, journals: Journals, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``spool pipeline grep`` end to end (the session is the test run's: getOrCreate)."""
    out = tmp_path / "found.jsonl"
    code = main(
        ["pipeline", "grep", str(journals.journal), "--archive", str(journals.archive),
         "--filter", "/sym = 'IBM' AND /qty = 7", "--out", str(out), "--quiet"]
    )  # fmt: skip
    err = capsys.readouterr().err
    assert code == 0, err
    got = [orjson.loads(line)["seq"] for line in out.read_bytes().splitlines()]
    assert got == direct(journals, "/sym = 'IBM' AND /qty = 7")
    assert "matches in 16,000 records" in err
