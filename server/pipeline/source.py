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

from server.pipeline.arrow import SPARK_SCHEMA
from server.pipeline.catalog import Catalog
from server.pipeline.options import ReadOptions, parse_read, parse_stream, parse_write
from server.pipeline.partition import SlicePartition
from server.pipeline.planner import plan_scan
from server.pipeline.predicate import ScanPredicate
from server.pipeline.pushdown import push_filters
from server.pipeline.sink import SpoolWriter
from server.pipeline.stream import SpoolStreamReader

__all__ = ["SpoolDataSource", "SpoolReader", "register"]

log = logging.getLogger("spool.pipeline")


class SpoolReader(DataSourceReader):
    """Batch reader: plans slices on the driver, decodes them in the executors."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self.predicate = ScanPredicate()

    def pushFilters(self, filters: list[Filter]) -> list[Filter]:
        self.predicate, rest = push_filters(self.predicate, filters)
        return rest

    def partitions(self) -> Sequence[InputPartition]:
        o = self.options
        with Catalog.open(o.journal_dir, o.archive_dir, o.name) as catalog:
            plan = plan_scan(catalog, self.predicate, o.slice_bytes)
        for note in plan.notes:
            log.info("%s", note)
        return [SlicePartition(s, self.predicate, o.mode, o.batch_rows) for s in plan.slices]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, SlicePartition)
        return partition.read()


class SpoolDataSource(DataSource):
    """The ``spool`` format (see the module docstring and docs/pipeline.md)."""

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


def register(spark: SparkSession) -> None:
    """Make ``format("spool")`` available in ``spark`` (idempotent).

    Also turns on Python filter pushdown for the session, which the source needs (Spark
    refuses a source implementing ``pushFilters`` while it is off).
    """
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    spark.dataSource.register(SpoolDataSource)
