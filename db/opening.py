"""Before an engine touches a history file: is it a file, a SQLite database, undamaged; and
the one line a user reads when opening fails anyway.

Kept apart from db.history's writes because every check here must run without SQLAlchemy's
pool holding the file: a plain open()/close() elsewhere in this process would drop SQLite's
POSIX locks on it.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

from sqlalchemy.exc import OperationalError

from db.errors import EXIT_INFRA, EXIT_USAGE, FarmError
from db.location import Location

READ_CHECK_S = 0.2  # how long a read command spends looking for damage before answering


def prepare_file(path: Path, *, write: bool) -> None:
    if path.is_dir():
        raise FarmError(f"history path {path} is a directory: give a file path", EXIT_USAGE)
    if not path.exists():
        if not write:
            raise FarmError(
                f"no history at {path} yet: record one with `farm run` or "
                f"`pytest suites --farm-db {path}`", EXIT_USAGE)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise FarmError(f"cannot create the history at {path}: {e.strerror or e}",
                            EXIT_USAGE) from None
    elif path.stat().st_size > 0 and not _is_sqlite(path):
        raise FarmError(f"{path} is not a SQLite database: point --db at a history "
                        f"file or move it away", EXIT_USAGE)


def integrity_problem(path: Path, budget_s: float | None = None) -> str | None:
    """The first line of ``PRAGMA quick_check`` when it finds damage, else None. With
    ``budget_s`` the check gives up (None) once it has run that long: a listing must stay fast
    on a large history, a writer must not."""
    import sqlite3

    if not path.exists() or path.stat().st_size == 0:
        return None
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    # An interrupt from another thread, not a progress handler: SQLite calls that between
    # virtual-machine instructions, and one instruction checks a whole table (0.65 s, not 0.2,
    # at a million results); the check itself stops on an interrupt.
    timer = None if budget_s is None else threading.Timer(budget_s, con.interrupt)
    try:
        if timer is not None:
            timer.start()
        rows = con.execute("PRAGMA quick_check").fetchall()
    except sqlite3.OperationalError as e:
        if "interrupted" in str(e):
            return None
        return " ".join(str(e).split())
    except sqlite3.DatabaseError as e:
        return " ".join(str(e).split())
    finally:
        if timer is not None:
            timer.cancel()
            timer.join()  # never interrupt a closed connection
        con.close()
    first = " ".join(str(rows[0][0]).split()) if rows else "ok"
    return None if first == "ok" else first[:200]


def check_integrity(path: Path, *, write: bool) -> None:
    """A damaged history is refused for writing before anything starts (a run would write rows
    into it, then die mid-run), and read commands still answer, with a warning on stderr, since
    what is readable may be what the user needs to recover."""
    problem = integrity_problem(path, None if write else READ_CHECK_S)
    if problem is None:
        return
    if write:
        raise FarmError(f"the history at {path} is damaged (quick_check: {problem}): nothing "
                        f"was written; recover it (`sqlite3 {path} .recover`) or point --db "
                        f"elsewhere", EXIT_USAGE)
    sys.stderr.write(f"warning: the history at {path} is damaged (quick_check: {problem}); "
                     f"answers may be incomplete\n")


def _is_sqlite(path: Path) -> bool:
    """Ask SQLite itself, never a plain open(): closing any other descriptor on the file drops
    this process's POSIX locks on it, and a History already open here would lose its WAL."""
    import sqlite3

    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            con.execute("PRAGMA schema_version").fetchone()
        finally:
            con.close()
    except sqlite3.DatabaseError:
        return False
    return True


def explain(e: Exception, where: str) -> str:
    orig = getattr(e, "orig", None) or e
    text = " ".join(str(orig).split()) or type(orig).__name__
    if "not a database" in text or "malformed" in text:
        return f"{where} is not a usable SQLite database ({text}): point --db elsewhere"
    if "unable to open" in text or "readonly" in text or "read-only" in text:
        return f"cannot write the history at {where} ({text}): check the path and permissions"
    return f"cannot open the history at {where}: {text[:300]}"


def exit_code(e: Exception, loc: Location) -> int:
    # A server that does not answer is infrastructure; a bad local file is the user's to fix.
    if not loc.is_sqlite and isinstance(e, OperationalError):
        return EXIT_INFRA
    return EXIT_USAGE
