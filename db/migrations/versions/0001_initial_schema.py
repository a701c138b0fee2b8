"""Initial schema: runs, devices, jobs, results, measurements, selections, fingerprints, baselines.

Revision ID: 0001
Revises: (none)
Create Date: 2026-12-02 13:17:54.406067
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "devices",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("variant_key", sa.String(length=32), nullable=False),
        sa.Column("lineage_key", sa.String(length=32), nullable=False),
        sa.Column("arch", sa.String(length=64), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=True),
        sa.Column("size", sa.String(length=8), nullable=True),
        sa.Column("chip", sa.String(length=200), nullable=False),
        sa.Column("backend", sa.String(length=16), nullable=False),
        sa.Column("host", sa.String(length=200), nullable=False),
        sa.Column("os", sa.String(length=200), nullable=False),
        sa.Column("mlx_version", sa.String(length=64), nullable=False),
        sa.Column("emulated", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_devices")),
        sa.UniqueConstraint("variant_key", name=op.f("uq_devices_variant_key")),
    )
    with op.batch_alter_table("devices", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_devices_arch"), ["arch"], unique=False)
        batch_op.create_index(batch_op.f("ix_devices_lineage_key"), ["lineage_key"], unique=False)

    op.create_table(
        "runs",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("suite", sa.String(length=200), nullable=False),
        sa.Column("selector", sa.String(length=200), nullable=False),
        sa.Column("git_sha", sa.String(length=64), nullable=True),
        sa.Column("dirty", sa.Boolean(), nullable=True),
        sa.Column("tree_hash", sa.String(length=64), nullable=True),
        sa.Column("started", sa.Float(), nullable=False),
        sa.Column("finished", sa.Float(), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("heartbeat", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_runs")),
    )
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_runs_started"), ["started"], unique=False)
        batch_op.create_index(batch_op.f("ix_runs_status"), ["status"], unique=False)
        batch_op.create_index(batch_op.f("ix_runs_suite"), ["suite"], unique=False)

    op.create_table(
        "baselines",
        sa.Column("variant_key", sa.String(length=32), nullable=False),
        sa.Column("run_id", sa.String(length=64), nullable=False),
        sa.Column("set_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_baselines_run_id_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("variant_key", name=op.f("pk_baselines")),
    )
    with op.batch_alter_table("baselines", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_baselines_run_id"), ["run_id"], unique=False)

    op.create_table(
        "jobs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.String(length=64), nullable=False),
        sa.Column("device_id", sa.Integer(), nullable=False),
        sa.Column("node_id", sa.String(length=200), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("started", sa.Float(), nullable=False),
        sa.Column("finished", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(
            ["device_id"], ["devices.id"], name=op.f("fk_jobs_device_id_devices")
        ),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_jobs_run_id_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobs")),
    )
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_jobs_device_id"), ["device_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_jobs_run_id"), ["run_id"], unique=False)

    op.create_table(
        "results",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("nodeid", sa.Text(), nullable=False),
        sa.Column("test_id", sa.Text(), nullable=False),
        sa.Column("params", sa.Text(), nullable=False),
        sa.Column("outcome", sa.String(length=16), nullable=False),
        sa.Column("category", sa.String(length=32), nullable=False),
        sa.Column("expected", sa.String(length=16), nullable=True),
        sa.Column("link", sa.Text(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("duration", sa.Float(), nullable=True),
        sa.Column("message", sa.Text(), nullable=True),
        sa.Column("time", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_results_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_results")),
    )
    with op.batch_alter_table("results", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_results_category"), ["category"], unique=False)
        batch_op.create_index(batch_op.f("ix_results_job_id"), ["job_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_results_nodeid"), ["nodeid"], unique=False)
        batch_op.create_index("ix_results_test_id_job_id", ["test_id", "job_id"], unique=False)

    op.create_table(
        "fingerprints",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("result_id", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(length=400), nullable=False),
        sa.Column("digest", sa.String(length=128), nullable=False),
        sa.ForeignKeyConstraint(
            ["result_id"],
            ["results.id"],
            name=op.f("fk_fingerprints_result_id_results"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_fingerprints")),
    )
    with op.batch_alter_table("fingerprints", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_fingerprints_key"), ["key"], unique=False)
        batch_op.create_index(batch_op.f("ix_fingerprints_result_id"), ["result_id"], unique=False)

    op.create_table(
        "measurements",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("result_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("value", sa.Float(), nullable=True),
        sa.Column("unit", sa.String(length=64), nullable=True),
        sa.Column("bound", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(
            ["result_id"],
            ["results.id"],
            name=op.f("fk_measurements_result_id_results"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_measurements")),
    )
    with op.batch_alter_table("measurements", schema=None) as batch_op:
        batch_op.create_index("ix_measurements_name_result_id", ["name", "result_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_measurements_result_id"), ["result_id"], unique=False)

    op.create_table(
        "selections",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("result_id", sa.Integer(), nullable=False),
        sa.Column("op", sa.String(length=64), nullable=False),
        sa.Column("dtype", sa.String(length=32), nullable=False),
        sa.Column("M", sa.Integer(), nullable=False),
        sa.Column("K", sa.Integer(), nullable=False),
        sa.Column("N", sa.Integer(), nullable=False),
        sa.Column("variant", sa.String(length=64), nullable=False),
        sa.Column("reason", sa.String(length=200), nullable=True),
        sa.ForeignKeyConstraint(
            ["result_id"],
            ["results.id"],
            name=op.f("fk_selections_result_id_results"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_selections")),
    )
    with op.batch_alter_table("selections", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_selections_result_id"), ["result_id"], unique=False)
        batch_op.create_index("ix_selections_shape", ["op", "dtype", "M", "K", "N"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("selections", schema=None) as batch_op:
        batch_op.drop_index("ix_selections_shape")
        batch_op.drop_index(batch_op.f("ix_selections_result_id"))

    op.drop_table("selections")
    with op.batch_alter_table("measurements", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_measurements_result_id"))
        batch_op.drop_index("ix_measurements_name_result_id")

    op.drop_table("measurements")
    with op.batch_alter_table("fingerprints", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_fingerprints_result_id"))
        batch_op.drop_index(batch_op.f("ix_fingerprints_key"))

    op.drop_table("fingerprints")
    with op.batch_alter_table("results", schema=None) as batch_op:
        batch_op.drop_index("ix_results_test_id_job_id")
        batch_op.drop_index(batch_op.f("ix_results_nodeid"))
        batch_op.drop_index(batch_op.f("ix_results_job_id"))
        batch_op.drop_index(batch_op.f("ix_results_category"))

    op.drop_table("results")
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_jobs_run_id"))
        batch_op.drop_index(batch_op.f("ix_jobs_device_id"))

    op.drop_table("jobs")
    with op.batch_alter_table("baselines", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_baselines_run_id"))

    op.drop_table("baselines")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_runs_suite"))
        batch_op.drop_index(batch_op.f("ix_runs_status"))
        batch_op.drop_index(batch_op.f("ix_runs_started"))

    op.drop_table("runs")
    with op.batch_alter_table("devices", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_devices_lineage_key"))
        batch_op.drop_index(batch_op.f("ix_devices_arch"))

    op.drop_table("devices")
