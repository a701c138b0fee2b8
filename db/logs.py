"""A run's failure output, for `farm logs`: what a device printed when a test failed.

The result stream's ``message`` is the crash line only; ``output`` (``results.output``) is
pytest's whole report with the captured stdout, stderr and log sections, which is what a person
needs to debug a failure seen on a device they do not have at hand.
"""

from __future__ import annotations

from sqlalchemy import select

from db import models as m
from db.errors import EXIT_USAGE, FarmError
from db.events import FAILING_OUTCOMES
from db.history import History
from db.queries import run_jobs

COLUMNS = ("nodeid", "test_id", "outcome", "category", "message", "output")


def run_logs(h: History, run_id: str, test: str | None = None) -> list[dict]:
    """Every failure of the run (``test`` None), else the results of one test: an exact node
    id or test id, else the one node id containing ``test`` (failures first, so a substring
    naming a parametrized test finds the one case that failed)."""
    jobs = {j["id"]: j for j in run_jobs(h, run_id)}
    r = m.results.c
    q = (select(r.job_id, *(r[k] for k in COLUMNS)).where(r.job_id.in_(list(jobs)))
         .order_by(r.job_id, r.id))
    with h.engine.connect() as c:
        rows = [dict(x) for x in c.execute(q).mappings()] if jobs else []
    failing = [x for x in rows if x["outcome"] in FAILING_OUTCOMES]
    if test is None:
        chosen = failing
    else:
        chosen = ([x for x in rows if x["nodeid"] == test]
                  or [x for x in rows if x["test_id"] == test]
                  or _unique(test, [x for x in failing if test in x["nodeid"]], run_id)
                  or _unique(test, [x for x in rows if test in x["nodeid"]], run_id))
        if not chosen:
            raise FarmError(f"no test matching {test!r} in run {run_id}: see `farm show "
                            f"{run_id}`", EXIT_USAGE)
    return [{"run_id": run_id, "job_id": x["job_id"],
             "device": jobs[x["job_id"]]["device"]["label"],
             **{k: x[k] for k in COLUMNS}} for x in chosen]


def _unique(test: str, rows: list[dict], run_id: str) -> list[dict]:
    ids = sorted({x["nodeid"] for x in rows})
    if len(ids) > 1:
        raise FarmError(f"{test!r} matches {len(ids)} tests in run {run_id} ({', '.join(ids[:3])}"
                        f"{', ...' if len(ids) > 3 else ''}): give more of the node id",
                        EXIT_USAGE)
    return rows
