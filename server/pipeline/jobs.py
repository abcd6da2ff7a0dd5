"""The ``spool pipeline`` commands, run: session, scope, job, progress, report.

:mod:`.cli` parses the command line without importing Spark; this module does the rest
and turns the pipeline's errors into one line on stderr and exit code 2. Damaged spans
found on the way are listed on stderr and make the exit code 1, the output being
complete for everything else.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

from spool.server.expr import FilterSyntaxError
from spool.server.pipeline.errors import BadOption, PipelineError
from spool.server.pipeline.export import check_export, run_export
from spool.server.pipeline.grep import check_grep, run_grep
from spool.server.pipeline.progress import Progress
from spool.server.pipeline.scope import Scope
from spool.server.pipeline.session import spark_session
from spool.server.pipeline.stats import check_stats, interval_name, parse_intervals, run_stats
from spool.server.pipeline.tally import DamageReport, Tally

__all__ = ["run"]

EXIT_OK, EXIT_DAMAGE, EXIT_USAGE = 0, 1, 2


def _conf(pairs: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise BadOption("--conf", pair, "KEY=VALUE")
        out[key.strip()] = value
    return out


def _report(command: str, damage: list[DamageReport]) -> int:
    for d in damage:
        lost = f"{d.records} records" if d.records is not None else "the rest of the journal"
        print(
            f"spool pipeline {command}: damaged journal {d.journal} at offset {d.offset}: "
            f"{d.reason}; {d.nbytes} bytes skipped ({lost} from seq {d.first_seq})",
            file=sys.stderr,
        )
    return EXIT_DAMAGE if damage else EXIT_OK


@contextmanager
def _output(path: Path | None) -> Iterator[IO[bytes]]:
    if path is None:
        yield sys.stdout.buffer
    else:
        with open(path, "wb") as fh:
            yield fh


def run(command: str, args: argparse.Namespace) -> int:
    """Run one ``spool pipeline`` command; returns its exit code."""
    try:
        conf = _conf(args.conf)
        intervals = parse_intervals(args.intervals) if command == "stats" else ()
        scope = Scope.resolve(args.dir, args.archive, args.name, args.start, args.end)
        # every option is checked before Spark starts, which takes seconds
        if command == "stats":
            check_stats(args.db, args.parquet)
        elif command == "grep":
            check_grep(args.topic, args.filter_text, args.parquet)
        else:
            check_export(args.out, args.overwrite)
        spark = spark_session(args.master, f"spool-pipeline-{command}", conf)
        job: Callable[[], int] = {
            "stats": lambda: _stats(spark, scope, args, intervals),
            "grep": lambda: _grep(spark, scope, args),
            "export": lambda: _export(spark, scope, args),
        }[command]
        return job()
    except (PipelineError, FilterSyntaxError, OSError) as exc:
        print(f"spool pipeline {command}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except PySparkException as exc:
        print(f"spool pipeline {command}: Spark failed: {exc}", file=sys.stderr)
        return EXIT_USAGE


def _stats(
    spark: SparkSession, scope: Scope, args: argparse.Namespace, intervals: tuple[int, ...]
) -> int:
    tally = Tally(spark.sparkContext)
    with Progress(spark.sparkContext, tally, "stats", enabled=not args.quiet):
        result = run_stats(
            spark, scope, intervals=intervals, db=args.db, parquet=args.parquet, tally=tally
        )
    for row in sorted(result.summary, key=lambda r: str(r["interval"])):
        print(
            f"{row['interval']:>4}  {row['records']:>12,} records  {row['bytes']:>14,} bytes  "
            f"rate per window p50 {row['rate_p50']:,.1f}  p90 {row['rate_p90']:,.1f}  "
            f"p99 {row['rate_p99']:,.1f}  max {row['rate_max']:,.1f} /s"
        )
    where = []
    if args.db is not None:
        where.append(f"{result.samples:,} samples in {args.db} (run {result.run_id})")
    if args.parquet is not None:
        where.append(f"Parquet in {args.parquet}")
    print(
        f"stats: {result.records:,} records, seqs {result.first_seq}..{result.last_seq}, "
        f"{result.windows:,} windows ({', '.join(interval_name(i) for i in intervals)}): "
        + "; ".join(where),
        file=sys.stderr,
    )
    return _report("stats", result.damage)


def _grep(spark: SparkSession, scope: Scope, args: argparse.Namespace) -> int:
    tally = Tally(spark.sparkContext)
    with Progress(spark.sparkContext, tally, "grep", enabled=not args.quiet):
        if args.parquet is not None:
            result = run_grep(
                spark, scope, topic=args.topic, filter_text=args.filter_text,
                parquet=args.parquet, tally=tally,
            )  # fmt: skip
        else:
            with _output(args.out) as out:
                result = run_grep(spark, scope, topic=args.topic, filter_text=args.filter_text,
                                  out=out, tally=tally)  # fmt: skip
    print(f"grep: {result.matches:,} matches in {result.scanned:,} records", file=sys.stderr)
    return _report("grep", result.damage)


def _export(spark: SparkSession, scope: Scope, args: argparse.Namespace) -> int:
    tally = Tally(spark.sparkContext)
    with Progress(spark.sparkContext, tally, "export", enabled=not args.quiet):
        result = run_export(spark, scope, args.out, topic=args.topic, flatten=args.flatten,
                            overwrite=args.overwrite, tally=tally)  # fmt: skip
    print(f"export: {result.records:,} records to {args.out}", file=sys.stderr)
    return _report("export", result.damage)
