"""Stats database: the action_run table (the history of the configured actions).

Revision ID: 0004
Revises: 0003
Create Date: 2025-11-23
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "action_run",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("action", sa.String(length=64), nullable=False),
        sa.Column("trigger", sa.String(length=64), nullable=False),
        sa.Column("started", sa.Float(), nullable=False),
        sa.Column("finished", sa.Float(), nullable=False),
        sa.Column("outcome", sa.String(length=16), nullable=False),
        sa.Column("user", sa.String(length=128), nullable=True),
        sa.Column("record", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_action_run")),
    )
    op.create_index(
        "ix_action_run_action_started", "action_run", ["action", "started"], unique=False
    )


def downgrade() -> None:
    op.drop_index("ix_action_run_action_started", table_name="action_run")
    op.drop_table("action_run")
