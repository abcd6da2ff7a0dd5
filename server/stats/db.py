"""Opening the stats database: engine with SQLite pragmas, and Alembic migrations at start.

The schema is owned by Alembic (top-level ``migrations/``); nothing calls
``metadata.create_all``. :func:`open_stats_engine` creates the file if needed and upgrades
it to ``head`` programmatically, so an instance upgraded to a newer Spool migrates its
stats database on the next start. Everything here blocks: call it from a thread
(``asyncio.to_thread``), never on the event loop.

Pragmas on every connection: ``journal_mode=WAL`` (readers never block the sampler's
writes), ``synchronous=NORMAL`` (statistics may lose the last commit on power loss, which is
acceptable, and a commit costs microseconds instead of an fsync), ``foreign_keys=ON`` and a
``busy_timeout`` so a truncate from the admin API waits for a running write.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Final

from alembic import command
from alembic.config import Config as AlembicConfig
from sqlalchemy import Engine, create_engine, event

from spool.server.resources import MIGRATIONS, resource_dir

BUSY_TIMEOUT_MS: Final = 10_000

# Two openers of the same file in one process (sampler and admin API) must not race on the
# first migration ("table already exists"); Alembic's version table serialises processes.
_migrate_lock = threading.Lock()


def sqlite_url(path: Path) -> str:
    """SQLAlchemy URL of a SQLite file."""
    return f"sqlite:///{path}"


def _on_connect(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    finally:
        cursor.close()


def create_stats_engine(path: Path) -> Engine:
    """An engine on ``path`` with the pragmas of the module docstring (no migration)."""
    engine = create_engine(sqlite_url(path))
    event.listen(engine, "connect", _on_connect)
    return engine


def alembic_config(url: str) -> AlembicConfig:
    """An Alembic configuration built in code (no alembic.ini needed at run time)."""
    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(resource_dir(MIGRATIONS)))
    cfg.set_main_option("sqlalchemy.url", url)
    return cfg


def upgrade_to_head(engine: Engine) -> None:
    """Run every pending migration on ``engine``'s database, in one transaction."""
    cfg = alembic_config(str(engine.url))
    with _migrate_lock, engine.begin() as connection:
        cfg.attributes["connection"] = connection
        command.upgrade(cfg, "head")


def open_stats_engine(path: Path) -> Engine:
    """Create the directory and file if needed, migrate to head, return the engine.

    Raises:
        OSError: the directory cannot be created.
        sqlalchemy.exc.SQLAlchemyError: the file is not a usable SQLite database.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    engine = create_stats_engine(path)
    try:
        upgrade_to_head(engine)
    except BaseException:
        engine.dispose()
        raise
    return engine
