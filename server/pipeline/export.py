"""``spool pipeline export``: journals to Parquet, partitioned by topic and date.

Every record becomes a row with the source's columns (``data_text`` and ``damage``
aside: the body is kept as bytes, damage is reported, not exported), in a Parquet
dataset partitioned Hive-style by ``topic`` and ``date`` (UTC day of the record's time):
``OUT/topic=orders/date=2026-11-22/part-....parquet``. With ``--flatten``, JSON bodies
are also parsed by a given schema (a Spark DDL string such as ``"sym STRING, qty INT"``)
into columns of their own; a body that does not match gives NULLs there, never an error,
and its bytes are still in ``data``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
from pyspark.errors import ParseException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from spool.server.pipeline.errors import BadOption
from spool.server.pipeline.scope import Scope
from spool.server.pipeline.tally import DamageReport, Tally

__all__ = ["EXPORT_COLUMNS", "ExportResult", "check_export", "run_export", "topic_selector"]

#: the record columns written (the partition columns topic and date come last)
EXPORT_COLUMNS = (
    "seq", "bookmark", "publisher_id", "publisher_seq", "timestamp", "message_type", "kind",
    "path", "flags", "corr_id", "sow_key", "data", "journal", "offset",
)  # fmt: skip


@dataclass(slots=True)
class ExportResult:
    """What an export wrote and saw."""

    records: int = 0
    damage: list[DamageReport] = field(default_factory=list)


def _flatten_schema(ddl: str) -> StructType:
    expected = "a Spark DDL schema like 'sym STRING, qty INT'"
    try:
        schema = StructType.fromDDL(ddl)
    except (ParseException, ValueError) as exc:
        raise BadOption("--flatten", ddl, f"{expected} ({exc})") from exc
    if not isinstance(schema, StructType):
        raise BadOption("--flatten", ddl, expected)
    taken = set(EXPORT_COLUMNS) | {"topic", "date", "data_text", "damage"}
    clash = [f.name for f in schema.fields if f.name in taken]
    if clash:
        raise BadOption(
            "--flatten", ddl, f"fields {clash} collide with record columns; rename them"
        )
    return schema


def topic_selector(topic: str | None) -> Callable[[pa.RecordBatch], pa.RecordBatch]:
    """The rows of a batch whose topic matches ``topic`` (Python ``re.search``, as the
    broker's topic expressions and ``grep``; everything when None)."""
    if topic is None:
        return lambda batch: batch
    try:
        re.compile(topic)
    except re.error as exc:
        raise BadOption("--topic", topic, f"not a regular expression: {exc}") from exc

    def keep(batch: pa.RecordBatch) -> pa.RecordBatch:
        pattern = re.compile(topic)
        seen: dict[str, bool] = {}
        mask = []
        for t in batch.column("topic").to_pylist():
            ok = seen.get(t)
            if ok is None:
                ok = seen[t] = pattern.search(t) is not None
            mask.append(ok)
        return batch.filter(pa.array(mask, pa.bool_()))

    return keep


def check_export(out: Path, overwrite: bool) -> None:
    """Where an export goes, checked before any Spark work (``spool pipeline export``
    calls it before it starts Spark).

    Raises:
        BadOption: ``out`` exists and not ``overwrite``.
    """
    if out.exists() and not overwrite:
        raise BadOption("OUT", str(out), "exists already (use --overwrite to replace it)")


def run_export(
    spark: SparkSession,
    scope: Scope,
    out: Path,
    *,
    topic: str | None = None,
    flatten: str | None = None,
    overwrite: bool = False,
    tally: Tally | None = None,
) -> ExportResult:
    """Write ``scope``'s records to the Parquet dataset ``out``.

    Raises:
        BadOption: a bad ``flatten`` schema; ``out`` exists and not ``overwrite``.
    """
    check_export(out, overwrite)
    schema = _flatten_schema(flatten) if flatten else None
    tally = tally or Tally(spark.sparkContext)
    df = scope.load(spark)
    clean = df.mapInArrow(tally.wrap(topic_selector(topic)), df.schema)
    cols = [F.col(c) for c in EXPORT_COLUMNS]
    if schema is not None:
        parsed = F.from_json(F.col("data_text"), schema, {"mode": "PERMISSIVE"})
        cols += [parsed.getField(f.name).alias(f.name) for f in schema.fields]
    cols += [F.col("topic"), F.to_date(F.col("timestamp")).alias("date")]
    (
        clean.select(*cols)
        .write.mode("overwrite" if overwrite else "errorifexists")
        .partitionBy("topic", "date")
        .parquet(str(out))
    )
    return ExportResult(records=tally.records.value, damage=tally.damage)
