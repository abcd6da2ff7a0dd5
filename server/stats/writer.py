"""Writes samples to the stats database and deletes old ones (thread side, blocking).

One :meth:`StatsWriter.write` is one transaction: the metric rows are upserted and looked
up, then every sample row is inserted, so a concurrent truncate (which also removes
metrics left without samples) can never leave a sample pointing at a deleted metric. The
lookup costs one indexed ``SELECT`` per tick instead of a cache that a truncate from
another writer could silently invalidate.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Final

from sqlalchemy import Connection, Engine, delete, exists, insert, select
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from spool.server.stats.models import LinkSample, Metric, ReplicationEvent, Sample

_CHUNK: Final = 500  # bound parameters per IN (...) list, well under SQLite's limit

#: a replication link event: (ts, direction, link, event, detail)
LinkEventRow = tuple[float, str, str, str, str]
#: one link at one tick: (direction, link, connected, effective sync type, messages behind,
#: seconds behind, msgs/s, position) - the tick's time is the sample's
LinkSampleRow = tuple[str, str, bool, str | None, int, float | None, float, int]


def _chunks(items: list[str], size: int) -> Iterable[list[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


class StatsWriter:
    """Inserts sample rows; see the module docstring for the transaction shape.

    Args:
        engine: an engine from :func:`spool.server.stats.db.open_stats_engine`.

    Thread-safety: each call opens its own connection; SQLite serialises writers (WAL),
    waiting up to the busy timeout.
    """

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def _metric_ids(self, conn: Connection, paths: list[str]) -> dict[str, int]:
        conn.execute(
            sqlite_insert(Metric).on_conflict_do_nothing(index_elements=["path"]),
            [{"path": p} for p in paths],
        )
        ids: dict[str, int] = {}
        for chunk in _chunks(paths, _CHUNK):
            for metric_id, path in conn.execute(
                select(Metric.id, Metric.path).where(Metric.path.in_(chunk))
            ):
                ids[path] = metric_id
        return ids

    def write(self, ts: float, values: Mapping[str, float]) -> int:
        """Store ``values`` (metric path -> value) at time ``ts``; returns rows written.

        Non-finite values (NaN, inf) are skipped: a gap is better than a lie. Writing the
        same (metric, ts) twice keeps the last value.
        """
        finite = {p: float(v) for p, v in values.items() if math.isfinite(v)}
        if not finite:
            return 0
        with self._engine.begin() as conn:
            ids = self._metric_ids(conn, sorted(finite))
            stmt = sqlite_insert(Sample)
            stmt = stmt.on_conflict_do_update(
                index_elements=["metric_id", "ts"], set_={"value": stmt.excluded.value}
            )
            conn.execute(
                stmt,
                [{"metric_id": ids[p], "ts": ts, "value": v} for p, v in finite.items()],
            )
        return len(finite)

    def truncate(self, before: float) -> int:
        """Delete samples older than ``before`` (epoch seconds) and metrics left empty.

        Series written by a pipeline run (``metric.run_id`` set) are kept: their samples
        carry the times of the journals they were computed from, old by nature.

        Returns:
            The number of sample rows deleted.
        """
        sampled = select(Metric.id).where(Metric.run_id.is_(None))
        with self._engine.begin() as conn:
            deleted = conn.execute(
                delete(Sample).where(Sample.ts < before, Sample.metric_id.in_(sampled))
            ).rowcount
            conn.execute(
                delete(Metric).where(
                    Metric.run_id.is_(None), ~exists().where(Sample.metric_id == Metric.id)
                )
            )
            conn.execute(delete(ReplicationEvent).where(ReplicationEvent.ts < before))
            conn.execute(delete(LinkSample).where(LinkSample.ts < before))
        return int(deleted or 0)

    def delete_series(self, paths: Sequence[str]) -> int:
        """Delete the sampler's series ``paths`` with all their samples.

        Batched: one transaction per :data:`_CHUNK` paths, so a long list never holds
        the database's write lock for long. Series of a pipeline run are left alone.

        Returns:
            The number of sample rows deleted.
        """
        deleted = 0
        for chunk in _chunks(sorted(paths), _CHUNK):
            ids = select(Metric.id).where(Metric.path.in_(chunk), Metric.run_id.is_(None))
            with self._engine.begin() as conn:
                deleted += conn.execute(delete(Sample).where(Sample.metric_id.in_(ids))).rowcount
                conn.execute(delete(Metric).where(Metric.path.in_(chunk), Metric.run_id.is_(None)))
        return deleted

    def write_link_events(self, rows: Sequence[LinkEventRow]) -> int:
        """Store replication link events (one transaction); returns rows written."""
        if not rows:
            return 0
        with self._engine.begin() as conn:
            conn.execute(
                insert(ReplicationEvent),
                [
                    {"ts": ts, "direction": d, "link": link, "event": e, "detail": detail}
                    for ts, d, link, e, detail in rows
                ],
            )
        return len(rows)

    def write_link_samples(self, ts: float, rows: Sequence[LinkSampleRow]) -> int:
        """Store one tick's link states (one transaction); returns rows written."""
        if not rows:
            return 0
        with self._engine.begin() as conn:
            conn.execute(
                insert(LinkSample),
                [
                    {"ts": ts, "direction": d, "link": link, "connected": int(up),
                     "effective_sync_type": sync, "messages_behind": behind,
                     "seconds_behind": seconds, "msgs_per_sec": rate, "position": position}
                    for d, link, up, sync, behind, seconds, rate, position in rows
                ],
            )  # fmt: skip
        return len(rows)
