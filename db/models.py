"""The history's tables, as SQLAlchemy 2.0 declarative models.

The models are the reference the migrations are checked against (``tests/test_db_schema.py``
compares them), and they give the library one place to name columns. Ingestion writes through
Core bulk inserts on ``Model.__table__``, never through ORM objects: the per-object path is ten
times slower (docs FACTS.md). Times are epoch seconds (floats): portable across SQLite and
PostgreSQL and what the JSONL stream already carries.
"""

from __future__ import annotations

from sqlalchemy import (
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# Named constraints keep migrations reproducible on every backend.
NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class Device(Base):
    """One device variant: every field that can change a result is part of its key."""

    __tablename__ = "devices"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    variant_key: Mapped[str] = mapped_column(String(32), unique=True)
    # Same as variant_key but without the MLX version: finds the baseline across an MLX upgrade.
    lineage_key: Mapped[str] = mapped_column(String(32), index=True)
    arch: Mapped[str] = mapped_column(String(64), index=True)
    generation: Mapped[int | None] = mapped_column(Integer)
    size: Mapped[str | None] = mapped_column(String(8))
    chip: Mapped[str] = mapped_column(String(200))
    backend: Mapped[str] = mapped_column(String(16))
    host: Mapped[str] = mapped_column(String(200))
    os: Mapped[str] = mapped_column(String(200))
    mlx_version: Mapped[str] = mapped_column(String(64))
    emulated: Mapped[bool] = mapped_column(Boolean)


class Run(Base):
    """One `farm run` (or one recorded local pytest session): a suite on a set of devices."""

    __tablename__ = "runs"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    suite: Mapped[str] = mapped_column(String(200), index=True)
    selector: Mapped[str] = mapped_column(String(200))
    git_sha: Mapped[str | None] = mapped_column(String(64))
    dirty: Mapped[bool | None] = mapped_column(Boolean)
    tree_hash: Mapped[str | None] = mapped_column(String(64))
    started: Mapped[float] = mapped_column(Float, index=True)
    finished: Mapped[float | None] = mapped_column(Float)
    # running | passed | failed | incomplete | aborted
    status: Mapped[str] = mapped_column(String(16), index=True)
    heartbeat: Mapped[float] = mapped_column(Float)
    # JSON: what changes dispatch, as the driver saw it ({"env": {DFLASH2_*: ...},
    # "table_hash": ..., "mlx_version": ...}); NULL: recorded before runs carried it.
    context: Mapped[str | None] = mapped_column(Text)
    # An ingested file's digest (`db.ingest`): the same results ingested twice are one run.
    source_digest: Mapped[str | None] = mapped_column(String(64), index=True, unique=True)


class Job(Base):
    """One run on one device."""

    __tablename__ = "jobs"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    device_id: Mapped[int] = mapped_column(ForeignKey("devices.id"), index=True)
    node_id: Mapped[str | None] = mapped_column(String(200))
    attempts: Mapped[int] = mapped_column(Integer, default=1)
    # running | passed | failed | lost | crashed | timeout | error
    status: Mapped[str] = mapped_column(String(16))
    error: Mapped[str | None] = mapped_column(Text)
    started: Mapped[float] = mapped_column(Float)
    finished: Mapped[float | None] = mapped_column(Float)


class Result(Base):
    """One test outcome on one device, with its expectation as classified on that device."""

    __tablename__ = "results"
    __table_args__ = (Index("ix_results_test_id_job_id", "test_id", "job_id"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    nodeid: Mapped[str] = mapped_column(Text, index=True)
    test_id: Mapped[str] = mapped_column(Text)
    params: Mapped[str] = mapped_column(Text, default="")
    outcome: Mapped[str] = mapped_column(String(16))
    category: Mapped[str] = mapped_column(String(32), index=True)
    expected: Mapped[str | None] = mapped_column(String(16))
    link: Mapped[str | None] = mapped_column(Text)
    reason: Mapped[str | None] = mapped_column(Text)
    duration: Mapped[float | None] = mapped_column(Float)
    message: Mapped[str | None] = mapped_column(Text)  # one line
    output: Mapped[str | None] = mapped_column(Text)  # a failure's whole captured output
    time: Mapped[float | None] = mapped_column(Float)
    # The node that ran it (Ray node id) and its host; NULL: unknown (recorded before results
    # carried it, or ingested from a file without `farm_node`/`farm_host`).
    node: Mapped[str | None] = mapped_column(String(200))
    host: Mapped[str | None] = mapped_column(String(200))


class Measurement(Base):
    __tablename__ = "measurements"
    __table_args__ = (Index("ix_measurements_name_result_id", "name", "result_id"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    result_id: Mapped[int] = mapped_column(
        ForeignKey("results.id", ondelete="CASCADE"), index=True
    )
    name: Mapped[str] = mapped_column(String(200))
    value: Mapped[float | None] = mapped_column(Float)  # None: non-finite
    unit: Mapped[str | None] = mapped_column(String(64))
    bound: Mapped[float | None] = mapped_column(Float)


class Selection(Base):
    """A kernel dispatch a test observed: which variant served (op, dtype, M, K, N), and which
    implementation of it executed (``impl``, `kernels.recorder.IMPLEMENTATIONS`)."""

    __tablename__ = "selections"
    __table_args__ = (Index("ix_selections_shape", "op", "dtype", "M", "K", "N"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    result_id: Mapped[int] = mapped_column(
        ForeignKey("results.id", ondelete="CASCADE"), index=True
    )
    op: Mapped[str] = mapped_column(String(64))
    dtype: Mapped[str] = mapped_column(String(32))
    M: Mapped[int] = mapped_column(Integer)
    K: Mapped[int] = mapped_column(Integer)
    N: Mapped[int] = mapped_column(Integer)
    variant: Mapped[str] = mapped_column(String(64))
    reason: Mapped[str | None] = mapped_column(String(200))
    # NULL: unknown (recorded before results carried it, or not reported by the dispatcher).
    impl: Mapped[str | None] = mapped_column(String(32))
    # under_test | reference (`kernels.recorder.ROLES`); NULL (older rows) reads as under_test.
    role: Mapped[str | None] = mapped_column(String(16))


class Fingerprint(Base):
    __tablename__ = "fingerprints"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    result_id: Mapped[int] = mapped_column(
        ForeignKey("results.id", ondelete="CASCADE"), index=True
    )
    key: Mapped[str] = mapped_column(String(400), index=True)
    digest: Mapped[str] = mapped_column(String(128))


class Baseline(Base):
    """The run a suite's results on a device variant are judged against (`farm baseline set`):
    per suite, because runs of different suites share no test to compare."""

    __tablename__ = "baselines"
    suite: Mapped[str] = mapped_column(String(200), primary_key=True)
    variant_key: Mapped[str] = mapped_column(String(32), primary_key=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    set_at: Mapped[float] = mapped_column(Float)


devices = Device.__table__
runs = Run.__table__
jobs = Job.__table__
results = Result.__table__
measurements = Measurement.__table__
selections = Selection.__table__
fingerprints = Fingerprint.__table__
baselines = Baseline.__table__
