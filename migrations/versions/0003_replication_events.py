"""Stats database: the replication_event table (what happened to each replication link).

Revision ID: 0003
Revises: 0002
Create Date: 2025-11-23
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "replication_event",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("ts", sa.Float(), nullable=False),
        sa.Column("direction", sa.String(length=8), nullable=False),
        sa.Column("link", sa.String(length=128), nullable=False),
        sa.Column("event", sa.String(length=32), nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_replication_event")),
    )
    op.create_index(
        "ix_replication_event_link_ts",
        "replication_event",
        ["direction", "link", "ts"],
        unique=False,
    )
    op.create_index(op.f("ix_replication_event_ts"), "replication_event", ["ts"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_replication_event_ts"), table_name="replication_event")
    op.drop_index("ix_replication_event_link_ts", table_name="replication_event")
    op.drop_table("replication_event")
