"""The SQL statements the commands send, captured at the driver, and their query plans: a full
scan of a large table is a finding, since it grows with the history where an index lookup does
not."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

from sqlalchemy import event

LARGE_TABLE_ROWS = 10_000  # a full scan of a table at least this big is a finding


class Capture:
    """Every SQL statement an engine sends to the driver, with its parameters."""

    def __init__(self, engine):
        self.engine = engine
        self.stmts: list[tuple[str, tuple]] = []

    def _on(self, conn, cursor, statement, parameters, context, executemany):
        if not executemany:
            self.stmts.append((statement, tuple(parameters or ())))

    def __enter__(self):
        event.listen(self.engine, "before_cursor_execute", self._on)
        return self

    def __exit__(self, *exc):
        event.remove(self.engine, "before_cursor_execute", self._on)


SCAN_RE = re.compile(r"^SCAN (\w+)(?: USING (COVERING )?INDEX (\w+))?")


def _inspect_con(db_path: Path) -> sqlite3.Connection:
    """A plain connection that refuses writes (not ``mode=ro``: one such open failed once
    with 'disk I/O error' while the writer's connection was open; see the report)."""
    con = sqlite3.connect(db_path)
    con.execute("PRAGMA query_only = ON")
    return con


def explain(db_path: Path, stmts: list[tuple[str, tuple]], table_rows: dict[str, int]) -> list[dict]:
    """EXPLAIN QUERY PLAN of each distinct statement; SCANs of large tables are findings."""
    con = _inspect_con(db_path)
    seen, out = set(), []
    try:
        for sql, params in stmts:
            if not sql.lstrip().upper().startswith(("SELECT", "WITH")):
                continue
            norm = " ".join(sql.split())
            if norm in seen:
                continue
            seen.add(norm)
            plan = [row[3] for row in con.execute("EXPLAIN QUERY PLAN " + sql, params)]
            used = sorted({u for line in plan for u in re.findall(r"INDEX (\w+)", line)})
            findings = []
            for line in plan:
                mt = SCAN_RE.match(line.strip())
                if not mt:
                    continue
                table, covering, index = mt.group(1), mt.group(2), mt.group(3)
                rows = table_rows.get(table, 0)
                if rows < LARGE_TABLE_ROWS:
                    continue
                if index is None:
                    findings.append(f"full table scan of {table} ({rows:,} rows), no index")
                else:
                    findings.append(f"full {'covering ' if covering else ''}index scan of "
                                    f"{table} ({rows:,} rows) via {index}")
            out.append({"sql": norm, "plan": plan, "indexes": used, "findings": findings})
    finally:
        con.close()
    return out


def table_counts(db_path: Path) -> dict[str, int]:
    con = _inspect_con(db_path)
    try:
        names = [r[0] for r in con.execute(
            "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'")]
        return {n: con.execute(f'SELECT count(*) FROM "{n}"').fetchone()[0] for n in names}
    finally:
        con.close()


def schema_indexes(db_path: Path) -> dict[str, str]:
    con = _inspect_con(db_path)
    try:
        return dict(con.execute("SELECT name, tbl_name FROM sqlite_master WHERE type='index' "
                                "AND sql IS NOT NULL"))
    finally:
        con.close()
