"""An input partition of the source, and how an executor reads it.

Spark pickles each :class:`SlicePartition` to the executor that reads it; everything the
read needs travels in it (the slice, the predicate, the damage mode), because a stream
reader's ``read`` must not rely on state kept between calls. :func:`read_slice` turns the
scanner's output into Arrow batches and applies ``mode`` to damage: PERMISSIVE gives one
row per damaged span (``damage`` set), DROPMALFORMED only logs it, FAILFAST raises.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from spool.server.pipeline.arrow import damage_batch, records_batch
from spool.server.pipeline.errors import DamagedJournal
from spool.server.pipeline.options import Mode
from spool.server.pipeline.planner import Slice
from spool.server.pipeline.predicate import ScanPredicate
from spool.server.pipeline.scanner import Columns, SliceScanner

__all__ = ["SlicePartition", "read_slice"]

log = logging.getLogger("spool.pipeline")


class SlicePartition(InputPartition):
    """One slice to read, with the predicate and damage mode of its scan."""

    def __init__(self, s: Slice, predicate: ScanPredicate, mode: Mode, batch_rows: int) -> None:
        super().__init__(s.index)
        self.slice = s
        self.predicate = predicate
        self.mode = mode
        self.batch_rows = batch_rows

    def read(self) -> Iterator[pa.RecordBatch]:
        return read_slice(self.slice, self.predicate, self.mode, self.batch_rows)


def read_slice(
    s: Slice, predicate: ScanPredicate, mode: Mode, batch_rows: int
) -> Iterator[pa.RecordBatch]:
    """Arrow batches of one slice, damage handled by ``mode`` (executor side).

    Raises:
        DamagedJournal: damage with ``mode`` FAILFAST.
        UnreadableJournal: the journal cannot be read.
    """
    damage_rows = mode == "PERMISSIVE" and damage_visible(predicate)
    for item in SliceScanner(s, predicate, batch_rows).scan():
        if isinstance(item, Columns):
            yield records_batch(item)
            continue
        if mode == "FAILFAST":
            raise DamagedJournal(item.path, item.offset, item.reason)
        log.warning(
            "damaged journal %s at offset %d: %s (%d bytes, from seq %d)",
            item.path, item.offset, item.reason, item.nbytes, item.first_seq,
        )  # fmt: skip
        if damage_rows and predicate.seq_lo <= item.first_seq <= predicate.seq_hi:
            yield damage_batch(item)


def damage_visible(p: ScanPredicate) -> bool:
    """Whether damage rows pass ``p``: they have only ``seq``, ``journal``, ``offset`` and
    ``damage``, so a pushed condition on another column excludes them, as SQL's NULL
    comparisons would."""
    return (
        not p.bounds_time
        and p.topics is None
        and not p.topic_prefix
        and p.publishers is None
        and p.kinds is None
    )
