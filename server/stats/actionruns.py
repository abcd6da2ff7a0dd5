"""The history of action runs in the stats database (thread side, blocking).

Each run of a configured action is one ``action_run`` row (server/stats/models.py): a few
columns to list and filter by, and the whole run as JSON (its steps, their results, the
files touched), written by :mod:`spool.server.actions` and handed back as stored. The table is
bounded per action: after each insert, rows of that action beyond :data:`KEEP_PER_ACTION`
(the oldest) are deleted in the same transaction, so a ten-second schedule cannot grow the
database without end. Sample retention and ``truncate-statistics`` leave the table alone:
it is the record of what the broker did to its journals.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from sqlalchemy import Engine, delete, insert, select

from spool.server.stats.models import ActionRun

__all__ = ["KEEP_PER_ACTION", "ActionRunLog", "ActionRunRow", "StoredRun"]

#: Runs kept per action (the oldest beyond it are deleted as new ones are written).
KEEP_PER_ACTION: Final = 1000


@dataclass(frozen=True, slots=True)
class ActionRunRow:
    """A finished run to store (``record`` is its JSON, without the id)."""

    action: str
    trigger: str
    started: float
    finished: float
    outcome: str
    user: str | None
    record: str


@dataclass(frozen=True, slots=True)
class StoredRun:
    """A run as read back: its row id and its JSON."""

    id: int
    record: str


class ActionRunLog:
    """Writes and reads ``action_run`` rows.

    Args:
        engine: an engine from :func:`spool.server.stats.db.open_stats_engine`.
        keep: runs kept per action.

    Thread-safety: each call opens its own connection (SQLite serialises writers).
    """

    def __init__(self, engine: Engine, *, keep: int = KEEP_PER_ACTION) -> None:
        self._engine = engine
        self._keep = keep

    def append(self, row: ActionRunRow) -> int:
        """Store one run; returns its id. Older runs of the action beyond the bound go."""
        with self._engine.begin() as conn:
            result = conn.execute(
                insert(ActionRun).values(
                    action=row.action,
                    trigger=row.trigger,
                    started=row.started,
                    finished=row.finished,
                    outcome=row.outcome,
                    user=row.user,
                    record=row.record,
                )
            )
            key = result.inserted_primary_key
            assert key is not None
            run_id = int(key[0])
            cutoff = conn.execute(
                select(ActionRun.id)
                .where(ActionRun.action == row.action)
                .order_by(ActionRun.id.desc())
                .offset(self._keep)
                .limit(1)
            ).scalar()
            if cutoff is not None:
                conn.execute(
                    delete(ActionRun).where(ActionRun.action == row.action, ActionRun.id <= cutoff)
                )
        return run_id

    def recent(
        self, action: str | None = None, limit: int = 100, before_id: int | None = None
    ) -> list[StoredRun]:
        """The newest runs first (of one action, if given; older than ``before_id``)."""
        query = select(ActionRun.id, ActionRun.record).order_by(ActionRun.id.desc()).limit(limit)
        if action is not None:
            query = query.where(ActionRun.action == action)
        if before_id is not None:
            query = query.where(ActionRun.id < before_id)
        with self._engine.connect() as conn:
            return [StoredRun(int(i), str(r)) for i, r in conn.execute(query)]

    def last_of(self, action: str) -> StoredRun | None:
        """The newest run of ``action`` (its last run before this process started)."""
        runs = self.recent(action, 1)
        return runs[0] if runs else None
