"""Schema migrations applied in code: the package carries its Alembic scripts, no ini file.

A database stamped with a revision this code does not know was written by a newer farm; it is
refused before anything is written, so an old client can never damage a newer history.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import inspect
from sqlalchemy.engine import Connection, Engine

from db.errors import EXIT_USAGE, FarmError

if TYPE_CHECKING:
    from alembic.config import Config

VERSION_TABLE = "alembic_version"

SCRIPTS = Path(__file__).with_name("migrations")


def alembic_config(connection: Connection | None = None) -> Config:
    from alembic.config import Config  # Alembic loads only when a schema must change

    cfg = Config()
    cfg.set_main_option("script_location", str(SCRIPTS))
    cfg.attributes["connection"] = connection
    return cfg


# The newest shipped revision, so an up-to-date history opens without loading Alembic; a test
# checks it against the scripts (tests/test_db_schema.py).
HEAD = "0006"


@cache
def known_revisions() -> tuple[str, frozenset[str]]:
    """(head, every revision) of the shipped scripts; cached: they never change at runtime."""
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(alembic_config())
    return script.get_current_head(), frozenset(r.revision for r in script.walk_revisions())


def current_revision(connection: Connection) -> str | None:
    """The stamped revision, read directly: opening an up-to-date history needs no Alembic."""
    if not inspect(connection).has_table(VERSION_TABLE):
        return None
    revs = list(connection.exec_driver_sql(f"SELECT version_num FROM {VERSION_TABLE}").scalars())
    if len(revs) > 1:
        raise FarmError(f"the history has several schema heads ({', '.join(revs)}): it was not "
                        f"written by this farm", EXIT_USAGE)
    return revs[0] if revs else None


def upgrade(read_engine: Engine, write_engine: Engine, where: str) -> None:
    """Bring the schema to head; refuse (exit 2) a schema stamped by a newer farm.

    The check reads without taking the writer lock; the upgrade itself runs in one write
    transaction that re-reads the revision, so concurrent first opens migrate exactly once.
    """
    with read_engine.connect() as conn:
        rev = current_revision(conn)
    if rev == HEAD:
        return
    head, known = known_revisions()
    if rev is not None and rev not in known:
        raise FarmError(
            f"the history at {where} has schema revision {rev}, newer than this farm's {head}: "
            f"upgrade dflash2-farm, or use another --db",
            EXIT_USAGE,
        )
    from alembic import command

    # The transaction is begun here, not by Alembic: on SQLite Alembic would run each script in
    # its own transaction (the dialect is not marked transactional-DDL) after reading the heads
    # outside them, so two first opens could both plan the same scripts. Handed an open
    # transaction, Alembic reads the heads and runs every script inside it, under the writer lock.
    with write_engine.begin() as conn:
        command.upgrade(alembic_config(conn), "head")
