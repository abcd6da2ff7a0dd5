"""Writing ``spool pipeline stats`` windows into a stats database (blocking, driver side).

The stats database of an instance (server/stats) holds named series of ``(time, value)``
samples; the dashboard's history page and ``GET /api/stats`` chart any of them. A stats
run adds its windows as series named
``pipeline/<instance>/<dimension>/<key>/<interval>/<field>`` (names percent-encoded as
every path segment of that database), sampled at each window's start, and records
itself in ``pipeline_run`` (migration 0002): the series point at the run that wrote them,
and the sampler's retention leaves them alone. Running stats again over the same
journals rewrites the same samples (a sample is keyed by series and time) and hands the
series to the new run.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from sqlalchemy import Engine, select, update
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from spool.server.stats.db import open_stats_engine
from spool.server.stats.models import Metric, PipelineRun, Sample
from spool.server.stats.series import segment

__all__ = ["FIELDS", "PipelineStatsWriter", "WindowRow", "series_path"]

FIELDS: Final = ("count", "bytes", "rate", "rate_p50", "rate_p99", "rate_max")
_CHUNK: Final = 20_000


@dataclass(frozen=True, slots=True)
class WindowRow:
    """One window of one key, as :func:`spool.server.pipeline.stats.stats_frames` gives it."""

    dimension: str
    key: str
    interval: str
    window: int
    count: int
    bytes: int
    rate: float
    rate_p50: float | None
    rate_p99: float | None
    rate_max: float | None


def series_path(instance: str, dimension: str, key: str, interval: str, name: str) -> str:
    """The metric path of one field of one key's windows."""
    return f"pipeline/{segment(instance)}/{dimension}/{segment(key)}/{interval}/{name}"


def _chunks(rows: Iterable[WindowRow], size: int) -> Iterator[list[WindowRow]]:
    chunk: list[WindowRow] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


class PipelineStatsWriter:
    """A stats database opened (and migrated) for one stats run.

    Args:
        path: the SQLite file (created if missing; an instance's ``Admin/FileName``).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._engine: Engine = open_stats_engine(path)
        self._run: int | None = None

    def close(self) -> None:
        self._engine.dispose()

    def begin(self, instance: str, source: str, intervals: list[str], started: float) -> int:
        """Record the run; returns its id."""
        with self._engine.begin() as conn:
            run_id = conn.execute(
                sqlite_insert(PipelineRun).returning(PipelineRun.id),
                {
                    "job": "stats", "instance": instance, "source": source,
                    "started_at": started, "records": 0, "intervals": ",".join(intervals),
                    "damaged_spans": 0,
                },
            ).scalar_one()  # fmt: skip
        self._run = int(run_id)
        return self._run

    def write_windows(self, instance: str, rows: Iterable[WindowRow]) -> int:
        """Store every field of every window; returns the samples written."""
        assert self._run is not None
        written = 0
        ids: dict[str, int] = {}
        for chunk in _chunks(rows, _CHUNK):
            samples: list[dict[str, float | int]] = []
            paths: dict[str, None] = {}
            for row in chunk:
                for name in FIELDS:
                    value = getattr(row, name)
                    if value is None or not math.isfinite(float(value)):
                        continue
                    path = series_path(instance, row.dimension, row.key, row.interval, name)
                    paths[path] = None
                    samples.append({"path": path, "ts": float(row.window), "value": float(value)})  # type: ignore[dict-item]
            with self._engine.begin() as conn:
                new = [p for p in paths if p not in ids]
                if new:
                    stmt = sqlite_insert(Metric)
                    conn.execute(
                        stmt.on_conflict_do_update(
                            index_elements=["path"], set_={"run_id": stmt.excluded.run_id}
                        ),
                        [{"path": p, "run_id": self._run} for p in new],
                    )
                    for start in range(0, len(new), 500):
                        part = new[start : start + 500]
                        for metric_id, path in conn.execute(
                            select(Metric.id, Metric.path).where(Metric.path.in_(part))
                        ):
                            ids[path] = metric_id
                ins = sqlite_insert(Sample)
                conn.execute(
                    ins.on_conflict_do_update(
                        index_elements=["metric_id", "ts"], set_={"value": ins.excluded.value}
                    ),
                    [
                        {"metric_id": ids[str(s["path"])], "ts": s["ts"], "value": s["value"]}
                        for s in samples
                    ],
                )
            written += len(samples)
        return written

    def finish(
        self,
        run_id: int,
        records: int,
        first_seq: int | None,
        last_seq: int | None,
        damaged_spans: int,
    ) -> None:
        """Close the run's record."""
        with self._engine.begin() as conn:
            conn.execute(
                update(PipelineRun)
                .where(PipelineRun.id == run_id)
                .values(
                    finished_at=time.time(),
                    records=records,
                    first_seq=first_seq,
                    last_seq=last_seq,
                    damaged_spans=damaged_spans,
                )
            )
