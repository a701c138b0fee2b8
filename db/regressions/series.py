"""Measurements judged over windows of comparable runs: performance and draft acceptance.

A bench measure gets one sample per run, and timings on shared machines are noisy, so one run
against one baseline says little. As Perfherder does, a run is judged by Welch's t-test between
the window of up to ``BACK`` comparable runs before it and the window of up to ``FORE`` runs
from it on (the run itself first), flagging only a t above ``T_THRESHOLD`` *and* a change of at
least ``MIN_EFFECT`` of the earlier mean. A fore window of one run (the newest run, analysed as
it finishes) has no variance of its own; the earlier window's variance stands in for it, which
is the t of one new observation against a sample. Comparable: same suite, same device variant,
and selections that ran the same implementations (like with like).

Acceptance (mean accepted draft tokens per block) is deterministic for a given tree and
device, so any real drop matters: it is flagged when it falls below the earlier window's mean
by more than three of its standard deviations and ``ACCEPT_MIN_DROP``; a collapse to (nearly)
zero, the silent failure of a W4A16 draft on an M1 Max, is high severity.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict

from sqlalchemy import select

from db import models as m
from db.details import decode_rows
from db.history import History
from db.regressions.load import series_runs
from db.regressions.model import Flag, Impls, JobData, ResultData, make_flag, same_impls

BACK = 12
FORE = 12
MIN_BACK = 5  # fewer earlier samples than this never alert
T_THRESHOLD = 7.0  # Perfherder's default
MIN_EFFECT = 0.02  # and never less than a 2% change (Perfherder's alert threshold)
ACCEPTANCE_MEASURES = ("accepted_per_block", "mean_accepted")
ACCEPT_MIN_DROP = 0.25  # tokens per block, or ACCEPT_MIN_REL of the mean, whichever larger
ACCEPT_MIN_REL = 0.10
ACCEPT_COLLAPSED = 0.05  # tokens per block: "nothing accepted"


def direction(name: str) -> int:
    """+1 higher is better (throughput), -1 lower is better (latency), 0 not a perf metric."""
    if name in ACCEPTANCE_MEASURES:
        return 0
    if name.endswith("_per_s"):
        return 1
    if name.endswith(("_us", "_ms")):
        return -1
    return 0


def welch_t(back: list[float], fore: list[float]) -> float:
    """Welch's t of ``fore`` against ``back`` (unequal variances); a single fore sample borrows
    back's variance. Written out rather than taken from scipy: two lines, and no precision
    warnings on the constant windows deterministic measures give."""
    var_b = statistics.variance(back) if len(back) >= 2 else 0.0
    var_f = statistics.variance(fore) if len(fore) >= 2 else var_b
    diff = statistics.fmean(fore) - statistics.fmean(back)
    scale = math.sqrt(var_b / len(back) + var_f / len(fore))
    if scale == 0:
        return 0.0 if diff == 0 else math.copysign(math.inf, diff)
    return diff / scale


def _samples(h: History, device_id: int, runs: list[str], current: dict[str, ResultData],
             names: set[str]) -> dict[tuple[str, str], dict[str, list[float]]]:
    """(nodeid, measure) -> run -> values, from results whose selections ran the same
    implementations as the current result."""
    out: dict[tuple[str, str], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    if not runs or not current:
        return out
    r = m.results.c
    q = (select(r.nodeid, m.jobs.c.run_id, r.measurements_json, r.selections_json)
         .join(m.jobs, m.jobs.c.id == r.job_id)
         .where(m.jobs.c.device_id == device_id, m.jobs.c.run_id.in_(runs),
                r.nodeid.in_(sorted(current)), r.measurements_json.is_not(None)))
    with h.engine.connect() as c:
        rows = c.execute(q).all()
    for nodeid, run_id, meas, sels in rows:
        values = [(x[0], x[1]) for x in decode_rows("measurements", meas)
                  if x[0] in names and x[1] is not None]
        if not values:
            continue
        impls: Impls = defaultdict(set)
        for x in decode_rows("selections", sels):
            if x[7] is not None:  # impl
                impls[tuple(x[:6])].add(x[7])  # (op, dtype, M, K, N, variant)
        if same_impls(current[nodeid].impls, impls):
            for name, value in values:
                out[(nodeid, name)][run_id].append(value)
    return out


def _window(by_run: dict[str, list[float]], runs: list[str]) -> list[float]:
    """One sample per run (the median of its values), in ``runs`` order."""
    return [statistics.median(by_run[r]) for r in runs if by_run.get(r)]


def _measured(job: JobData, names: set[str] | None, want) -> dict[str, ResultData]:
    return {n: r for n, r in job.results.items()
            if any(want(k) and (names is None or k in names) for k in r.measurements)}


def _t_at(seq: list[float | None], i: int) -> float | None:
    """Welch's t at position ``i`` of a series (oldest first): the window before against the
    window from ``i`` on; None where ``i`` has no sample or too few come before it."""
    if not 0 <= i < len(seq) or seq[i] is None:
        return None
    back = [x for x in seq[max(0, i - BACK):i] if x is not None]
    fore = [x for x in seq[i:i + FORE] if x is not None]
    if len(back) < MIN_BACK:
        return None
    return welch_t(back, fore)


def perf_drop(h: History, job: JobData) -> list[Flag]:
    """A run is flagged where the step is: its t must pass the threshold and be the largest
    of its neighbours' (a step's later runs have smaller t, their earlier windows holding part of
    the step), so one step is one flag, not one per run after it."""
    current = _measured(job, None, direction)
    if not current:
        return []
    earlier, later = series_runs(h, job, before=BACK + 1, after=FORE + 1)
    names = {k for r in current.values() for k in r.measurements if direction(k)}
    samples = _samples(h, job.device["id"], earlier + later, current, names)
    order = [*reversed(earlier), *later]
    i = len(earlier)
    out = []
    for (nodeid, name), by_run in sorted(samples.items()):
        if not by_run.get(job.run_id):
            continue
        sign = direction(name)
        seq = [statistics.median(by_run[r]) if by_run.get(r) else None for r in order]
        t = _t_at(seq, i)
        if t is None or t * sign > -T_THRESHOLD:
            continue
        prev, nxt = _t_at(seq, i - 1), _t_at(seq, i + 1)
        if ((prev is not None and prev * t > 0 and abs(prev) > abs(t))
                or (nxt is not None and nxt * t > 0 and abs(nxt) >= abs(t))):
            continue  # the step is at a neighbour
        back = [x for x in seq[max(0, i - BACK):i] if x is not None]
        fore = [x for x in seq[i:i + FORE] if x is not None]
        mean_b, mean_f = statistics.fmean(back), statistics.fmean(fore)
        effect = (mean_f - mean_b) / abs(mean_b) * sign if mean_b else 0.0
        if effect > -MIN_EFFECT:
            continue
        ev = (f"{name} {mean_b:.4g} -> {mean_f:.4g} ({(mean_f - mean_b) / mean_b:+.1%}); "
              f"Welch t {abs(t):.3g} > {T_THRESHOLD:g} over {len(back)} earlier and "
              f"{len(fore)} later run(s)")
        out.append(make_flag("perf_drop", "medium", job, None, nodeid, ev, mean_b, mean_f,
                             name=name, t=abs(t), effect=effect, baseline_samples=back,
                             samples=fore))
    return out


def acceptance_drop(h: History, job: JobData) -> list[Flag]:
    names = set(ACCEPTANCE_MEASURES)
    current = _measured(job, names, lambda k: True)
    if not current:
        return []
    earlier, _ = series_runs(h, job, before=BACK, after=1)
    samples = _samples(h, job.device["id"], [*earlier, job.run_id], current, names)
    out = []
    for (nodeid, name), by_run in sorted(samples.items()):
        back, now = _window(by_run, earlier), by_run.get(job.run_id)
        if not back or not now:
            continue
        cur = statistics.median(now)
        mean_b = statistics.fmean(back)
        sd = statistics.stdev(back) if len(back) >= 2 else 0.0
        allowed = max(3 * sd, ACCEPT_MIN_DROP, ACCEPT_MIN_REL * mean_b)
        if mean_b - cur <= allowed:
            continue
        collapsed = cur <= ACCEPT_COLLAPSED
        ev = (f"{name} {mean_b:.3g} -> {cur:.3g} tokens/block"
              + (" (acceptance collapsed: the draft's tokens are all rejected)" if collapsed
                 else f" (more than the {allowed:.3g} the earlier {len(back)} run(s) allow)"))
        out.append(make_flag("acceptance_drop", "high" if collapsed else "medium", job, None,
                             nodeid, ev, mean_b, cur, name=name, baseline_samples=back,
                             runs=earlier))
    return out
