"""The statistics part of the REST admin API (docs/admin-api.md ``/api/stats``).

- ``GET /api/stats?metric=&t0=&t1=&step=``: one series from the stats database, averaged
  into ``step`` buckets (chosen so an answer holds at most :data:`AUTO_POINTS` points when
  none is given and the raw samples would be more).
- ``GET /api/stats/metrics``: the metric paths that exist, and the sampling interval.
- ``POST /api/stats/truncate``: delete samples before a time (``before``) or older than a
  duration (``older_than``).

SQLite work runs in a thread; a database that is not open answers 503.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable
from typing import Any, Final

from starlette.requests import Request

from spool.server.operations import Operations
from spool.server.stats.timeparse import format_time, parse_duration, parse_time
from spool.web.api_errors import BadRequest, NotReady
from spool.web.openapi import Operation, QueryParam
from spool.web.params import TIME_HELP, json_body, time_window

__all__ = ["StatsApi"]

#: largest series answer /api/stats gives
MAX_POINTS: Final = 10_000
#: points aimed at when no step is given and the raw samples would be more
AUTO_POINTS: Final = 1_000

Handler = Callable[[Request], Awaitable[Any]]


class StatsApi:
    """Handlers of the stats endpoints for one broker."""

    def __init__(self, ops: Operations) -> None:
        self.ops = ops

    def _store(self) -> Any:
        sampler = self.ops.sampler
        store = sampler.store if sampler is not None else None
        if store is None:
            raise NotReady("the statistics database is not open")
        return store

    async def metrics(self, request: Request) -> Any:
        store = self._store()
        paths = await asyncio.to_thread(store.reader.list_metrics)
        return {"metrics": paths, "interval": self.ops.config.admin.interval}

    async def series(self, request: Request) -> Any:
        params = request.query_params
        metric = params.get("metric")
        if not metric:
            raise BadRequest("the metric parameter is required (see /api/stats/metrics)")
        t0, t1 = time_window(request, self.ops.clock)
        window = t1 - t0
        step: float | None
        if params.get("step"):
            step = parse_duration(params["step"])
            if window / step > MAX_POINTS:
                raise BadRequest(
                    f"step {params['step']} gives more than {MAX_POINTS} points; use a larger one"
                )
        elif window / self.ops.config.admin.interval > MAX_POINTS:
            step = float(math.ceil(window / AUTO_POINTS))
        else:
            step = None
        store = self._store()
        points = await asyncio.to_thread(store.reader.query_series, metric, t0, t1, step)
        return {
            "metric": metric,
            "t0": format_time(t0),
            "t1": format_time(t1),
            "step": step,
            "points": [[ts, value] for ts, value in points],
        }

    async def truncate(self, request: Request) -> Any:
        body = await json_body(request)
        if ("before" in body) == ("older_than" in body):
            raise BadRequest('give exactly one of "before" (a time) or "older_than" (e.g. "7d")')
        if "before" in body:
            before = parse_time(str(body["before"]))
        else:
            before = self.ops.clock.time() - parse_duration(str(body["older_than"]))
        deleted = await self.ops.truncate_stats(before)
        return {"ok": True, "deleted_samples": deleted, "before": format_time(before)}

    def operations(self) -> list[tuple[Operation, Handler]]:
        """The table rows (web/admin.py wraps them)."""
        return [
            (
                Operation(
                    "GET", "/api/stats", "A time series from the stats database", "stats",
                    errors=(400, 404, 503),
                    query=(
                        QueryParam("metric", "metric path", required=True),
                        QueryParam("t0", f"window start ({TIME_HELP}); default t1 - 1h"),
                        QueryParam("t1", f"window end ({TIME_HELP}); default now"),
                        QueryParam("step", "bucket width (10s, 1m, or seconds); averages"),
                    ),
                ),
                self.series,
            ),
            (
                Operation("GET", "/api/stats/metrics", "Metric paths that exist", "stats",
                          errors=(503,)),
                self.metrics,
            ),
            (
                Operation(
                    "POST", "/api/stats/truncate", "Delete old samples", "stats",
                    access="admin", errors=(503,),
                    body={
                        "type": "object",
                        "properties": {
                            "before": {"type": ["string", "number"]},
                            "older_than": {"type": "string"},
                        },
                    },
                ),
                self.truncate,
            ),
        ]  # fmt: skip
