"""The replication part of the REST admin API (docs/admin-api.md ``/api/replication``).

- ``GET /api/fabric``: the replication graph this instance sees (docs/admin-api.md).
- ``GET /api/fabric/route?topic=``: where a message of that topic published here goes.
- ``GET /api/bootstrap``: bootstrap progress.
- ``GET /api/replication``: destinations and incoming links.
- ``GET /api/replication/history``: one link's sampled history (stats database).
- ``GET /api/replication/events``: link events (stats database).
- ``POST /api/replication/{dest}/downgrade`` / ``upgrade`` / ``reconnect``.

An instance without replication answers 404 "replication is not configured on this
instance"; a downgrade or upgrade the link's state does not allow answers 409.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final

from starlette.requests import Request

from spool.server.operations import Operations
from spool.server.replication.errors import (
    DestinationNotFound,
    ReplicationNotConfigured,
    SyncChangeRefused,
)
from spool.server.stats.timeparse import format_time
from spool.web.api_errors import ApiError, BadRequest, Conflict, NotFound
from spool.web.openapi import Operation, QueryParam
from spool.web.params import EVENTS_MAX, TIME_HELP, int_param, time_window

__all__ = ["ReplicationApi", "replication_error"]

NOT_CONFIGURED: Final = "replication is not configured on this instance"
#: longest topic a route trace takes (as a topic block's name)
TOPIC_MAX: Final = 1024
#: most samples one history answer holds
HISTORY_MAX: Final = 20_000

Handler = Callable[[Request], Awaitable[Any]]


def replication_error(exc: Exception) -> ApiError | None:
    """The REST error for a replication exception (None: not one of replication's)."""
    if isinstance(exc, DestinationNotFound):
        return NotFound(str(exc))
    if isinstance(exc, ReplicationNotConfigured):
        return NotFound(NOT_CONFIGURED)
    if isinstance(exc, SyncChangeRefused):
        return Conflict(str(exc))
    return None


def _direction(request: Request, default: str | None) -> str | None:
    direction = request.query_params.get("direction") or default
    if direction not in (None, "in", "out"):
        raise BadRequest("direction is in or out")
    return direction


class ReplicationApi:
    """Handlers of the replication endpoints for one broker."""

    def __init__(self, ops: Operations) -> None:
        self.ops = ops

    async def replication(self, request: Request) -> Any:
        return self.ops.replication_info()

    async def bootstrap(self, request: Request) -> Any:
        return self.ops.bootstrap_info()

    async def fabric(self, request: Request) -> Any:
        return self.ops.fabric_info()

    async def route(self, request: Request) -> Any:
        topic = request.query_params.get("topic")
        if not topic:
            raise BadRequest("topic is required (the topic a message is published to)")
        if len(topic) > TOPIC_MAX or any(ord(ch) < 32 for ch in topic):
            raise BadRequest(
                f"a topic is at most {TOPIC_MAX} characters without control characters"
            )
        return self.ops.fabric_route(topic)

    async def events(self, request: Request) -> Any:
        t0, t1 = time_window(request, self.ops.clock)
        direction = _direction(request, None)
        limit = int_param(request, "limit", 200, 1, EVENTS_MAX)
        rows = await self.ops.replication_events(
            t0, t1, request.query_params.get("link") or None, direction, limit
        )
        return {
            "t0": format_time(t0),
            "t1": format_time(t1),
            "events": [
                {"time": ts, "direction": d, "link": link, "event": e, "detail": detail}
                for ts, d, link, e, detail in rows
            ],
        }

    async def history(self, request: Request) -> Any:
        t0, t1 = time_window(request, self.ops.clock)
        link = request.query_params.get("link")
        if not link:
            raise BadRequest("link is required (a destination or source name)")
        direction = _direction(request, "out")
        assert direction is not None
        limit = int_param(request, "limit", 2000, 1, HISTORY_MAX)
        samples = await self.ops.link_history(t0, t1, link, direction, limit)
        return {"t0": format_time(t0), "t1": format_time(t1), "link": link,
                "direction": direction, "samples": samples}  # fmt: skip

    def _action(self, verb: str) -> Handler:
        act = {
            "downgrade": self.ops.downgrade_destination,
            "upgrade": self.ops.upgrade_destination,
            "reconnect": self.ops.reconnect_destination,
        }[verb]

        async def handler(request: Request) -> Any:
            dest = request.path_params["dest"]
            act(dest)
            info = self.ops.replication_info()
            found = next(d for d in info["destinations"] if d["name"] == dest)
            return {
                "ok": True,
                "destination": dest,
                "configured_sync_type": found["configured_sync_type"],
                "effective_sync_type": found["effective_sync_type"],
            }

        return handler

    def operations(self) -> list[tuple[Operation, Handler]]:
        """The table rows (web/admin.py wraps them)."""
        tag = "replication"
        window = (
            QueryParam("t0", f"window start ({TIME_HELP}); default t1 - 1h"),
            QueryParam("t1", f"window end ({TIME_HELP}); default now"),
        )
        rows: list[tuple[Operation, Handler]] = [
            (
                Operation(
                    "GET", "/api/fabric",
                    "The replication graph this instance sees: instances, groups, links", tag,
                ),
                self.fabric,
            ),
            (
                Operation(
                    "GET", "/api/fabric/route",
                    "Where a message of a topic published here goes: the instances it "
                    "reaches, by which links, sync or async, and what stops it", tag,
                    errors=(400,),
                    query=(
                        QueryParam("topic", f"the topic (1..{TOPIC_MAX} characters)",
                                   required=True),
                    ),
                ),
                self.route,
            ),
            (
                Operation(
                    "GET", "/api/bootstrap",
                    "Bootstrap progress: state, source, records, bytes, rate, ETA", tag,
                ),
                self.bootstrap,
            ),
            (
                Operation(
                    "GET", "/api/replication", "Replication destinations and incoming links",
                    tag, errors=(404,),
                ),
                self.replication,
            ),
            (
                Operation(
                    "GET", "/api/replication/history",
                    "One replication link's sampled history (state, sync type, lag, rate)", tag,
                    errors=(400, 404, 503),
                    query=(
                        QueryParam("link", "a destination or source name", required=True),
                        QueryParam("direction", "out (a destination, default) or in (a source)"),
                        *window,
                        QueryParam("limit", "most samples (newest kept)", type="integer",
                                   minimum=1, maximum=HISTORY_MAX),
                    ),
                ),
                self.history,
            ),
            (
                Operation(
                    "GET", "/api/replication/events",
                    "Replication link events from the stats database", tag,
                    errors=(400, 404, 503),
                    query=(
                        QueryParam("link", "one destination or source"),
                        QueryParam("direction", "out (destinations) or in (sources)"),
                        *window,
                        QueryParam("limit", "1..1000, default 200 (the newest)",
                                   type="integer", minimum=1, maximum=EVENTS_MAX),
                    ),
                ),
                self.events,
            ),
        ]  # fmt: skip
        for verb, summary in (
            ("downgrade", "Persisted acks stop waiting for a sync destination, at once"),
            ("upgrade", "A downgraded destination is sync again once caught up"),
            ("reconnect", "Drop a destination's link and dial it again"),
        ):
            errors = (404, 409) if verb != "reconnect" else (404,)
            op = Operation(
                "POST", f"/api/replication/{{dest}}/{verb}", summary, tag, access="admin",
                errors=errors,
            )  # fmt: skip
            rows.append((op, self._action(verb)))
        return rows
