"""``spark.readStream.format("spool")``: a live instance's journals as a stream.

Offsets are local sequences: ``{"seq": N}`` is "every record before N was read". A
micro-batch ``[start, end)`` is planned like a batch scan restricted to those seqs, so
re-running it after a failure (Spark replays the last planned batch from its checkpoint)
reads exactly the same records: journals never change below the durable point.

- **Latest offset**: with ``adminUrl``, the instance's durable seq + 1 (REST); records
  after it may still be lost in a crash and reused, so they are never read. Without
  ``adminUrl``, the end of the valid records in the files (for an instance that is not
  running; docs/pipeline.md explains the risk on a live one).
- **maxRecordsPerTrigger** caps a micro-batch (Spark's ``ReadMaxRows``); ``Trigger.
  AvailableNow`` reads up to the latest offset seen when the query started.
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
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from server.bookmarks import BookmarkPoint, Epoch, Now, TimePoint, parse_bookmark
from server.pipeline.admin import AdminClient
from server.pipeline.catalog import Catalog
from server.pipeline.errors import BadOption, RecordsRemoved
from server.pipeline.options import StreamOptions
from server.pipeline.partition import SlicePartition
from server.pipeline.planner import plan_scan
from server.pipeline.predicate import ScanPredicate
from server.protocol.errors import InvalidBookmark

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
        text = self.options.starting.strip()
        if text.lower() == "earliest":
            with self._catalog() as catalog:
                return catalog.first_seq
        if text.lower() == "latest":
            return self._end()
        if text.isdigit():
            return max(1, int(text))
        try:
            spec = parse_bookmark(text)
        except InvalidBookmark as exc:
            raise BadOption(
                "startingOffsets", text, f"earliest, latest, a seq, a bookmark or a time ({exc})"
            ) from exc
        with self._catalog() as catalog:
            if isinstance(spec, Epoch):
                return catalog.first_seq
            if isinstance(spec, Now):
                return self._end()
            if isinstance(spec, BookmarkPoint):
                seq = catalog.seq_for_bookmark(spec.pub_hash, spec.pub_seq)
                if seq is None:
                    raise BadOption("startingOffsets", text, "no record has this bookmark")
                return seq + 1  # a bookmark means "after this message", as a subscription
            if isinstance(spec, TimePoint):
                return catalog.seq_for_time(spec.timestamp_us)
        raise BadOption("startingOffsets", text, "earliest, latest, a seq, a bookmark or a time")

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.options.max_records
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._end()

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        first = int(start["seq"])
        self._pin(first)  # again after a restart from a checkpoint
        end = self._end() if self._target is None else self._target
        if isinstance(limit, ReadMaxRows):
            end = min(end, first + limit.max_rows)
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
