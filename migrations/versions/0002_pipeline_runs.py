"""Stats database: pipeline runs, and the series they wrote.

``spool pipeline stats`` writes per-topic / per-publisher series computed from journals
into the same ``metric`` / ``sample`` tables the dashboard charts; ``pipeline_run`` says
which run wrote them (``metric.run_id``), and retention leaves them alone.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "pipeline_run",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("job", sa.String(length=32), nullable=False),
        sa.Column("instance", sa.String(length=128), nullable=False),
        sa.Column("source", sa.String(length=1024), nullable=False),
        sa.Column("started_at", sa.Float(), nullable=False),
        sa.Column("finished_at", sa.Float(), nullable=True),
        sa.Column("records", sa.Integer(), nullable=False),
        sa.Column("first_seq", sa.Integer(), nullable=True),
        sa.Column("last_seq", sa.Integer(), nullable=True),
        sa.Column("intervals", sa.String(length=64), nullable=False),
        sa.Column("damaged_spans", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_pipeline_run")),
    )
    with op.batch_alter_table("metric") as batch:
        batch.add_column(sa.Column("run_id", sa.Integer(), nullable=True))
        batch.create_foreign_key(
            op.f("fk_metric_run_id_pipeline_run"),
            "pipeline_run",
            ["run_id"],
            ["id"],
            ondelete="CASCADE",
        )


def downgrade() -> None:
    with op.batch_alter_table("metric") as batch:
        batch.drop_constraint(op.f("fk_metric_run_id_pipeline_run"), type_="foreignkey")
        batch.drop_column("run_id")
    op.drop_table("pipeline_run")
