"""``spool pipeline grep``: journal search with the broker's own filter language.

Like AMPS's ``amps-grep``, but distributed: the journals are scanned by the ``spool``
source (seq range from ``--from`` / ``--to`` pushed down to index blocks), and each
executor runs, per Arrow batch, the topic regular expression and the content filter
compiled by :mod:`spool.server.expr` (``Filter.select`` over the batch, the same evaluation a
bookmark subscription's replay uses: ``TOPIC()``, ``BOOKMARK()`` and ``TIMESTAMP()``
as the broker sees them; ``CLIENT_NAME()`` is empty, the journal keeps only the
publisher's id). Output: JSON lines (``bookmark``, ``timestamp``, ``topic``, ``data``; a
body that is not UTF-8 as ``data_base64``), in log order, to a file or stdout; or a
Parquet dataset written by the executors.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import orjson
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from spool.server.bookmarks import format_timestamp_us
from spool.server.expr import compile_filter
from spool.server.pipeline.errors import BadOption
from spool.server.pipeline.scope import Scope
from spool.server.pipeline.tally import DamageReport, Tally

__all__ = ["GrepResult", "check_grep", "grep_frame", "run_grep"]

_OUT = pa.schema(
    [
        pa.field("seq", pa.int64(), nullable=False),
        pa.field("bookmark", pa.string()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("topic", pa.string()),
        pa.field("data", pa.binary()),
    ]
)
_OUT_DDL = "seq BIGINT NOT NULL, bookmark STRING, timestamp TIMESTAMP, topic STRING, data BINARY"


@dataclass(slots=True)
class GrepResult:
    """What a grep found and saw."""

    matches: int = 0
    scanned: int = 0
    damage: list[DamageReport] = field(default_factory=list)


def check_grep(topic: str | None, filter_text: str | None, parquet: Path | None = None) -> None:
    """A grep's options, checked before any Spark work (``spool pipeline grep`` calls it
    before it starts Spark).

    Raises:
        BadOption: a bad topic expression, or ``parquet`` exists; FilterSyntaxError: a bad
            filter (it says where).
    """
    if parquet is not None and parquet.exists():
        raise BadOption("--parquet", str(parquet), "exists already")
    if topic is not None:
        try:
            re.compile(topic)
        except re.error as exc:
            raise BadOption("--topic", topic, f"not a regular expression: {exc}") from exc
    if filter_text is not None:
        compile_filter(filter_text)  # FilterSyntaxError says where


def grep_frame(
    df: DataFrame, tally: Tally, topic: str | None, filter_text: str | None
) -> DataFrame:
    """The matching records of the source frame ``df`` (damage counted by ``tally``)."""
    check_grep(topic, filter_text)

    def select(batch: pa.RecordBatch) -> pa.RecordBatch | None:
        topics = batch.column("topic").to_pylist()
        indices: list[int] | range = range(len(topics))
        if topic is not None:
            pattern = re.compile(topic)
            seen: dict[str, bool] = {}
            keep: list[int] = []
            for i in indices:
                t = topics[i]
                ok = seen.get(t)
                if ok is None:
                    ok = seen[t] = pattern.search(t) is not None
                if ok:
                    keep.append(i)
            indices = keep
        if filter_text is not None and indices:
            flt = compile_filter(filter_text)
            bodies = batch.column("data").to_pylist()
            bookmarks = batch.column("bookmark").to_pylist()
            times = batch.column("timestamp").cast(pa.int64()).to_pylist()
            indices = flt.select(
                topics, bodies, indices, bookmarks.__getitem__,
                lambda i: format_timestamp_us(times[i]),
            )  # fmt: skip
        if not indices:
            return None
        picked = batch.take(pa.array(list(indices), pa.int64()))
        return pa.RecordBatch.from_arrays([picked.column(name) for name in _OUT.names], schema=_OUT)

    return df.mapInArrow(tally.wrap(select), _OUT_DDL)


def _json_line(row: dict[str, object]) -> bytes:
    data = row["data"]
    ts = row["timestamp"]
    out: dict[str, object] = {
        "seq": row["seq"],
        "bookmark": row["bookmark"],
        "timestamp": ts.strftime("%Y-%m-%dT%H:%M:%S.%fZ") if ts is not None else None,  # type: ignore[attr-defined]
        "topic": row["topic"],
    }
    assert isinstance(data, bytes | bytearray)
    try:
        out["data"] = bytes(data).decode()
    except UnicodeDecodeError:
        out["data_base64"] = base64.b64encode(data).decode()
    return orjson.dumps(out) + b"\n"


def run_grep(
    spark: SparkSession,
    scope: Scope,
    *,
    topic: str | None = None,
    filter_text: str | None = None,
    out: IO[bytes] | None = None,
    parquet: Path | None = None,
    tally: Tally | None = None,
) -> GrepResult:
    """Search ``scope``; write JSON lines to ``out`` (in log order) or Parquet to ``parquet``.

    Raises:
        BadOption: a bad topic expression, or ``parquet`` exists; FilterSyntaxError: a bad
            filter.
    """
    check_grep(topic, filter_text, parquet)
    tally = tally or Tally(spark.sparkContext)
    matches = grep_frame(scope.load(spark), tally, topic, filter_text)
    result = GrepResult()
    if parquet is not None:
        matches.write.mode("errorifexists").parquet(str(parquet))
        result.matches = spark.read.parquet(str(parquet)).count()
    else:
        assert out is not None
        for row in _rows(matches):
            out.write(_json_line(row))
            result.matches += 1
        out.flush()
    result.scanned = tally.records.value
    result.damage = tally.damage
    return result


def _rows(df: DataFrame) -> Iterator[dict[str, object]]:
    """Rows in partition order (= log order), one partition in the driver at a time."""
    for row in df.toLocalIterator(prefetchPartitions=True):
        yield row.asDict()
