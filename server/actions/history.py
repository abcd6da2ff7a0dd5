"""Where an action's run records go: the stats database's ``action_run`` table.

Scheduled and on-demand runs store one record per run, event-driven actions one per
window and the failed firings they keep in full; both write through a
:class:`HistoryWriter`, which is what the history page and ``GET /api/actions/NAME/runs``
read back. A database that refuses a write (unavailable, locked, full) loses that record
and is reported once, until a write succeeds again: a run never fails because its record
could not be kept.
"""

from __future__ import annotations

import asyncio

import orjson

from spool.server.actions.results import RunRecord
from spool.server.operations import Operations
from spool.server.stats.actionruns import ActionRunRow

__all__ = ["HistoryWriter"]


class HistoryWriter:
    """The run records of action ``action``, one write at a time (the history keeps the
    order they were made in)."""

    def __init__(self, action: str, ops: Operations) -> None:
        self._action = action
        self._ops = ops
        self._lock = asyncio.Lock()
        self._failed = False

    async def store(self, record: RunRecord) -> None:
        """Write ``record`` (its id comes back into it); a failure is reported once until
        a write succeeds again."""
        data = record.to_dict()
        data["id"] = None  # the row's id, given back when the row is read
        row = ActionRunRow(
            self._action, record.trigger, record.started, record.finished or record.started,
            record.outcome or "failed", record.user, orjson.dumps(data).decode(),
        )  # fmt: skip
        try:
            async with self._lock:
                record.id = await self._ops.record_action_run(row)
        except Exception as exc:  # StatsUnavailable, a locked or full database
            if not self._failed:
                self._failed = True
                self._ops.events.emit(
                    "error", "actions", "history_write_failed", action=self._action,
                    error=f"{type(exc).__name__}: {exc}",
                )  # fmt: skip
            return
        self._failed = False
