"""``spool pipeline stats``: traffic of the journals per topic, publisher and interval.

For each *dimension* (``all`` records, each ``topic``, each ``publisher`` id) and each
interval (default 1s, 1m, 1h), the records are bucketed into windows of the interval
(aligned on the Unix epoch, UTC, by the record's time) and each window gets:

- ``count``, ``bytes`` (body bytes) and ``rate`` (count / interval seconds);
- for intervals above a second, the percentiles of the per-second publish rate inside
  the window: ``rate_p50``, ``rate_p99``, ``rate_max`` (nearest rank over the window's
  seconds, the seconds without a record counting as 0).

And per dimension key and interval, a summary over the whole span of the journals (first
to last window, empty windows counting as 0): records, bytes, first and last time, and
the per-window rate's p50 / p90 / p99 / max.

Spark computes everything in the executors from a projection of the source (time,
topic, publisher, body size: no body is kept) cached for the several aggregations. The
windows go to the stats database (:mod:`.statsdb`: series the dashboard's history page
charts, ``pipeline/<instance>/<dimension>/<key>/<interval>/<field>``) and/or to Parquet
(``OUT/windows`` and ``OUT/summary``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from spool.server.pipeline.errors import BadOption
from spool.server.pipeline.scope import Scope
from spool.server.pipeline.statsdb import PipelineStatsWriter, WindowRow
from spool.server.pipeline.tally import DamageReport, Tally

__all__ = [
    "DEFAULT_INTERVALS",
    "DIMENSIONS",
    "StatsResult",
    "check_stats",
    "parse_intervals",
    "run_stats",
    "stats_frames",
]

DEFAULT_INTERVALS = (1, 60, 3600)
DIMENSIONS = ("all", "topics", "publishers")  # the order of ``keys`` in stats_frames
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_SUMMARY_PCTS = (("rate_p50", 0.5), ("rate_p90", 0.9), ("rate_p99", 0.99))


def parse_intervals(text: str) -> tuple[int, ...]:
    """``"1s,1m,1h"`` -> ``(1, 60, 3600)`` (seconds, ascending, distinct).

    Raises:
        BadOption: not a list of positive durations.
    """
    out: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        try:
            n, unit = (int(part[:-1]), part[-1]) if part[-1:] in _UNITS else (int(part), "s")
        except ValueError:
            raise BadOption("--intervals", text, "durations like 1s,1m,1h") from None
        if n <= 0:
            raise BadOption("--intervals", text, "durations must be positive")
        out.add(n * _UNITS[unit])
    if not out:
        raise BadOption("--intervals", text, "at least one duration")
    return tuple(sorted(out))


def interval_name(seconds: int) -> str:
    """``60`` -> ``1m`` (the name used in metric paths and Parquet rows)."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


@dataclass(slots=True)
class StatsResult:
    """What a stats run computed and saw."""

    records: int = 0
    nbytes: int = 0
    windows: int = 0
    samples: int = 0
    run_id: int | None = None
    first_seq: int | None = None
    last_seq: int | None = None
    damage: list[DamageReport] = field(default_factory=list)
    summary: list[dict[str, object]] = field(default_factory=list)


def _rank_value(values: Column, slots: Column, p: float) -> Column:
    """Nearest-rank percentile ``p`` of ``values`` padded with zeros up to ``slots``."""
    ordered = F.array_sort(values)
    zeros = slots - F.size(values)
    rank = F.greatest(F.lit(1), F.ceil(slots * F.lit(p)).cast("long"))
    return F.when(rank <= zeros, F.lit(0)).otherwise(
        F.element_at(ordered, (rank - zeros).cast("int"))
    )


def stats_frames(base: DataFrame, intervals: Sequence[int]) -> tuple[DataFrame, DataFrame]:
    """``(windows, summary)`` frames from ``base`` (columns sec, topic, publisher_id, size).

    Three aggregations whatever the number of dimensions and intervals: records to
    per-second counts per dimension key (each record counted under ``all``, its topic and
    its publisher, by one ``explode``), seconds to windows of every interval (one more
    ``explode``), windows to the summary.

    windows: dimension, key, interval, window (epoch seconds), count, bytes, rate,
    rate_p50, rate_p99, rate_max. summary: dimension, key, interval, records, bytes,
    first, last (epoch seconds), windows, rate_p50, rate_p90, rate_p99, rate_max.
    """
    keys = F.array(
        F.struct(F.lit("all").alias("dimension"), F.lit("all").alias("key")),
        F.struct(F.lit("topics").alias("dimension"), F.col("topic").alias("key")),
        F.struct(
            F.lit("publishers").alias("dimension"),
            F.col("publisher_id").cast("string").alias("key"),
        ),
    )
    per_sec = (
        base.select(F.explode(keys).alias("k"), "sec", "size")
        .groupBy(F.col("k.dimension").alias("dimension"), F.col("k.key").alias("key"), "sec")
        .agg(F.count(F.lit(1)).alias("count"), F.sum("size").alias("bytes"))
    )
    sizes = F.array(*[F.lit(i) for i in intervals])
    size = F.col("size")
    grouped = (
        per_sec.select("*", F.explode(sizes).alias("size"))
        .groupBy("dimension", "key", "size", (F.floor(F.col("sec") / size) * size).alias("window"))
        .agg(
            F.sum("count").alias("count"),
            F.sum("bytes").alias("bytes"),
            F.collect_list("count").alias("secs"),
            F.max("count").alias("peak"),
        )
    )
    above_1s = size > 1
    windows = grouped.select(
        "dimension",
        "key",
        _interval_name(size).alias("interval"),
        "size",
        "window",
        "count",
        "bytes",
        (F.col("count") / size).alias("rate"),
        F.when(above_1s, _rank_value(F.col("secs"), size, 0.5)).cast("double").alias("rate_p50"),
        F.when(above_1s, _rank_value(F.col("secs"), size, 0.99)).cast("double").alias("rate_p99"),
        F.when(above_1s, F.col("peak")).cast("double").alias("rate_max"),
    )
    span = ((F.max("window") - F.min("window")) / F.first("size") + 1).cast("long")
    summary = (
        windows.groupBy("dimension", "key", "interval")
        .agg(
            F.sum("count").alias("records"),
            F.sum("bytes").alias("bytes"),
            F.min("window").alias("first"),
            F.max("window").alias("last"),
            span.alias("windows"),
            F.collect_list(F.col("rate")).alias("rates"),
            F.max("rate").alias("rate_max"),
        )
        .select(
            "dimension",
            "key",
            "interval",
            "records",
            "bytes",
            "first",
            "last",
            "windows",
            *[
                _rank_value(F.col("rates"), F.col("windows"), p).cast("double").alias(n)
                for n, p in _SUMMARY_PCTS
            ],
            "rate_max",
        )
    )
    return windows.drop("size"), summary


def _interval_name(size: Column) -> Column:
    """:func:`interval_name` as a column expression."""
    out = F.concat(size.cast("string"), F.lit("s"))
    for unit, seconds in (("m", 60), ("h", 3600), ("d", 86400)):
        out = F.when(
            size % seconds == 0, F.concat((size / seconds).cast("long").cast("string"), F.lit(unit))
        ).otherwise(out)
    return out


def check_stats(db: Path | None, parquet: Path | None) -> None:
    """Where the statistics go, checked before any Spark work (``spool pipeline stats``
    calls it before it starts Spark).

    Raises:
        BadOption: neither output given, or ``parquet`` exists.
    """
    if db is None and parquet is None:
        raise BadOption("output", None, "give --db (the stats database) and/or --parquet DIR")
    if parquet is not None and parquet.exists():
        raise BadOption("--parquet", str(parquet), "exists already")


def run_stats(
    spark: SparkSession,
    scope: Scope,
    *,
    intervals: Sequence[int] = DEFAULT_INTERVALS,
    db: Path | None = None,
    parquet: Path | None = None,
    tally: Tally | None = None,
) -> StatsResult:
    """Compute the statistics of ``scope``; store them in ``db`` and/or ``parquet``.

    Raises:
        BadOption: neither output given, or ``parquet`` exists.
    """
    check_stats(db, parquet)
    started = time.time()
    tally = tally or Tally(spark.sparkContext)
    # the projection is cached with the damage rows in it: the records and the damage
    # report come from one scan, and no batch goes through Python a second time
    scanned = (
        scope.load(spark)
        .select(
            "seq",
            F.floor(F.unix_micros("timestamp") / F.lit(1_000_000)).cast("long").alias("sec"),
            "topic",
            "publisher_id",
            F.length("data").cast("long").alias("size"),
            "journal",
            "offset",
            "damage",
        )
        .persist(StorageLevel.MEMORY_AND_DISK)
    )
    base = scanned.where(F.col("damage").isNull())
    try:
        edges = base.agg(F.count(F.lit(1)), F.sum("size"), F.min("seq"), F.max("seq")).first()
        assert edges is not None
        result = StatsResult(
            records=int(edges[0]), nbytes=int(edges[1] or 0), first_seq=edges[2], last_seq=edges[3]
        )
        tally.records.add(result.records)
        tally.nbytes.add(result.nbytes)
        tally.add_damage(scanned.where(F.col("damage").isNotNull()).collect())
        windows, summary = stats_frames(base, intervals)
        windows = windows.persist(StorageLevel.MEMORY_AND_DISK)
        summary = summary.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            result.windows = windows.count()
            if parquet is not None:
                windows.write.parquet(str(parquet / "windows"))
                summary.write.parquet(str(parquet / "summary"))
            result.summary = [
                r.asDict() for r in summary.where(F.col("dimension") == "all").collect()
            ]
            result.damage = tally.damage
            if db is not None:
                writer = PipelineStatsWriter(db)
                try:
                    result.run_id = writer.begin(
                        scope.name, str(scope.journal_dir), [interval_name(i) for i in intervals],
                        started,
                    )  # fmt: skip
                    result.samples = writer.write_windows(scope.name, _window_rows(windows))
                    writer.finish(result.run_id, result.records, result.first_seq,
                                  result.last_seq, len(result.damage))  # fmt: skip
                finally:
                    writer.close()
        finally:
            windows.unpersist()
            summary.unpersist()
    finally:
        scanned.unpersist()
    return result


def _window_rows(windows: DataFrame) -> Iterator[WindowRow]:
    cols = ("dimension", "key", "interval", "window", "count", "bytes", "rate",
            "rate_p50", "rate_p99", "rate_max")  # fmt: skip
    for row in windows.select(*cols).toLocalIterator(prefetchPartitions=True):
        yield WindowRow(*row)
