"""Each result records the node that ran it: nullable ``results.node`` and ``results.host``.

A job is one device variant; with its suite sharded across twin nodes (several nodes of one
variant, `farm run`), its results came from several machines, so each result names its own:
``node`` is the Ray node id, ``host`` that node's host name. Rows recorded before keep ``NULL``
(unknown), as do results ingested from a file that does not carry them.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-12 10:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("results", schema=None) as b:
        b.add_column(sa.Column("node", sa.String(length=200), nullable=True))
        b.add_column(sa.Column("host", sa.String(length=200), nullable=True))


def downgrade() -> None:
    # Native DROP COLUMN (SQLite >= 3.35, PostgreSQL): a batch rebuild of ``results`` would drop
    # the old table and cascade into its measurements, selections and fingerprints.
    for column in ("host", "node"):
        op.execute(f"ALTER TABLE results DROP COLUMN {column}")
