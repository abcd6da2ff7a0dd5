"""Alembic environment of the stats database.

Spool runs migrations programmatically (server/stats/db.py passes an open connection in
``config.attributes["connection"]``); ``alembic -c alembic.ini ...`` from the repository
root works too, for writing new revisions with ``--autogenerate``. ``render_as_batch``
makes ALTERs work on SQLite by rebuilding tables.
"""

from __future__ import annotations

from logging.config import fileConfig

from alembic import context
from sqlalchemy import Connection

from spool.server.stats.db import create_stats_engine
from spool.server.stats.models import Base

config = context.config
target_metadata = Base.metadata

if config.config_file_name is not None and config.attributes.get("connection") is None:
    fileConfig(config.config_file_name, disable_existing_loggers=False)


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=True,
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_offline() -> None:
    """Emit SQL to stdout (``alembic upgrade head --sql``)."""
    context.configure(
        url=config.get_main_option("sqlalchemy.url"),
        target_metadata=target_metadata,
        literal_binds=True,
        render_as_batch=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    """Migrate through the caller's connection, or one opened from ``sqlalchemy.url``."""
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    url = config.get_main_option("sqlalchemy.url") or ""
    prefix = "sqlite:///"
    if not url.startswith(prefix):
        raise SystemExit(f"stats database URL must be {prefix}PATH, got {url!r}")
    from pathlib import Path

    engine = create_stats_engine(Path(url[len(prefix) :]))
    try:
        with engine.begin() as conn:
            _run(conn)
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
