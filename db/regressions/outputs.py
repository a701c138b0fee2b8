"""What a test's outputs say: fingerprints, failures, numeric drift, stale expectations, and
one device the odd one out among its generation.

Each compares a test's result with the same test's result in the comparable run (same suite,
same device variant), and skips a test whose selections ran another implementation there:
another implementation computes other numbers (see ``implementation_changed``).

Headroom is the fraction of the bound a deviation uses (``deviation / bound``, or a measurement
named ``headroom``): crossing 0.5 is worth a look, crossing 0.9 is about to fail.
"""

from __future__ import annotations

import statistics
from collections import defaultdict

from sqlalchemy import select

from db import models as m
from db.history import History
from db.regressions.model import Flag, JobData, ResultData, make_flag, same_impls

STALE_RUNS = 3  # expected failures passing this many runs in a row are stale
HEADROOM_LEVELS = (0.9, 0.5)
ULP_MEASURES = ("deviation_ulps", "ulps")


# -- fingerprints ----------------------------------------------------------------------------

def fingerprint(job: JobData, base: JobData) -> list[Flag]:
    if job.device["arch"] != base.device["arch"]:
        return []
    same_mlx = job.device["mlx_version"] == base.device["mlx_version"]
    out = []
    for nodeid in sorted(set(job.results) & set(base.results)):
        if not same_impls(job.results[nodeid].impls, base.results[nodeid].impls):
            continue  # another implementation computed it: see implementation_changed
        now, before = job.results[nodeid].fingerprints, base.results[nodeid].fingerprints
        for key in sorted(set(now) & set(before)):
            if now[key] == before[key]:
                continue
            if same_mlx:
                ev = (f"{key}: digest {before[key][:12]} -> {now[key][:12]} on "
                      f"{job.device['arch']} with MLX {job.device['mlx_version']}")
                sev = "medium"
            else:
                ev = (f"{key}: digest changed, and only the MLX version changed "
                      f"({base.device['mlx_version']} -> {job.device['mlx_version']})")
                sev = "note"
            out.append(make_flag("fingerprint", sev, job, base, nodeid, ev, before[key], now[key],
                             key=key, mlx=[base.device["mlx_version"],
                                           job.device["mlx_version"]]))
    return out


# -- new unexpected failures -----------------------------------------------------------------

def new_failure(job: JobData, base: JobData) -> list[Flag]:
    out = []
    for nodeid in sorted(set(job.results) & set(base.results)):
        now, before = job.results[nodeid], base.results[nodeid]
        if now.category in ("unexpected_fail", "crashed") and before.outcome == "passed":
            msg = now.message.splitlines()[0][:200] if now.message else ""
            out.append(make_flag("new_failure", "high", job, base, nodeid,
                             f"{now.outcome} (passed in {base.run_id})" + (f": {msg}" if msg
                                                                            else ""),
                             before.outcome, now.outcome))
    return out


# -- numeric drift ---------------------------------------------------------------------------

def _first(r: ResultData, name: str) -> dict | None:
    vals = r.measurements.get(name)
    return vals[0] if vals else None


def _headroom(r: ResultData) -> float | None:
    if (hr := _first(r, "headroom")) is not None:
        return hr["value"]
    dev = _first(r, "deviation")
    if dev is None or dev["value"] is None:
        return None
    bound = dev["bound"]
    if bound is None and (b := _first(r, "bound")) is not None:
        bound = b["value"]
    return dev["value"] / bound if bound else None


def _ulps(r: ResultData) -> dict[str, float]:
    """Deviation in ulps, by measure: the suites record ``deviation_ulps`` (against stock) and
    ``ulps`` (against float64); a deviation in ulp units or an ``ulp`` size also count."""
    out = {}
    for name in ULP_MEASURES:
        if (u := _first(r, name)) is not None and u["value"] is not None:
            out[name] = u["value"]
    dev = _first(r, "deviation")
    if out or dev is None or dev["value"] is None:
        return out
    if (dev["unit"] or "").lower() in ("ulp", "ulps"):
        out["deviation"] = dev["value"]
    elif (ulp := _first(r, "ulp")) is not None and ulp["value"]:
        out["deviation/ulp"] = dev["value"] / ulp["value"]
    return out


def numeric_drift(job: JobData, base: JobData) -> list[Flag]:
    out = []
    for nodeid in sorted(set(job.results) & set(base.results)):
        now, before = job.results[nodeid], base.results[nodeid]
        if not same_impls(now.impls, before.impls):
            continue  # another implementation computed it: see implementation_changed
        d_now, d_before = _first(now, "deviation"), _first(before, "deviation")
        if d_now and d_before and d_now["value"] is None and d_before["value"] is not None:
            out.append(make_flag("numeric_drift", "high", job, base, nodeid,
                             f"deviation became non-finite (was {d_before['value']:.6g})",
                             d_before["value"], None))
            continue
        u_now, u_before = _ulps(now), _ulps(before)
        for name in sorted(set(u_now) & set(u_before)):
            grew = u_now[name] - u_before[name]
            if grew > 1:
                out.append(make_flag("numeric_drift", "medium", job, base, nodeid,
                                 f"{name} grew by {grew:.3g} ulp ({u_before[name]:.3g} -> "
                                 f"{u_now[name]:.3g})", u_before[name], u_now[name],
                                 measure=name))
        h_now, h_before = _headroom(now), _headroom(before)
        if h_now is None or h_before is None:
            continue
        for level in HEADROOM_LEVELS:
            if h_before < level <= h_now:
                out.append(make_flag("numeric_drift", "medium" if level >= 0.9 else "low", job,
                                 base, nodeid,
                                 f"headroom crossed {level}: deviation/bound "
                                 f"{h_before:.3g} -> {h_now:.3g}", h_before, h_now,
                                 measure="headroom", level=level))
                break
    return out



# -- stale expectations ----------------------------------------------------------------------

def stale_expectations(h: History, job: JobData, runs_needed: int = STALE_RUNS) -> list[Flag]:
    passing = [n for n, r in job.results.items() if r.category == "unexpected_pass"]
    if not passing:
        return []
    q = (select(m.results.c.nodeid, m.results.c.category, m.runs.c.id)
         .join(m.jobs, m.jobs.c.id == m.results.c.job_id)
         .join(m.runs, m.runs.c.id == m.jobs.c.run_id)
         .where(m.jobs.c.device_id == job.device["id"], m.results.c.nodeid.in_(passing),
                m.runs.c.started <= select(m.runs.c.started)
                .where(m.runs.c.id == job.run_id).scalar_subquery())
         .order_by(m.runs.c.started.desc(), m.runs.c.id.desc(), m.results.c.id.desc()))
    series: dict[str, list[tuple[str, str]]] = defaultdict(list)
    with h.engine.connect() as c:
        for nodeid, cat, run in c.execute(q):
            if not series[nodeid] or series[nodeid][-1][0] != run:  # latest result per run
                series[nodeid].append((run, cat))
    out = []
    for nodeid in sorted(passing):
        streak = []
        for run, cat in series[nodeid]:
            if cat != "unexpected_pass":
                break
            streak.append(run)
        if len(streak) >= runs_needed:
            r = job.results[nodeid]
            out.append(make_flag("stale_expectation", "low", job, None, nodeid,
                             f"expected to fail ({r.link or 'no link'}) but passed in "
                             f"{len(streak)} consecutive runs: update the expectation",
                             "fail", "pass", runs=streak, link=r.link))
    return out



# -- cross-device consensus ------------------------------------------------------------------

def _group(dev: dict) -> tuple:
    return (dev["generation"] if dev["generation"] is not None else dev["arch"],
            dev["emulated"], dev["mlx_version"])


def consensus(jobs: list[JobData]) -> list[Flag]:
    """Within one run: a device whose fingerprint or deviation disagrees with every other
    device of its generation, while those others agree among themselves (three or more)."""
    groups: dict[tuple, list[JobData]] = defaultdict(list)
    for j in jobs:
        groups[_group(j.device)].append(j)
    out = []
    for members in groups.values():
        if len(members) < 3:
            continue
        nodeids = set.intersection(*(set(j.results) for j in members))
        for nodeid in sorted(nodeids):
            out.extend(_odd_fingerprints(members, nodeid))
            out.extend(_odd_deviation(members, nodeid))
    return out


def _odd_fingerprints(members: list[JobData], nodeid: str) -> list[Flag]:
    out = []
    keys = set.intersection(*(set(j.results[nodeid].fingerprints) for j in members))
    for key in sorted(keys):
        digests = [j.results[nodeid].fingerprints[key] for j in members]
        for i, j in enumerate(members):
            others = digests[:i] + digests[i + 1:]
            if len(set(others)) == 1 and digests[i] != others[0]:
                out.append(make_flag("consensus", "medium", j, None, nodeid,
                                 f"{key}: digest {digests[i][:12]} differs from the "
                                 f"{len(others)} other devices of its generation "
                                 f"({others[0][:12]})", others[0], digests[i], key=key,
                                 peers=[o.device["label"] for o in members if o is not j]))
    return out


def _odd_deviation(members: list[JobData], nodeid: str) -> list[Flag]:
    devs = [_first(j.results[nodeid], "deviation") for j in members]
    if any(d is None for d in devs):
        return []
    vals = [d["value"] for d in devs]
    out = []
    for i, j in enumerate(members):
        others = vals[:i] + vals[i + 1:]
        if any(v is None for v in others):
            continue
        center = statistics.median(others)
        tol = max(max(others) - min(others), 0.25 * abs(center), 1e-12)
        if vals[i] is None or abs(vals[i] - center) > 2 * tol:
            shown = "non-finite" if vals[i] is None else f"{vals[i]:.6g}"
            out.append(make_flag("consensus", "medium", j, None, nodeid,
                             f"deviation {shown} while the {len(others)} other devices of its "
                             f"generation agree on {center:.6g}", center, vals[i],
                             peers=[o.device["label"] for o in members if o is not j]))
    return out
