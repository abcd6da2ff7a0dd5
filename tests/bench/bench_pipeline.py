"""Benchmarks of the Spark pipeline: the source, grep and stats over a log.

A log of 2,000,000 records of 100-byte JSON bodies over 4
topics and 3 publishers is written with the transaction log itself (64 MB journals, their
indexes sealed), then measured:

- ``python_scan_rows_per_s``: a plain Python scan of the same files with the record codec
  (``iter_file_records``, one process): the baseline;
- ``read_rows_per_s_local{1,2}``: the ``spool`` source, every row materialised (``sum(length
  (data))``), on ``local[1]`` and ``local[2]``;
- ``grep_rows_per_s_local{1,2}``: ``run_grep`` with ``/k = 7`` (10% match), log records
  scanned per second, JSON lines to memory;
- ``stats_rows_per_s_local{1,2}``: ``run_stats`` with 1s/1m/1h windows to Parquet;
- ``read_vs_python_scan_local{1,2}``: the source's read rate over the baseline.

``--quick`` measures 20,000 records on ``local[2]`` only, within ``QUICK_TIMEOUT_S`` (the
harness's 120 s for feature modules is too short here: a SparkSession alone takes 5-30 s
to start on the shared machine).

Each master gets a fresh SparkSession (its start-up is not measured); each figure is one
timed action after one warm-up action on that session. Numbers from a loaded 2-core
machine are indicative.
"""

from __future__ import annotations

import asyncio
import io
import json
import tempfile
import time
from pathlib import Path

from spool.server.config import TransactionLogConfig
from spool.server.pipeline.grep import run_grep
from spool.server.pipeline.scope import Scope
from spool.server.pipeline.session import spark_session
from spool.server.pipeline.stats import run_stats
from spool.server.txlog import TransactionLog
from spool.server.txlog.cli import iter_file_records

INSTANCE = "bench"
QUICK_TIMEOUT_S = 420
TOPICS = ("orders", "trades", "md.ibm", "audit")
RUN = 1000


def _body(i: int) -> bytes:
    head = b'{"k":%d,"i":%d,"pad":"' % (i % 10, i)
    return head + b"x" * (98 - len(head)) + b'"}'


async def _write(directory: Path, count: int) -> None:
    cfg = TransactionLogConfig(
        journal_directory=directory / "journal",
        archive_directory=directory / "archive",
        preallocated_files=1,
        journal_size=64 * 1024 * 1024,
    )
    log = TransactionLog(cfg, INSTANCE)
    await log.open()
    seqs = [0, 0, 0]
    i = 0
    while i < count:
        n = min(RUN, count - i)
        k = (i // RUN) % 3
        pub_seqs = list(range(seqs[k] + 1, seqs[k] + n + 1))
        seqs[k] += n
        done = log.append_many(
            topic=TOPICS[(i // RUN) % len(TOPICS)], message_type="json", pub_hash=100 + k,
            pub_seqs=pub_seqs, bodies=[_body(j) for j in range(i, i + n)],
        )  # fmt: skip
        assert done == n
        i += n
        if i % (RUN * 50) == 0:
            await log.wait_durable(log.last_seq)
    await log.close()


def _rate(count: int, seconds: float) -> float:
    return round(count / seconds, 1) if seconds > 0 else 0.0


def _python_scan(journal_dir: Path) -> int:
    n = 0
    for path in sorted(journal_dir.glob(f"{INSTANCE}.*.journal")):
        for _off, _rec in iter_file_records(path):
            n += 1
    return n


def run(quick: bool = False) -> dict[str, float]:
    count = 20_000 if quick else 2_000_000
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="spool-bench-pipeline-") as tmp:
        root = Path(tmp)
        asyncio.run(_write(root, count))
        journal = root / "journal"
        start = time.perf_counter()
        assert _python_scan(journal) == count
        base = _rate(count, time.perf_counter() - start)
        results["python_scan_rows_per_s"] = base
        scope = Scope.resolve(journal, root / "archive", INSTANCE)
        for cores in (2,) if quick else (1, 2):
            spark = spark_session(f"local[{cores}]", "spool-bench-pipeline")
            try:
                df = scope.load(spark)
                df.selectExpr("sum(length(data))").collect()  # warm-up
                start = time.perf_counter()
                df.selectExpr("sum(length(data))").collect()
                read = _rate(count, time.perf_counter() - start)
                results[f"read_rows_per_s_local{cores}"] = read
                results[f"read_vs_python_scan_local{cores}"] = round(read / base, 3)

                start = time.perf_counter()
                found = run_grep(spark, scope, filter_text="/k = 7", out=io.BytesIO())
                results[f"grep_rows_per_s_local{cores}"] = _rate(
                    found.scanned, time.perf_counter() - start
                )
                assert found.matches == count // 10

                start = time.perf_counter()
                stats = run_stats(spark, scope, parquet=root / f"stats{cores}")
                results[f"stats_rows_per_s_local{cores}"] = _rate(
                    stats.records, time.perf_counter() - start
                )
            finally:
                spark.stop()
    return results


if __name__ == "__main__":
    print(json.dumps(run(quick=True), indent=2))
