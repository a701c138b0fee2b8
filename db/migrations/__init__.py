"""Alembic migrations of the history, shipped in the package and applied on open (db.migrate)."""
