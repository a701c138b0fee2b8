"""A result's details become JSON columns of its row; views keep the old tables' names.

- ``results`` gains ``measurements_json``, ``selections_json`` and ``fingerprints_json``: each a
  JSON array of arrays, one per detail in its old ``id`` order, the fields in the old columns'
  order (``db.details.LAYOUTS``), NULL when the result had none. Every child row is moved into
  them, then ``measurements``, ``selections`` and ``fingerprints`` are dropped: as tables, each
  result's ~4.4 details cost a b-tree entry, an index entry and a foreign-key check apiece, and
  ingestion could not pass ~30k results/s.
- Views of the same names read the JSON (``json_each`` on SQLite, ``json_array_elements`` on
  PostgreSQL), with ``result_id``, ``pos`` (the detail's place in its result) and the old
  columns, so user SQL (`farm query`) keeps working; the old tables' own ``id`` is gone.
- ``ix_results_job_id_test_id`` goes: a test's results are the node ids ``T`` and ``T[...]``, a
  range of ``ix_results_job_id_nodeid`` within each job.

The rows are moved in Python, not by ``json_group_array``: SQLite (3.40) prints a REAL in JSON
with 15 significant digits, so 0.1 + 0.2 would come back as 0.3; Python's ``repr`` is exact,
and one path serves both backends. Downgrade restores the three tables (new ids, in the old
order: by result, then position) and the index.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-04 15:20:00.000000
"""

from __future__ import annotations

import json
import math
import sys

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

# Frozen copies of what this revision means (db.details may change later; this must not).
LAYOUTS = {
    "measurements": ("name", "value", "unit", "bound"),
    "selections": ("op", "dtype", "M", "K", "N", "variant", "reason", "impl", "role"),
    "fingerprints": ("key", "digest"),
}
# The SQL type of each field, for the views' casts (PostgreSQL) and the restored tables.
TYPES = {
    "name": sa.String(200), "value": sa.Float(), "unit": sa.String(64), "bound": sa.Float(),
    "op": sa.String(64), "dtype": sa.String(32), "M": sa.Integer(), "K": sa.Integer(),
    "N": sa.Integer(), "variant": sa.String(64), "reason": sa.String(200),
    "impl": sa.String(32), "role": sa.String(16), "key": sa.String(400),
    "digest": sa.String(128),
}
NOT_NULL = {"name", "op", "dtype", "M", "K", "N", "variant", "key", "digest"}
# bigint, not integer: the JSON takes any 64-bit integer (db.events), a view must not fail on one
PG_CAST = {sa.Float: "double precision", sa.Integer: "bigint"}
CHUNK = 20_000  # result ids per read-and-write step: bounded memory at any size


def upgrade() -> None:
    conn = op.get_bind()
    for kind in LAYOUTS:
        op.add_column("results", sa.Column(f"{kind}_json", sa.Text(), nullable=True))
    for kind in LAYOUTS:
        _children_to_json(conn, kind)
        op.drop_table(kind)  # its indexes and foreign key go with it
    op.drop_index("ix_results_job_id_test_id", table_name="results")
    for kind in LAYOUTS:
        op.execute(_view_sql(conn.dialect.name, kind))


def downgrade() -> None:
    conn = op.get_bind()
    for kind in LAYOUTS:
        op.execute(f"DROP VIEW {kind}")
    _create_tables()
    for kind in LAYOUTS:
        _json_to_children(conn, kind)
    op.create_index("ix_results_job_id_test_id", "results", ["job_id", "test_id"], unique=False)
    # Native DROP COLUMN (SQLite >= 3.35, PostgreSQL): a batch rebuild of ``results`` would drop
    # the old table and cascade into the children just restored.
    for kind in reversed(LAYOUTS):
        op.execute(f"ALTER TABLE results DROP COLUMN {kind}_json")


# -- moving the rows ------------------------------------------------------------------------


def _q(conn, name: str) -> str:
    return conn.dialect.identifier_preparer.quote(name)


def _chunks(conn, what: str):
    """Result-id ranges of ``CHUNK``; on a history of more than one, a progress line on stderr
    (a million results take about half a minute, and a command must not look hung)."""
    top = conn.execute(sa.text("SELECT max(id) FROM results")).scalar() or 0
    steps = range(0, top + 1, CHUNK)
    for k, lo in enumerate(steps):
        if len(steps) > 1:
            sys.stderr.write(f"\rschema 0006: {what} ({k * 100 // len(steps)}%)")
            sys.stderr.flush()
        yield lo, lo + CHUNK
    if len(steps) > 1:
        sys.stderr.write(f"\rschema 0006: {what} (done)\n")


def _finite(v):
    return None if isinstance(v, float) and not math.isfinite(v) else v


def _children_to_json(conn, kind: str) -> None:
    fields = LAYOUTS[kind]
    cols = ", ".join(_q(conn, f) for f in fields)
    read = sa.text(f"SELECT result_id, {cols} FROM {kind} WHERE result_id >= :lo AND "
                   f"result_id < :hi ORDER BY result_id, id")
    write = sa.text(f"UPDATE results SET {kind}_json = :j WHERE id = :i")
    for lo, hi in _chunks(conn, f"moving {kind} into results"):
        by_result: dict[int, list] = {}
        for rid, *values in conn.execute(read, {"lo": lo, "hi": hi}):
            by_result.setdefault(rid, []).append([_finite(v) for v in values])
        if by_result:
            conn.execute(write, [{"i": rid, "j": json.dumps(xs, separators=(",", ":"))}
                                 for rid, xs in by_result.items()])


def _json_to_children(conn, kind: str) -> None:
    fields = LAYOUTS[kind]
    names = ", ".join(_q(conn, f) for f in ("result_id", *fields))
    marks = ", ".join(f":p{i}" for i in range(len(fields) + 1))
    read = sa.text(f"SELECT id, {kind}_json FROM results WHERE id >= :lo AND id < :hi AND "
                   f"{kind}_json IS NOT NULL ORDER BY id")
    write = sa.text(f"INSERT INTO {kind} ({names}) VALUES ({marks})")
    n = len(fields)
    for lo, hi in _chunks(conn, f"restoring the {kind} table"):
        rows = []
        for rid, text in conn.execute(read, {"lo": lo, "hi": hi}):
            for x in json.loads(text):
                x = (list(x) + [None] * n)[:n]
                rows.append({f"p{i}": v for i, v in enumerate((rid, *x))})
        if rows:
            conn.execute(write, rows)


# -- views and tables -------------------------------------------------------------------------


def _view_sql(dialect: str, kind: str) -> str:
    fields = LAYOUTS[kind]
    if dialect == "sqlite":
        # json_extract gives each field its SQL type (REAL, INTEGER, TEXT; null -> NULL).
        cols = ", ".join(f"json_extract(d.value, '$[{i}]') AS \"{f}\""
                         for i, f in enumerate(fields))
        return (f"CREATE VIEW {kind} AS SELECT r.id AS result_id, d.key AS pos, {cols} "
                f"FROM results AS r, json_each(r.{kind}_json) AS d")
    if dialect == "postgresql":
        cols = ", ".join(_pg_field(i, f) for i, f in enumerate(fields))
        return (f"CREATE VIEW {kind} AS SELECT r.id AS result_id, "
                f"(d.ord - 1)::integer AS pos, {cols} FROM results AS r CROSS JOIN LATERAL "
                f"json_array_elements(r.{kind}_json::json) WITH ORDINALITY AS d(value, ord)")
    raise RuntimeError(f"schema 0006 has views of {kind} for SQLite and PostgreSQL, not for "
                       f"{dialect}: add one to this migration")


def _pg_field(i: int, f: str) -> str:
    cast = PG_CAST.get(type(TYPES[f]))
    expr = f"(d.value ->> {i})"
    return f"{expr}::{cast} AS \"{f}\"" if cast else f"{expr}::text AS \"{f}\""


def _create_tables() -> None:
    """The three tables as 0005 left them (columns, keys, the result_id indexes)."""
    for kind, fields in LAYOUTS.items():
        op.create_table(
            kind,
            sa.Column("id", sa.Integer(), nullable=False),
            sa.Column("result_id", sa.Integer(), nullable=False),
            *(sa.Column(f, TYPES[f], nullable=f not in NOT_NULL) for f in fields),
            sa.ForeignKeyConstraint(["result_id"], ["results.id"],
                                    name=f"fk_{kind}_result_id_results", ondelete="CASCADE"),
            sa.PrimaryKeyConstraint("id", name=f"pk_{kind}"),
        )
        op.create_index(f"ix_{kind}_result_id", kind, ["result_id"], unique=False)
