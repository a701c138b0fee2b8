"""Where the history lives: `--db URL|PATH`, else `FARM_DB`, else a per-user data directory.

A bare path means a SQLite file; anything with `://` is an SQLAlchemy URL (PostgreSQL works).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from db.errors import EXIT_USAGE, FarmError

ENV_DB = "FARM_DB"
APP_DIR = "dflash2-farm"


def default_path() -> Path:
    """The per-user data directory's history file (XDG on Linux, Application Support on macOS)."""
    if sys.platform == "darwin":
        base = Path.home() / "Library" / "Application Support"
    else:
        base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return base / APP_DIR / "history.db"


@dataclass(frozen=True)
class Location:
    url: URL
    path: Path | None  # the SQLite file, None for a server database

    @property
    def is_sqlite(self) -> bool:
        return self.url.get_backend_name() == "sqlite"

    def describe(self) -> str:
        return str(self.path) if self.path else self.url.render_as_string(hide_password=True)


def resolve(url_or_path: str | os.PathLike | None = None) -> Location:
    raw = os.fspath(url_or_path) if url_or_path is not None else os.environ.get(ENV_DB, "")
    raw = raw.strip()
    if not raw:
        path = default_path()
        return Location(make_url(f"sqlite:///{path}"), path)
    if "://" not in raw:
        path = Path(raw).expanduser().resolve()
        return Location(make_url(f"sqlite:///{path}"), path)
    try:
        url = make_url(raw)
    except ArgumentError as e:
        raise FarmError(f"bad history URL {raw!r}: {e}", EXIT_USAGE) from None
    if url.get_backend_name() == "sqlite":
        if not url.database or url.database == ":memory:":
            raise FarmError(f"history URL {raw!r} names no file: use sqlite:///PATH", EXIT_USAGE)
        path = Path(url.database).expanduser().resolve()
        return Location(url.set(database=str(path)), path)
    return Location(url, None)
