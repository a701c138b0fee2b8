"""Selections record the implementation that executed: a nullable ``selections.impl``.

Rows recorded before it keep ``NULL`` (unknown); the regression analysis treats an unknown
implementation as matching any, so older history is still compared as it was.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-09 10:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("selections", schema=None) as batch_op:
        batch_op.add_column(sa.Column("impl", sa.String(length=32), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("selections", schema=None) as batch_op:
        batch_op.drop_column("impl")
