"""Alembic environment: runs on the connection `db.migrate` hands over, never on an ini file.

The connection arrives inside `db.migrate`'s transaction, so every script and the read of the
stamped heads share it. On PostgreSQL a transaction-scoped advisory lock serialises concurrent
first opens; on SQLite the engine begins every transaction with BEGIN IMMEDIATE, which does the
same.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import text

from db.models import Base

MIGRATION_LOCK = 0x0DF1A5


def run_migrations_online() -> None:
    connection = context.config.attributes["connection"]
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        if connection.dialect.name == "postgresql":
            connection.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": MIGRATION_LOCK})
        context.run_migrations()


run_migrations_online()
