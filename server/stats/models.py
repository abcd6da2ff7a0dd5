"""SQLAlchemy tables of the stats database (SQLite; schema managed by Alembic in migrations/).

Two tables of samples (and the provenance of pipeline series, ``pipeline_run``), a narrow "entity-attribute-value" layout rather than one wide table per kind,
because the set of series changes at run time (clients and topics come and go) and a new
series must not need a migration:

``metric``
    one row per series: ``id`` (integer key) and ``path`` (unique text such as
    ``instance/msgs_in_rate``, ``host/cpu_percent``, ``clients/NAME/msgs_out``,
    ``txlog/durable_seq``, ``persisted_ack/p99_ms``; the path catalogue is in
    docs/admin-api.md). Names inside a path (client, topic, ...) are percent-encoded so a
    ``/`` in a topic cannot be confused with the separator.

``sample``
    one row per (series, sampling time): ``metric_id``, ``ts`` (float seconds since the
    Unix epoch, UTC) and ``value`` (float). The primary key ``(metric_id, ts)`` is the
    clustered key (``WITHOUT ROWID``), so a time-range read of one series is a single
    index range scan; ``ix_sample_ts`` serves retention deletes by age.

``action_run``
    one row per run of a configured action (the history of ``/api/actions``).
``replication_event``
    what happened to each replication link, one row per event (server/replication/
    history.py): ``ts``, ``direction`` (``out`` a destination, ``in`` a source),
    ``link`` (its name), ``event`` (connected, disconnected, refused, downgraded, ...) and
    ``detail`` (the why, with a validation failure's fix). Its numbers (messages and
    seconds behind, rates) are ordinary series (``replication/out/NAME/...``); the events
    are text and get their own table. Same retention as the samples.
``link_sample``
    the per-link history charted on the fabric page's link view: one row per replication
    link per sampling tick: ``ts``, ``direction``, ``link``, ``connected``, the
    ``effective_sync_type`` (a destination's; None for a source), ``messages_behind``,
    ``seconds_behind``, ``msgs_per_sec`` and ``position`` (acked). One row holds the
    link's whole state at that instant (a downgrade shows next to the lag it answered),
    which the per-series ``sample`` table cannot say for the sync type. Same retention as
    the samples.
"""

from __future__ import annotations

from sqlalchemy import Float, ForeignKey, Index, Integer, MetaData, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# Named constraints: Alembic batch mode (SQLite table rebuilds) needs stable names.
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    """Declarative base of the stats tables."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class PipelineRun(Base):
    """One run of ``spool pipeline stats`` that wrote series here (their provenance).

    Series a run wrote point at it (``metric.run_id``); the sampler's retention and the
    admin truncate leave them alone (their samples are historical by nature: the times of
    the journals they were computed from). Deleting a run deletes its series.
    """

    __tablename__ = "pipeline_run"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job: Mapped[str] = mapped_column(String(32))
    instance: Mapped[str] = mapped_column(String(128))
    source: Mapped[str] = mapped_column(String(1024))
    started_at: Mapped[float] = mapped_column(Float)
    finished_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    records: Mapped[int] = mapped_column(Integer, default=0)
    first_seq: Mapped[int | None] = mapped_column(Integer, nullable=True)
    last_seq: Mapped[int | None] = mapped_column(Integer, nullable=True)
    intervals: Mapped[str] = mapped_column(String(64))
    damaged_spans: Mapped[int] = mapped_column(Integer, default=0)


class Metric(Base):
    """A named time series (``run_id`` set: written by a pipeline run, not the sampler)."""

    __tablename__ = "metric"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    path: Mapped[str] = mapped_column(String(512), unique=True)
    run_id: Mapped[int | None] = mapped_column(
        Integer, ForeignKey("pipeline_run.id", ondelete="CASCADE"), nullable=True
    )


class Sample(Base):
    """One value of one series at one sampling time."""

    __tablename__ = "sample"
    __table_args__ = (
        Index("ix_sample_ts", "ts"),
        {"sqlite_with_rowid": False},
    )

    metric_id: Mapped[int] = mapped_column(
        Integer, ForeignKey("metric.id", ondelete="CASCADE"), primary_key=True
    )
    ts: Mapped[float] = mapped_column(Float, primary_key=True)
    value: Mapped[float] = mapped_column(Float)


class ActionRun(Base):
    """One run of a configured action (server/actions): who started it, when, how it ended.

    ``record`` is the run as the admin API shows it (JSON: the steps, their results, the
    files touched); the other columns are what lists and filters need without parsing it.
    Rows are kept per action up to a bound (server/stats/actionruns.py), not by the
    samples' retention: they are the audit trail of what the broker did to its own files.
    """

    __tablename__ = "action_run"
    __table_args__ = (Index("ix_action_run_action_started", "action", "started"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    action: Mapped[str] = mapped_column(String(64))
    trigger: Mapped[str] = mapped_column(String(64))
    started: Mapped[float] = mapped_column(Float)
    finished: Mapped[float] = mapped_column(Float)
    outcome: Mapped[str] = mapped_column(String(16))
    user: Mapped[str | None] = mapped_column(String(128), nullable=True)
    record: Mapped[str] = mapped_column(Text)


class ReplicationEvent(Base):
    """One event of one replication link."""

    __tablename__ = "replication_event"
    __table_args__ = (Index("ix_replication_event_link_ts", "direction", "link", "ts"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    ts: Mapped[float] = mapped_column(Float, index=True)
    direction: Mapped[str] = mapped_column(String(8))
    link: Mapped[str] = mapped_column(String(128))
    event: Mapped[str] = mapped_column(String(32))
    detail: Mapped[str] = mapped_column(Text)


class LinkSample(Base):
    """The state of one replication link at one sampling tick."""

    __tablename__ = "link_sample"
    __table_args__ = (Index("ix_link_sample_link_ts", "direction", "link", "ts"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    ts: Mapped[float] = mapped_column(Float, index=True)
    direction: Mapped[str] = mapped_column(String(8))
    link: Mapped[str] = mapped_column(String(128))
    connected: Mapped[int] = mapped_column(Integer)
    effective_sync_type: Mapped[str | None] = mapped_column(String(8), nullable=True)
    messages_behind: Mapped[int] = mapped_column(Integer)
    seconds_behind: Mapped[float | None] = mapped_column(Float, nullable=True)
    msgs_per_sec: Mapped[float] = mapped_column(Float)
    position: Mapped[int] = mapped_column(Integer)
