"""The history's tables, as SQLAlchemy Core tables.

The tables are the reference the migrations are checked against (``tests/test_db_schema.py``
compares them), and they give the library one place to name columns. Ingestion writes through
bulk inserts (one executemany per table and batch), never through ORM objects: the per-object
path is ten times slower (docs FACTS.md); and Core tables, not declarative classes, because every
`farm` command imports this module and the ORM alone costs more to import than the command's
query takes. Times are epoch seconds (floats): portable across SQLite and PostgreSQL and what
the JSONL stream already carries.

Indexes serve the commands' questions, and every one is paid for on each result written (tens
of thousands a second while a fleet reports): ``results`` has one besides its key, led by the
job, so a batch's entries land together at the end of the index instead of on a page per test
name (migration 0005), and serving both a node id and a test's parameters as a range of node ids
(migration 0006). A result's measurements, selections and fingerprints are JSON columns of its
row, not child tables (`db.details` says why); views of the old tables' names read them.
"""

from __future__ import annotations

from sqlalchemy import (
    Boolean,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
)

# Named constraints keep migrations reproducible on every backend.
NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING)


class Base:
    """What the migrations are compared against (``Base.metadata``: `db/migrations/env.py`,
    ``tests/test_db_schema.py``)."""

    metadata = metadata


def _id() -> Column:
    return Column("id", Integer, primary_key=True)


def _parent(name: str, parent: str) -> Column:
    return Column(name, ForeignKey(f"{parent}.id", ondelete="CASCADE"), nullable=False)


# One device variant: every field that can change a result is part of its key.
devices = Table(
    "devices", metadata,
    _id(),
    Column("variant_key", String(32), nullable=False, unique=True),
    # Same as variant_key but without the MLX version: finds the baseline across an MLX upgrade.
    Column("lineage_key", String(32), nullable=False, index=True),
    Column("arch", String(64), nullable=False, index=True),
    Column("generation", Integer),
    Column("size", String(8)),
    Column("chip", String(200), nullable=False),
    Column("backend", String(16), nullable=False),
    Column("host", String(200), nullable=False),
    Column("os", String(200), nullable=False),
    Column("mlx_version", String(64), nullable=False),
    Column("emulated", Boolean, nullable=False),
)

# One `farm run` (or one recorded local pytest session): a suite on a set of devices.
runs = Table(
    "runs", metadata,
    Column("id", String(64), primary_key=True),
    Column("suite", String(200), nullable=False, index=True),
    Column("selector", String(200), nullable=False),
    Column("git_sha", String(64)),
    Column("dirty", Boolean),
    Column("tree_hash", String(64)),
    Column("started", Float, nullable=False, index=True),
    Column("finished", Float),
    # running | passed | failed | incomplete | aborted
    Column("status", String(16), nullable=False, index=True),
    Column("heartbeat", Float, nullable=False),
    # JSON: what changes dispatch, as the driver saw it ({"env": {DFLASH2_*: ...},
    # "table_hash": ..., "mlx_version": ...}); NULL: recorded before runs carried it.
    Column("context", Text),
    # An ingested file's digest (`db.ingest`): the same results ingested twice are one run.
    Column("source_digest", String(64), index=True, unique=True),
)

# One run on one device.
jobs = Table(
    "jobs", metadata,
    _id(),
    Column("run_id", ForeignKey("runs.id", ondelete="CASCADE"), nullable=False, index=True),
    Column("device_id", ForeignKey("devices.id"), nullable=False, index=True),
    Column("node_id", String(200)),
    Column("attempts", Integer, nullable=False, default=1),
    # running | passed | failed | lost | crashed | timeout | error
    Column("status", String(16), nullable=False),
    Column("error", Text),
    Column("started", Float, nullable=False),
    Column("finished", Float),
)

# One test outcome on one device, with its expectation as classified on that device.
results = Table(
    "results", metadata,
    _id(),
    _parent("job_id", "jobs"),
    Column("nodeid", Text, nullable=False),
    Column("test_id", Text, nullable=False),
    Column("params", Text, nullable=False, default=""),
    Column("outcome", String(16), nullable=False),
    Column("category", String(32), nullable=False),
    Column("expected", String(16)),
    Column("link", Text),
    Column("reason", Text),
    Column("duration", Float),
    Column("message", Text),  # one line
    Column("output", Text),  # a failure's whole captured output
    Column("time", Float),
    # The node that ran it (Ray node id) and its host; NULL: unknown (recorded before results
    # carried it, or ingested from a file without `farm_node`/`farm_host`).
    Column("node", String(200)),
    Column("host", String(200)),
    # A result's measurements, selections and fingerprints: JSON arrays of arrays in
    # `db.details.LAYOUTS` order, NULL when it has none (migration 0006; the views below).
    Column("measurements_json", Text),
    Column("selections_json", Text),
    Column("fingerprints_json", Text),
    # A job's results (its prefix), and one node id within a job: `farm history` walks runs
    # newest first and looks each job up, by node id or by the range of node ids a test's
    # parameters make (``T[...``); `farm regressions` finds node ids per job.
    Index("ix_results_job_id_nodeid", "job_id", "nodeid"),
)

# Views over the details (migration 0006 creates them; not in ``metadata``, which describes
# tables): the old child tables' names and columns, plus ``pos``, a detail's place in its
# result. For user SQL (`farm query`) and any reader written against the old tables; the
# farm's own readers decode the JSON columns directly (`db.details`), which is faster.
views = MetaData()


def _view(name: str, *columns: Column) -> Table:
    return Table(name, views, Column("result_id", Integer), Column("pos", Integer), *columns)


measurements = _view(
    "measurements",
    Column("name", String(200)),
    Column("value", Float),  # None: non-finite
    Column("unit", String(64)),
    Column("bound", Float),
)

# A kernel dispatch a test observed: which variant served (op, dtype, M, K, N), and which
# implementation of it executed (``impl``, `kernels.recorder.IMPLEMENTATIONS`; NULL: unknown);
# ``role``: under_test | reference (`kernels.recorder.ROLES`), NULL (older rows) = under_test.
selections = _view(
    "selections",
    Column("op", String(64)),
    Column("dtype", String(32)),
    Column("M", Integer),
    Column("K", Integer),
    Column("N", Integer),
    Column("variant", String(64)),
    Column("reason", String(200)),
    Column("impl", String(32)),
    Column("role", String(16)),
)

fingerprints = _view(
    "fingerprints",
    Column("key", String(400)),
    Column("digest", String(128)),
)

# The run a suite's results on a device variant are judged against (`farm baseline set`): per
# suite, because runs of different suites share no test to compare.
baselines = Table(
    "baselines", metadata,
    Column("suite", String(200), primary_key=True),
    Column("variant_key", String(32), primary_key=True),
    Column("run_id", ForeignKey("runs.id", ondelete="CASCADE"), nullable=False, index=True),
    Column("set_at", Float, nullable=False),
)
