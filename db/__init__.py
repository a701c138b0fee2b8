"""The results history: every run on every device, in SQLite (default) or any SQLAlchemy URL.

Library first (the `farm` commands are thin over it); see docs/CONTRACTS.md for the API the farm
calls: `open_history`, `History.start_run/add_job/ingest_events/finish_job/heartbeat/finish_run`,
`db.ingest.ingest_jsonl`, `db.regressions.find_regressions`.

The names load lazily: `db.pytest_record` is a pytest plugin active in every session, and must
not pay for SQLAlchemy unless `--farm-db` is given.
"""

from typing import Any

__all__ = ["History", "open_history"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from db import history

        return getattr(history, name)
    raise AttributeError(f"module 'db' has no attribute {name!r}")
