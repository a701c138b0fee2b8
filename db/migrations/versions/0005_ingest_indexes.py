"""Indexes for bulk ingestion: the large tables' indexes lead with the parent's id.

Every index on ``results`` and its children is written for each result stored. An index led by a
test name (``nodeid``, ``test_id``, a measurement's name, a selection's shape, a fingerprint's
key) puts a batch's entries on a different page per name: a job of 177 tests dirtied hundreds of
pages per commit and ingestion ran at a few thousand results a second. Led by the job (or the
result), a batch's entries land together at the end of the index.

- ``results``: ``(job_id, nodeid)`` and ``(job_id, test_id)`` replace ``(job_id)``,
  ``(nodeid)`` and ``(test_id, job_id)``; ``farm history`` walks runs newest first and looks each
  job up, `farm regressions` looks node ids up per job. ``(category)`` goes: every query of it
  also names the job.
- ``measurements (name, result_id)``, ``selections (op, dtype, M, K, N)``, ``fingerprints
  (key)`` go: no command queries them (``bench/bench_history.py`` checks every statement's
  plan); their ``result_id`` indexes stay.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-13 10:00:00.000000
"""

from __future__ import annotations

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

# (name, table, columns) of the indexes 0004 has and 0005 has not, and the other way round.
OLD = (
    ("ix_results_job_id", "results", ["job_id"]),
    ("ix_results_nodeid", "results", ["nodeid"]),
    ("ix_results_category", "results", ["category"]),
    ("ix_results_test_id_job_id", "results", ["test_id", "job_id"]),
    ("ix_measurements_name_result_id", "measurements", ["name", "result_id"]),
    ("ix_selections_shape", "selections", ["op", "dtype", "M", "K", "N"]),
    ("ix_fingerprints_key", "fingerprints", ["key"]),
)
NEW = (
    ("ix_results_job_id_nodeid", "results", ["job_id", "nodeid"]),
    ("ix_results_job_id_test_id", "results", ["job_id", "test_id"]),
)


def upgrade() -> None:
    _swap(drop=OLD, create=NEW)


def downgrade() -> None:
    _swap(drop=NEW, create=OLD)


def _swap(*, drop, create) -> None:
    # Plain CREATE/DROP INDEX on every backend: no table is rebuilt, no row is touched.
    for name, table, columns in create:
        op.create_index(name, table, columns, unique=False)
    for name, table, _ in drop:
        op.drop_index(name, table_name=table)
