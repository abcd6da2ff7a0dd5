"""``spark.readStream.format("spool")``: a live instance's journals as a stream.

Offsets are local sequences: ``{"seq": N}`` is "every record before N was read". A
micro-batch ``[start, end)`` is planned like a batch scan restricted to those seqs, so
re-running it after a failure (Spark replays the last planned batch from its checkpoint)
reads exactly the same records: journals never change below the durable point.

- **Latest offset**: with ``adminUrl``, the instance's durable seq + 1 (REST); records
  after it may still be lost in a crash and reused, so they are never read. Without
  ``adminUrl``, the end of the valid records in the files (for an instance that is not
  running; docs/pipeline.md explains the risk on a live one).
- **maxRecordsPerTrigger** caps a micro-batch (Spark's ``ReadMaxRows``), or
  **maxBytesPerTrigger** (``ReadMaxBytes``: whole index blocks, at least one);
  ``Trigger.AvailableNow`` reads up to the latest offset seen when the query started.
- **Retention**: with ``adminUrl`` the stream holds a pin named ``pinOwner`` at the first
  seq it still needs: taken at the start (and again after a restart), moved at each
  ``commit``. The pin outlives the query (a restart from the checkpoint needs the same
  journals); release it with ``POST /api/transaction_log/pins/{owner}/release`` when the
  query is retired.
- **Data loss**: a start below the oldest journal (removed before it was read) fails the
  query, unless ``failOnDataLoss`` is false (then it goes on from the oldest record).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from spool.server.pipeline.admin import AdminClient
from spool.server.pipeline.catalog import Catalog
from spool.server.pipeline.errors import RecordsRemoved
from spool.server.pipeline.options import StreamOptions
from spool.server.pipeline.partition import SlicePartition
from spool.server.pipeline.planner import plan_scan
from spool.server.pipeline.positions import seq_at
from spool.server.pipeline.predicate import ScanPredicate

__all__ = ["SpoolStreamReader"]

log = logging.getLogger("spool.pipeline")


class SpoolStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The stream reader (lives in Spark's driver-side Python process for the query)."""

    def __init__(self, options: StreamOptions) -> None:
        self.options = options
        self._admin: AdminClient | None = None
        self._target: int | None = None

    # the admin client holds a connection pool: never pickled to executors
    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options, "_admin": None, "_target": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    # -- sources of truth -----------------------------------------------------------------

    def _client(self) -> AdminClient | None:
        o = self.options
        if o.admin_url is None:
            return None
        if self._admin is None:
            self._admin = AdminClient(o.admin_url, o.admin_token)
        return self._admin

    def _catalog(self) -> Catalog:
        r = self.options.read
        return Catalog.open(r.journal_dir, r.archive_dir, r.name)

    def _end(self) -> int:
        """One past the last record a batch may read now."""
        admin = self._client()
        if admin is not None:
            return admin.position().durable_seq + 1
        with self._catalog() as catalog:
            return catalog.journals[-1].next_seq

    def _pin(self, seq: int) -> None:
        """Take or move the pin (every trigger: a restarted instance lost it)."""
        admin = self._client()
        if admin is None:
            return
        assert self.options.pin_owner is not None
        admin.pin(self.options.pin_owner, seq)

    # -- Spark's calls --------------------------------------------------------------------

    def initialOffset(self) -> dict[str, int]:
        start = self._starting()
        self._pin(start)
        return {"seq": start}

    def _starting(self) -> int:
        o = self.options
        with self._catalog() as catalog:
            if o.starting_ts is not None:
                return catalog.seq_for_time(o.starting_ts)
            return seq_at(catalog, o.starting, "startingOffsets", self._end)

    def getDefaultReadLimit(self) -> ReadLimit:
        o = self.options
        if o.max_records:
            return ReadMaxRows(o.max_records)
        if o.max_bytes:
            return ReadMaxBytes(o.max_bytes)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._end()

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        first = int(start["seq"])
        self._pin(first)  # again after a restart from a checkpoint
        end = self._end() if self._target is None else self._target
        if isinstance(limit, ReadMaxRows):
            end = min(end, first + limit.max_rows)
        elif isinstance(limit, ReadMaxBytes):
            with self._catalog() as catalog:
                end = min(end, bytes_end(catalog, first, limit.max_bytes))
        return {"seq": max(end, first)}

    def reportLatestOffset(self) -> dict[str, int]:
        return {"seq": self._end()}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        lo, hi = int(start["seq"]), int(end["seq"]) - 1
        if hi < lo:
            return []
        r = self.options.read
        with self._catalog() as catalog:
            if catalog.first_seq > lo:
                if self.options.fail_on_data_loss:
                    raise RecordsRemoved(lo, catalog.first_seq)
                log.warning("seqs %d..%d were removed before the stream read them", lo,
                            catalog.first_seq - 1)  # fmt: skip
                lo = catalog.first_seq
            plan = plan_scan(catalog, ScanPredicate(seq_lo=lo, seq_hi=hi), r.slice_bytes)
        predicate = ScanPredicate(seq_lo=lo, seq_hi=hi)
        return [SlicePartition(s, predicate, r.mode, r.batch_rows) for s in plan.slices]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, SlicePartition)
        return partition.read()

    def commit(self, end: dict[str, int]) -> None:
        self._pin(int(end["seq"]))

    def stop(self) -> None:
        if self._admin is not None:
            self._admin.close()
            self._admin = None


def bytes_end(catalog: Catalog, first: int, max_bytes: int) -> int:
    """The first seq not to read in a micro-batch from ``first`` that reads about
    ``max_bytes`` of journal: whole index blocks (the one holding ``first`` counted whole),
    as many as fit, and at least one, so every trigger moves on."""
    total = 0
    for journal in catalog.journals:
        for block in journal.blocks:
            if block.last_seq < first:
                continue
            if total and total + block.length > max_bytes:
                return block.first_seq
            total += block.length
    return catalog.journals[-1].next_seq if catalog.journals else first
