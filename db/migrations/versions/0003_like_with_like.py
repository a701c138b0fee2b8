"""Like with like: baselines per (suite, device variant), selections tagged with their role, the
run's context (what changes dispatch), an ingest digest, and the full output of a failure.

- ``baselines`` gains ``suite`` and its key becomes (suite, variant_key): a baseline set on an
  m8-parity run says nothing about numeric-bounds. Existing baselines take their run's suite.
- ``selections.role``: ``under_test`` (the path the test checks) or ``reference`` (a computation
  the test compares against). Older rows are NULL and read as ``under_test``.
- ``runs.context``: JSON of the ``DFLASH2_*`` variables shipped to the devices, the hash of
  the selection table and the MLX version the driver saw; NULL for older runs (unknown).
- ``runs.source_digest``: the digest of an ingested results file's events, unique, so the same
  results ingested twice leave one run.
- ``results.output``: the whole captured output of a failure (``message`` stays one line).

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-10 10:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("selections", schema=None) as b:
        b.add_column(sa.Column("role", sa.String(length=16), nullable=True))
    with op.batch_alter_table("results", schema=None) as b:
        b.add_column(sa.Column("output", sa.Text(), nullable=True))
    with op.batch_alter_table("runs", schema=None) as b:
        b.add_column(sa.Column("context", sa.Text(), nullable=True))
        b.add_column(sa.Column("source_digest", sa.String(length=64), nullable=True))
    # An index, not a table constraint: SQLite would rebuild ``runs`` for a constraint, and
    # dropping the old table under foreign keys would cascade into every job.
    op.create_index("ix_runs_source_digest", "runs", ["source_digest"], unique=True)
    # Through a plain holding table, so the new table is created under its final name and
    # constraint names on every backend (PostgreSQL's index names are schema-wide).
    op.execute("CREATE TABLE baselines_hold AS SELECT runs.suite AS suite, b.variant_key AS "
               "variant_key, b.run_id AS run_id, b.set_at AS set_at FROM baselines b "
               "JOIN runs ON runs.id = b.run_id")
    op.drop_table("baselines")
    _create_baselines(with_suite=True)
    op.execute("INSERT INTO baselines (suite, variant_key, run_id, set_at) "
               "SELECT suite, variant_key, run_id, set_at FROM baselines_hold")
    op.drop_table("baselines_hold")


def _create_baselines(*, with_suite: bool) -> None:
    key = ["suite", "variant_key"] if with_suite else ["variant_key"]
    cols = [sa.Column("suite", sa.String(length=200), nullable=False)] if with_suite else []
    op.create_table(
        "baselines",
        *cols,
        sa.Column("variant_key", sa.String(length=32), nullable=False),
        sa.Column("run_id", sa.String(length=64), nullable=False),
        sa.Column("set_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name="fk_baselines_run_id_runs",
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint(*key, name="pk_baselines"),
    )
    op.create_index("ix_baselines_run_id", "baselines", ["run_id"], unique=False)


def downgrade() -> None:
    # One baseline per variant survives: the most recently set.
    op.execute("CREATE TABLE baselines_hold AS SELECT b.variant_key AS variant_key, b.run_id AS "
               "run_id, b.set_at AS set_at FROM baselines b WHERE b.set_at = (SELECT "
               "MAX(o.set_at) FROM baselines o WHERE o.variant_key = b.variant_key)")
    op.drop_table("baselines")
    _create_baselines(with_suite=False)
    op.execute("INSERT INTO baselines (variant_key, run_id, set_at) "
               "SELECT variant_key, run_id, set_at FROM baselines_hold")
    op.drop_table("baselines_hold")
    op.drop_index("ix_runs_source_digest", table_name="runs")
    # Native DROP COLUMN (SQLite >= 3.35, PostgreSQL): a batch rebuild of ``runs`` or
    # ``results`` would drop the old table and cascade into its children.
    for table, column in (("runs", "source_digest"), ("runs", "context"),
                          ("results", "output"), ("selections", "role")):
        op.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
