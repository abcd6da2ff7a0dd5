"""Stats database: the link_sample table (per-link history, sampled with the other stats).

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "link_sample",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("ts", sa.Float(), nullable=False),
        sa.Column("direction", sa.String(length=8), nullable=False),
        sa.Column("link", sa.String(length=128), nullable=False),
        sa.Column("connected", sa.Integer(), nullable=False),
        sa.Column("effective_sync_type", sa.String(length=8), nullable=True),
        sa.Column("messages_behind", sa.Integer(), nullable=False),
        sa.Column("seconds_behind", sa.Float(), nullable=True),
        sa.Column("msgs_per_sec", sa.Float(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_link_sample")),
    )
    op.create_index(
        "ix_link_sample_link_ts", "link_sample", ["direction", "link", "ts"], unique=False
    )
    op.create_index(op.f("ix_link_sample_ts"), "link_sample", ["ts"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_link_sample_ts"), table_name="link_sample")
    op.drop_index("ix_link_sample_link_ts", table_name="link_sample")
    op.drop_table("link_sample")
