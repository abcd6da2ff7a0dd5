"""Reads of the stats database: list the series, fetch one series over a time window.

Downsampling happens in SQL: with a ``step``, samples are grouped into buckets
``[t0 + k*step, t0 + (k+1)*step)`` and each bucket reports the average of its samples,
stamped with the bucket's start. Empty buckets are absent (the dashboard draws a gap).
Blocking: call from a thread.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Engine, Integer, cast, func, or_, select

from spool.server.protocol.errors import SpoolError
from spool.server.stats.models import LinkSample, Metric, ReplicationEvent, Sample


class UnknownMetric(SpoolError):
    """No series with this path exists in the stats database.

    Attributes:
        path: the requested metric path.
    """

    def __init__(self, path: str) -> None:
        super().__init__(f"no such metric: {path}")
        self.path = path


class StatsReader:
    """Queries over the stats tables.

    Args:
        engine: an engine from :func:`spool.server.stats.db.open_stats_engine`.
    """

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def list_metrics(self) -> list[str]:
        """Every metric path that has samples, sorted."""
        with self._engine.connect() as conn:
            return list(conn.scalars(select(Metric.path).order_by(Metric.path)))

    def last_samples(self, prefixes: Sequence[str]) -> list[tuple[str, float]]:
        """``(path, time of its newest sample)`` of every sampler series whose path starts
        with one of ``prefixes`` (a series without samples reports 0)."""
        if not prefixes:
            return []
        newest = (
            select(Sample.ts)
            .where(Sample.metric_id == Metric.id)
            .order_by(Sample.ts.desc())
            .limit(1)
            .scalar_subquery()
        )
        query = select(Metric.path, newest).where(
            Metric.run_id.is_(None),
            or_(*(Metric.path.startswith(p, autoescape=True) for p in prefixes)),
        )
        with self._engine.connect() as conn:
            return [(path, float(ts or 0.0)) for path, ts in conn.execute(query)]

    def latest_values(self, prefix: str, suffix: str, since: float) -> dict[str, float]:
        """The newest value since ``since`` of every sampler series whose path starts with
        ``prefix`` and ends with ``suffix`` (one query, however many series; a series
        without a sample since then is left out): ``path -> value``."""
        newest = (
            select(Sample.value)
            .where(Sample.metric_id == Metric.id, Sample.ts >= since)
            .order_by(Sample.ts.desc())
            .limit(1)
            .scalar_subquery()
        )
        query = select(Metric.path, newest).where(
            Metric.run_id.is_(None),
            Metric.path.startswith(prefix, autoescape=True),
            Metric.path.endswith(suffix, autoescape=True),
        )
        with self._engine.connect() as conn:
            return {path: float(value) for path, value in conn.execute(query) if value is not None}

    def query_series(
        self, metric_path: str, t0: float, t1: float, step: float | None = None
    ) -> list[tuple[float, float]]:
        """Samples of ``metric_path`` with ``t0 <= ts <= t1``, oldest first.

        Args:
            metric_path: the series.
            t0: window start, epoch seconds (inclusive).
            t1: window end, epoch seconds (inclusive).
            step: bucket width in seconds for averaging; None or 0 returns raw samples.

        Raises:
            UnknownMetric: no such series.
        """
        with self._engine.connect() as conn:
            metric_id = conn.scalar(select(Metric.id).where(Metric.path == metric_path))
            if metric_id is None:
                raise UnknownMetric(metric_path)
            window = (Sample.metric_id == metric_id) & Sample.ts.between(t0, t1)
            if not step:
                rows = conn.execute(
                    select(Sample.ts, Sample.value).where(window).order_by(Sample.ts)
                )
                return [(float(ts), float(value)) for ts, value in rows]
            bucket = cast((Sample.ts - t0) / step, Integer).label("bucket")
            grouped = conn.execute(
                select(bucket, func.avg(Sample.value))
                .where(window)
                .group_by(bucket)
                .order_by(bucket)
            )
            return [(float(t0 + int(k) * step), float(avg)) for k, avg in grouped]

    def link_events(
        self,
        t0: float,
        t1: float,
        *,
        link: str | None = None,
        direction: str | None = None,
        limit: int = 1000,
    ) -> list[tuple[float, str, str, str, str]]:
        """Replication link events with ``t0 <= ts <= t1`` (newest ``limit``), oldest
        first, as ``(ts, direction, link, event, detail)``."""
        query = select(
            ReplicationEvent.ts,
            ReplicationEvent.direction,
            ReplicationEvent.link,
            ReplicationEvent.event,
            ReplicationEvent.detail,
        ).where(ReplicationEvent.ts.between(t0, t1))
        if link is not None:
            query = query.where(ReplicationEvent.link == link)
        if direction is not None:
            query = query.where(ReplicationEvent.direction == direction)
        query = query.order_by(ReplicationEvent.ts.desc(), ReplicationEvent.id.desc()).limit(limit)
        with self._engine.connect() as conn:
            rows = [(float(ts), d, lk, e, detail) for ts, d, lk, e, detail in conn.execute(query)]
        rows.reverse()
        return rows

    def link_history(
        self, t0: float, t1: float, *, link: str, direction: str, limit: int = 5000
    ) -> list[dict[str, object]]:
        """One link's samples with ``t0 <= ts <= t1`` (the newest ``limit``), oldest first."""
        query = (
            select(
                LinkSample.ts, LinkSample.connected, LinkSample.effective_sync_type,
                LinkSample.messages_behind, LinkSample.seconds_behind, LinkSample.msgs_per_sec,
                LinkSample.position,
            )
            .where(LinkSample.ts.between(t0, t1), LinkSample.link == link,
                   LinkSample.direction == direction)
            .order_by(LinkSample.ts.desc(), LinkSample.id.desc())
            .limit(limit)
        )  # fmt: skip
        with self._engine.connect() as conn:
            rows: list[dict[str, object]] = [
                {"time": float(ts), "connected": bool(up), "effective_sync_type": sync,
                 "messages_behind": int(behind), "seconds_behind": seconds,
                 "msgs_per_sec": float(rate), "position": int(position)}
                for ts, up, sync, behind, seconds, rate, position in conn.execute(query)
            ]  # fmt: skip
        rows.reverse()
        return rows
