"""Counting what a job's scan saw: records and damaged spans, through Spark accumulators.

The jobs run their per-batch work in ``mapInArrow`` functions on the executors; a
:class:`Tally` gives them accumulators (created on the driver) for the records scanned,
their bytes, and the damage rows of the source, and takes the damage rows out of the data.
Accumulators updated in transformations can count a retried task twice, so damage is kept
by ``(journal, offset)`` and the record count is only a progress figure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import Accumulator, AccumulatorParam, SparkContext

__all__ = ["DamageReport", "Tally"]


@dataclass(frozen=True, slots=True)
class DamageReport:
    """A damaged span the scan reported (see the source's ``damage`` column)."""

    journal: int
    offset: int
    first_seq: int
    reason: str
    nbytes: int
    records: int | None


class _Spans(AccumulatorParam[dict[tuple[int, int], DamageReport]]):
    def zero(
        self, value: dict[tuple[int, int], DamageReport]
    ) -> dict[tuple[int, int], DamageReport]:
        return {}

    def addInPlace(
        self, a: dict[tuple[int, int], DamageReport], b: dict[tuple[int, int], DamageReport]
    ) -> dict[tuple[int, int], DamageReport]:
        a.update(b)
        return a


class Tally:
    """Accumulators of one job (create on the driver, use in its functions)."""

    def __init__(self, sc: SparkContext) -> None:
        self.records: Accumulator[int] = sc.accumulator(0)
        self.nbytes: Accumulator[int] = sc.accumulator(0)
        self.spans: Accumulator[dict[tuple[int, int], DamageReport]] = sc.accumulator({}, _Spans())

    @property
    def damage(self) -> list[DamageReport]:
        """Damaged spans, in log order."""
        return sorted(self.spans.value.values(), key=lambda d: (d.journal, d.offset))

    def add_damage(self, rows: Iterable[Any]) -> None:
        """Damage rows collected on the driver (Spark ``Row``s with journal, offset, seq
        and damage)."""
        found: dict[tuple[int, int], DamageReport] = {}
        for row in rows:
            d = row["damage"]
            report = DamageReport(
                row["journal"], row["offset"], row["seq"], d["reason"], d["bytes"], d["records"]
            )
            found[(report.journal, report.offset)] = report
        self.spans.add(found)

    def split(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """Count ``batch`` and return it without its damage rows (executor side)."""
        damage = batch.column("damage")
        if damage.null_count == len(batch):
            self.records.add(len(batch))
            self.nbytes.add(batch.column("data").nbytes)
            return batch
        found: dict[tuple[int, int], DamageReport] = {}
        for row in batch.filter(pc.is_valid(damage)).to_pylist():
            d = row["damage"]
            report = DamageReport(
                row["journal"], row["offset"], row["seq"], d["reason"], d["bytes"], d["records"]
            )
            found[(report.journal, report.offset)] = report
        self.spans.add(found)
        good = batch.filter(pc.is_null(damage))
        self.records.add(len(good))
        self.nbytes.add(good.column("data").nbytes)
        return good

    def wrap(
        self, fn: Callable[[pa.RecordBatch], pa.RecordBatch | None]
    ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
        """A ``mapInArrow`` function: damage out, counted, then ``fn`` per batch."""

        def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for batch in batches:
                out = fn(self.split(batch))
                if out is not None and len(out):
                    yield out

        return run

    def summary(self) -> dict[str, Any]:
        return {
            "records": self.records.value,
            "bytes": self.nbytes.value,
            "damaged_spans": len(self.spans.value),
        }
