"""Loading a run for comparison, and finding the run it is compared with.

Like is compared with like: a job is compared with its suite's baseline on the same device
variant, or else with the latest earlier run of the same suite on the same device. Runs of
different suites share no test, so comparing them could only invent regressions.
"""

from __future__ import annotations

import json

from sqlalchemy import select

from db import models as m
from db.history import History
from db.queries import run_results
from db.regressions.model import JobData, ResultData, RunInfo

COMPARABLE_STATUSES = ("passed", "failed", "incomplete")


def run_info(h: History, run_id: str) -> RunInfo:
    with h.engine.connect() as c:
        row = c.execute(select(m.runs.c.suite, m.runs.c.started, m.runs.c.context)
                        .where(m.runs.c.id == run_id)).one()
    try:
        context = json.loads(row.context) if row.context else None
    except ValueError:
        context = None
    return RunInfo(run_id, row.suite, row.started,
                   context if isinstance(context, dict) else None)


def load_jobs(h: History, run_id: str) -> list[JobData]:
    info = run_info(h, run_id)
    jobs: dict[int, JobData] = {}
    for r in run_results(h, run_id):  # ordered by id: a re-run of a test replaces the earlier
        job = jobs.setdefault(r["job_id"], JobData(info, r["device"]))
        rd = ResultData(r["nodeid"], r["outcome"], r["category"], r["message"] or "",
                        r["expected"], r["link"])
        for meas in r["measurements"]:
            rd.measurements[meas["name"]].append(meas)
        rd.fingerprints = {f["key"]: f["digest"] for f in r["fingerprints"]}
        job.results[r["nodeid"]] = rd
        for s in r["selections"]:
            key = (s["op"], s["dtype"], s["M"], s["K"], s["N"])
            reason, nodes = job.selections[key].get(s["variant"], (s["reason"], set()))
            nodes.add(r["nodeid"])
            job.selections[key][s["variant"]] = (reason, nodes)
            if s.get("role") in (None, "under_test"):
                rd.under_test[key][s["variant"]] = s["reason"]
            if s.get("impl"):
                rd.impls[(*key, s["variant"])].add(s["impl"])
                job.impls[(*key, s["variant"])][s["impl"]].add(r["nodeid"])
    # A device that ran twice in one run (a retried job): its last job speaks for it.
    by_variant: dict[str, JobData] = {}
    for job_id in sorted(jobs):
        by_variant[jobs[job_id].device["variant_key"]] = jobs[job_id]
    return list(by_variant.values())


def comparable_run(h: History, job: JobData) -> tuple[str | None, str]:
    """(run, why) this job is judged against: its suite's baseline on its device variant, else
    on the same device under another MLX version, else the latest earlier run of its suite on
    its device (then under another MLX version); (None, why not) when there is none."""
    dev, run = job.device, job.run
    b = m.baselines.c
    with h.engine.connect() as c:
        found = c.execute(select(b.run_id).where(b.suite == run.suite,
                                                 b.variant_key == dev["variant_key"])).scalar()
        if found:
            return found, "baseline"
        found = c.execute(
            select(b.run_id).join(m.devices, m.devices.c.variant_key == b.variant_key)
            .where(b.suite == run.suite, m.devices.c.lineage_key == dev["lineage_key"])
            .order_by(b.set_at.desc()).limit(1)).scalar()
        if found:
            return found, "baseline (other MLX version)"
        same_lineage = select(m.devices.c.id).where(
            m.devices.c.lineage_key == dev["lineage_key"])
        for ids, why in (([dev["id"]], "previous run"),
                         (same_lineage, "previous run (other MLX version)")):
            found = c.execute(
                select(m.runs.c.id).join(m.jobs, m.jobs.c.run_id == m.runs.c.id)
                .where(m.jobs.c.device_id.in_(ids), m.runs.c.id != run.id,
                       m.runs.c.suite == run.suite, m.runs.c.started <= run.started,
                       m.runs.c.status.in_(COMPARABLE_STATUSES))
                .order_by(m.runs.c.started.desc(), m.runs.c.id.desc()).limit(1)).scalar()
            if found:
                return found, why
    return None, f"no comparable earlier run (suite {run.suite} on this device)"


def series_runs(h: History, job: JobData, *, before: int, after: int) -> tuple[list[str],
                                                                               list[str]]:
    """The comparable runs around ``job``'s run, for windowed statistics: up to ``before``
    earlier runs (newest first) and up to ``after`` runs from it on (oldest first, itself
    first): same suite, same device variant."""
    dev, run = job.device, job.run
    r = m.runs.c
    base = (select(r.id).join(m.jobs, m.jobs.c.run_id == r.id)
            .where(m.jobs.c.device_id == dev["id"], r.suite == run.suite,
                   r.status.in_(COMPARABLE_STATUSES))
            .group_by(r.id, r.started))
    with h.engine.connect() as c:
        earlier = list(c.execute(
            base.where((r.started < run.started) | ((r.started == run.started)
                                                    & (r.id < run.id)))
            .order_by(r.started.desc(), r.id.desc()).limit(before)).scalars())
        later = list(c.execute(
            base.where((r.started > run.started) | ((r.started == run.started)
                                                    & (r.id > run.id)))
            .order_by(r.started, r.id).limit(max(after - 1, 0))).scalars())
    return earlier, [run.id, *later]


def match_job(job: JobData, others: list[JobData]) -> JobData | None:
    """The other run's job on the same device: same variant, else same lineage, else same arch
    (emulated never pairs with real)."""
    dev = job.device
    for key in ("variant_key", "lineage_key"):
        for o in others:
            if o.device[key] == dev[key]:
                return o
    for o in others:
        if o.device["arch"] == dev["arch"] and o.device["emulated"] == dev["emulated"]:
            return o
    return None
