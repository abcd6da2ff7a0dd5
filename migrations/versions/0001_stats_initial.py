"""Stats database: metric and sample tables.

Revision ID: 0001
Revises:
Create Date: 2025-11-22
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "metric",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("path", sa.String(length=512), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_metric")),
        sa.UniqueConstraint("path", name=op.f("uq_metric_path")),
    )
    op.create_table(
        "sample",
        sa.Column("metric_id", sa.Integer(), nullable=False),
        sa.Column("ts", sa.Float(), nullable=False),
        sa.Column("value", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["metric_id"],
            ["metric.id"],
            name=op.f("fk_sample_metric_id_metric"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("metric_id", "ts", name=op.f("pk_sample")),
        sqlite_with_rowid=False,
    )
    op.create_index("ix_sample_ts", "sample", ["ts"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_sample_ts", table_name="sample")
    op.drop_table("sample")
    op.drop_table("metric")
