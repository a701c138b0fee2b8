"""Engines for the history: SQLite tuned for several concurrent writers, any other URL as is.

SQLite runs in WAL mode with a busy timeout, and every write transaction begins with
``BEGIN IMMEDIATE``: a deferred transaction that reads then writes can fail at once with
"database is locked" (the busy handler cannot help a read lock that must upgrade), an immediate
one waits for the writer lock instead. Read-only engines open the file with ``mode=ro`` and
``PRAGMA query_only``, so writes are refused by SQLite itself; user SQL (``query``) also runs
under an authorizer that denies ``ATTACH`` (which would open, or create, a file at any path the
user names) and ``DETACH``.
"""

from __future__ import annotations

import time
from typing import Literal
from urllib.parse import quote

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine

from db.location import Location

BUSY_TIMEOUT_MS = 60_000
Mode = Literal["write", "read", "query"]


def make_engine(loc: Location, mode: Mode = "write") -> Engine:
    """``write``: the farm's and ingestion's engine; ``read``: listings (no writer lock taken);
    ``query``: user SQL, refused any write by the database itself."""
    readonly = mode == "query"
    if not loc.is_sqlite:
        return _server_engine(loc, readonly=readonly)
    if readonly:
        uri = "file:" + quote(str(loc.path))
        url = loc.url.set(database=uri, query={"mode": "ro", "uri": "true"})
    else:
        url = loc.url
    # A small pool: the connect-time pragmas run once per connection, not once per transaction.
    engine = create_engine(url, pool_size=2, max_overflow=4)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record) -> None:
        dbapi_conn.isolation_level = None  # we issue BEGIN ourselves (below)
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        if readonly:
            cur.execute("PRAGMA query_only = ON")
            dbapi_conn.set_authorizer(_deny_attach)
        elif mode == "write":
            _wal(cur)
            cur.execute("PRAGMA synchronous = NORMAL")
        cur.execute("PRAGMA foreign_keys = ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE" if mode == "write" else "BEGIN")

    return engine


def _wal(cur) -> None:
    """Put the file in WAL mode (a property of the file: once set, every later connection finds
    it so). The switch needs the file's exclusive lock, and SQLite does not wait for it while
    another connection holds a write lock (it would deadlock): it fails at once with "database
    is locked" whatever the busy timeout, as one of ~150 six-process first opens of a new
    history did. So a locked switch is retried, for as long as the busy timeout. A file system
    that cannot hold WAL answers the old mode instead, and the history keeps it, as before."""
    import sqlite3

    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    delay = 0.002
    while True:
        try:
            if cur.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                cur.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() > deadline:
                raise
        time.sleep(delay)
        delay = min(2 * delay, 0.1)


def _deny_attach(action: int, *_args) -> int:
    """sqlite3 authorizer for user SQL: no ATTACH/DETACH (``mode=ro`` binds only the main file;
    an attached one would be opened, or created, read-write)."""
    import sqlite3

    if action in (sqlite3.SQLITE_ATTACH, sqlite3.SQLITE_DETACH):
        return sqlite3.SQLITE_DENY
    return sqlite3.SQLITE_OK


def _server_engine(loc: Location, *, readonly: bool) -> Engine:
    engine = create_engine(loc.url, pool_pre_ping=True)
    if readonly and engine.dialect.name == "postgresql":
        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn, _record) -> None:
            # Every transaction of this session defaults to read-only, not only the first.
            cur = dbapi_conn.cursor()
            cur.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
            cur.close()
            dbapi_conn.commit()

    if readonly:
        @event.listens_for(engine, "begin")
        def _on_begin(conn) -> None:
            # Enforced by the server: any write in this transaction fails.
            conn.exec_driver_sql("SET TRANSACTION READ ONLY")

    return engine
