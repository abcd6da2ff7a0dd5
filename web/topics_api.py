"""The topic browser's part of the REST admin API: ``GET /api/topics`` and
``GET /api/event_topics`` (docs/admin-api.md).

Every topic the instance knows, one row each: the topics published to since the start (the
topic table's counters in the metrics snapshot), the SOW topics that have a store, the
configured queues and the event topics that are on. A row says what kind of topic it is
(``queue``, ``event``, ``sow`` or ``plain``, in that order when a name is more than one),
how many messages and body bytes were published to it since the start and per second now,
its SOW record count, its queue depth, and the replication destinations a message
published to it here goes to directly (this instance's links of ``GET /api/fabric/route``).

The rates are the newest ``topics/T/{msgs_in,bytes_in}_rate`` samples of the statistics
database (server/stats/series.py), read in a thread with one query; ``null`` while the
database is not open, 0 for a topic not sampled lately.

Topic names are what the user may see of a topic only when they may read it: the list
leaves out every topic the user's ``Read`` patterns do not match (web/entitlements.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Final, Literal, TypedDict

from starlette.requests import Request

from spool.server.operations import Operations
from spool.server.stats.series import segment
from spool.web.entitlements import read_check
from spool.web.openapi import Operation

__all__ = ["TopicRow", "TopicsApi"]

Handler = Callable[[Request], Awaitable[Any]]
Kind = Literal["plain", "sow", "queue", "event"]

_PREFIX: Final = "topics/"
#: sampling intervals back a rate sample may be and still count as now
_FRESH_INTERVALS: Final = 3


class TopicRow(TypedDict):
    """One topic of ``GET /api/topics``."""

    topic: str
    kind: Kind
    messages: int
    bytes: int
    messages_per_second: float | None
    bytes_per_second: float | None
    sow_records: int | None
    queue_depth: int | None
    destinations: list[str]


class TopicsApi:
    """Handler of the topic list for one broker."""

    def __init__(self, ops: Operations) -> None:
        self.ops = ops

    async def topics(self, request: Request) -> Any:
        rows = self._rows(read_check(request, self.ops.auth))
        rates = await self._rates()
        if rates is not None:
            for row in rows:
                name = segment(row["topic"])
                row["messages_per_second"] = rates.get(f"{_PREFIX}{name}/msgs_in_rate", 0.0)
                row["bytes_per_second"] = rates.get(f"{_PREFIX}{name}/bytes_in_rate", 0.0)
        return {"topics": rows}

    def _rows(self, readable: Callable[[str], bool]) -> list[TopicRow]:
        """Every known topic the user may read, in name order (on the loop: copies of
        broker state, and per topic a lookup in this instance's links)."""
        counters = self.ops.metrics_snapshot()["topics"]
        records = {t["topic"]: t["records"] for t in self.ops.sow_topics()}
        depths = {str(q["name"]): _int(q.get("depth")) for q in self.ops.queue_infos()}
        events = {str(t["topic"]) for t in self.ops.event_topics()}
        names = sorted(
            n for n in set(counters) | set(records) | set(depths) | events if readable(n)
        )
        rows: list[TopicRow] = []
        for name in names:
            traffic = counters.get(name)
            kind: Kind = (
                "queue" if name in depths else "event" if name in events
                else "sow" if name in records else "plain"
            )  # fmt: skip
            rows.append(
                {
                    "topic": name,
                    "kind": kind,
                    "messages": traffic["msgs_in"] if traffic else 0,
                    "bytes": traffic["bytes_in"] if traffic else 0,
                    "messages_per_second": None,
                    "bytes_per_second": None,
                    "sow_records": records.get(name),
                    "queue_depth": depths.get(name),
                    "destinations": self.ops.first_hops(name),
                }
            )
        return rows

    async def _rates(self) -> dict[str, float] | None:
        """The newest per-topic rate samples (None: the statistics database is not open)."""
        sampler = self.ops.sampler
        store = sampler.store if sampler is not None else None
        if store is None:
            return None
        since = self.ops.clock.time() - _FRESH_INTERVALS * self.ops.config.admin.interval
        return await asyncio.to_thread(store.reader.latest_values, _PREFIX, "_in_rate", since)

    async def event_topics(self, request: Request) -> Any:
        return {"event_topics": self.ops.event_topics()}

    def operations(self) -> list[tuple[Operation, Handler]]:
        """The table rows (web/admin.py wraps them)."""
        return [
            (
                Operation(
                    "GET",
                    "/api/event_topics",
                    "The event topics that are on: recorded or not, messages published, "
                    "dropped over the budget, refused",
                    "topics",
                    description=(
                        "Each event topic turned on by <EventTopics> (docs/protocol.md "
                        '"Event topics"), in name order: `recorded` (the transaction log '
                        "records it), `published`, `dropped` (over `max_events_per_second`), "
                        "`refused` (by the publish path) since the start, and `interval` "
                        "(the SOW samples' period; null for the others). Empty when none is on."
                    ),
                ),
                self.event_topics,
            ),
            (
                Operation(
                    "GET",
                    "/api/topics",
                    "Every topic the user may read: kind, messages, bytes, rates, "
                    "SOW records, queue depth, destinations",
                    "topics",
                    description=(
                        "Topics published to since the start, SOW topics with a store and "
                        "configured queues, in name order; a topic the user has no Read "
                        "entitlement for is left out. Rates are the newest samples of the "
                        "statistics database (null while it is not open)."
                    ),
                ),
                self.topics,
            ),
        ]


def _int(value: object) -> int:
    return value if isinstance(value, int) else 0
