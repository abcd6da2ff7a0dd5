"""The stats database of one instance: engine, writer and reader opened together.

The sampler opens it at start (migrations included) and the admin API uses the same object
for ``/api/stats`` and the truncate action; the actions record their runs in it. All methods block; callers on the event loop
wrap them in ``asyncio.to_thread``.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import Engine

from spool.server.stats.actionruns import ActionRunLog
from spool.server.stats.db import open_stats_engine
from spool.server.stats.query import StatsReader
from spool.server.stats.writer import StatsWriter


class StatsStore:
    """An open stats database.

    Attributes:
        path: the SQLite file.
        engine: the SQLAlchemy engine (WAL, synchronous=NORMAL).
        writer: inserts and truncation.
        reader: series queries.
        action_runs: the history of action runs.
    """

    def __init__(self, path: Path, engine: Engine) -> None:
        self.path = path
        self.engine = engine
        self.writer = StatsWriter(engine)
        self.reader = StatsReader(engine)
        self.action_runs = ActionRunLog(engine)

    @classmethod
    def open(cls, path: Path) -> StatsStore:
        """Open (creating and migrating to head) the database at ``path``. Blocking."""
        return cls(path, open_stats_engine(path))

    def close(self) -> None:
        """Close every pooled connection. Blocking."""
        self.engine.dispose()
