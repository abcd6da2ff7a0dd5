"""The ``spool`` format: ``spark.read`` / ``readStream`` / ``write`` over Spool journals.

::

    spark.read.format("spool").load("/var/lib/spool/journal")
    spark.readStream.format("spool").option("adminUrl", ...).option("pinOwner", ...).load(dir)
    df.write.format("spool").option("url", "ws://...").option("topic", "t").save()

:class:`SpoolDataSource` is the PySpark Python Data Source (``pyspark.sql.datasource``);
:func:`register` adds it to a session, and the top-level ``pyspark_spool`` module makes
Spark find it on its own wherever the package is installed. The batch reader plans its
input partitions on the driver from the journals' indexes (:mod:`.planner`), takes the
filters it can apply exactly (:mod:`.pushdown`), and decodes each partition in an executor
(:mod:`.scanner`) into Arrow record batches (:mod:`.arrow`). Damage follows ``mode``:
PERMISSIVE adds one row per damaged span (``damage`` set), DROPMALFORMED drops it (with a
warning in the executor's log), FAILFAST fails the task.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamReader,
    Filter,
    InputPartition,
)
from pyspark.sql.types import StructType

from spool.server.pipeline.arrow import SPARK_SCHEMA
from spool.server.pipeline.catalog import Catalog
from spool.server.pipeline.options import ReadOptions, parse_read, parse_stream, parse_write
from spool.server.pipeline.partition import SlicePartition
from spool.server.pipeline.planner import plan_scan
from spool.server.pipeline.positions import seq_at
from spool.server.pipeline.predicate import MAX_SEQ, ScanPredicate
from spool.server.pipeline.pushdown import push_filters
from spool.server.pipeline.sink import SpoolWriter
from spool.server.pipeline.stream import SpoolStreamReader

__all__ = ["PushdownDataSource", "PushdownReader", "SpoolDataSource", "SpoolReader", "register"]

log = logging.getLogger("spool.pipeline")


class SpoolReader(DataSourceReader):
    """Batch reader: plans slices on the driver, decodes them in the executors. The
    range options (``startingOffsets`` ... ``endingTimestamp``) narrow what it reads;
    Spark's filters do too in :class:`PushdownReader`."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self.predicate = ScanPredicate()

    def partitions(self) -> Sequence[InputPartition]:
        o = self.options
        with Catalog.open(o.journal_dir, o.archive_dir, o.name) as catalog:
            predicate = _ranged(self.predicate, o, catalog)
            plan = plan_scan(catalog, predicate, o.slice_bytes)
        for note in plan.notes:
            log.info("%s", note)
        return [SlicePartition(s, predicate, o.mode, o.batch_rows) for s in plan.slices]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, SlicePartition):
            return iter(())  # nothing planned: Spark still reads one partition, empty
        return partition.read()


class PushdownReader(SpoolReader):
    """The batch reader that also takes the filters of a query's WHERE clause it can apply
    exactly. Spark gives a reader filters only with
    ``spark.sql.python.filterPushdown.enabled``, and refuses one that implements
    ``pushFilters`` while that is off: :func:`register` sets it and registers the
    source that reads with this class."""

    def pushFilters(self, filters: list[Filter]) -> list[Filter]:
        self.predicate, rest = push_filters(self.predicate, filters)
        return rest


def _ranged(predicate: ScanPredicate, o: ReadOptions, catalog: Catalog) -> ScanPredicate:
    """``predicate`` narrowed to the read's range options."""

    def latest() -> int:
        return catalog.journals[-1].next_seq

    if o.starting is not None:
        predicate = predicate.seqs(seq_at(catalog, o.starting, "startingOffsets", latest), MAX_SEQ)
    if o.ending is not None:
        predicate = predicate.seqs(0, seq_at(catalog, o.ending, "endingOffsets", latest) - 1)
    if o.ts_lo is not None or o.ts_hi is not None:
        predicate = predicate.times(o.ts_lo, None if o.ts_hi is None else o.ts_hi - 1)
    return predicate


class SpoolDataSource(DataSource):
    """The ``spool`` format (see the module docstring and docs/pipeline.md), as Spark
    finds it by itself (``pyspark_spool``): it works in any session, without settings; a
    query's WHERE clause is applied by Spark after the read (the range options narrow
    the read itself)."""

    @classmethod
    def name(cls) -> str:
        return "spool"

    def schema(self) -> StructType:
        return SPARK_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        _same_schema(schema)
        return SpoolReader(parse_read(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        _same_schema(schema)
        return SpoolStreamReader(parse_stream(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        return SpoolWriter(parse_write(self.options), schema, overwrite)


def _same_schema(schema: StructType) -> None:
    """A user schema (``.schema(...)``) must be the source's: it cannot change the rows."""
    if schema.simpleString() != SPARK_SCHEMA.simpleString():
        raise ValueError(
            "the spool format has a fixed schema (docs/pipeline.md); select columns after "
            f"loading instead of passing a schema: got {schema.simpleString()}"
        )


class PushdownDataSource(SpoolDataSource):
    """The ``spool`` format whose batch reader takes the filters of a query's WHERE
    clause it can apply exactly, skipping index blocks (seq, time, topic, publisher and
    kind conditions). Registered by :func:`register`, which turns on the setting Spark
    needs for it."""

    def reader(self, schema: StructType) -> DataSourceReader:
        _same_schema(schema)
        return PushdownReader(parse_read(self.options))


def register(spark: SparkSession) -> None:
    """Make ``format("spool")`` available in ``spark`` with filter pushdown (idempotent):
    turns on Python filter pushdown for the session (Spark refuses a reader implementing
    ``pushFilters`` while it is off) and registers :class:`PushdownDataSource`, which
    takes the place of the source Spark found by itself."""
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    spark.dataSource.register(PushdownDataSource)
