"""Regression flags: what changed on a device between a run and its baseline, with evidence.

Pairs are made per device variant (the stable hash of everything that can change a result), so
emulated and real devices are never compared. The baseline of a variant is the run set with
`farm baseline set`; a variant with none is compared with its previous run, and across an MLX
upgrade with the baseline of the same device under the old MLX (fingerprints then only note the
change). Kinds, each a function below:

1. ``kernel_selection`` same (op, dtype, M, K, N), another variant; a fall back to stock: high
2. ``fingerprint``      output digest changed on the same arch and MLX version (else a note)
3. ``new_failure``      an unexpected failure (or crash) of a test that passed in the baseline
4. ``numeric_drift``    deviation grew by more than one ulp, or headroom crossed 0.5 / 0.9
5. ``stale_expectation`` an expected failure passing in N consecutive runs
6. ``perf_drop``        a bench throughput (``*_per_s``) or latency (``*_us``, ``*_ms``) worse
                        than the spread of the baseline's recent samples allows
7. ``consensus``        one device the odd one out among devices of its generation in a run
8. ``implementation_changed`` (a note, never a regression) same (op, dtype, M, K, N) and same
                        variant, but another implementation executed it (``impl``: e.g.
                        ``portable`` -> ``metal-emulated``, ``portable`` -> ``cuda``)

Like is compared with like: every selection records the implementation that executed it
(`kernels.recorder.IMPLEMENTATIONS`), and a change of implementation alone is not a change of
kernel selection, so it raises no ``kernel_selection`` flag but one ``implementation_changed``
note per shape and variant. The measurements of a test whose selections changed implementation
(same variant, another impl) are not compared with the baseline either: ``fingerprint`` and
``numeric_drift`` skip the test, and ``perf_drop`` takes its baseline samples only from results
that ran the same implementations (the note names the tests left out). A selection whose
implementation is unknown (recorded before results carried it) matches any implementation, so
history written before the field existed is compared as it was. A change of variant is flagged
as before, whatever the implementations; the evidence shows both.

Headroom is the fraction of the bound a deviation uses (``deviation / bound``, or a measurement
named ``headroom``): crossing 0.5 is worth a look, crossing 0.9 is about to fail.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any

from sqlalchemy import select

from db import models as m
from db.history import History
from db.queries import resolve_run, run_results

SEVERITIES = ("high", "medium", "low", "note")
STALE_RUNS = 3  # expected failures passing this many runs in a row are stale
PERF_MIN_SAMPLES = 3
PERF_WINDOW = 5  # runs of the baseline's device that give the spread
PERF_MIN_DROP = 0.05  # never flag less than a 5% change, however tight the baseline
HEADROOM_LEVELS = (0.9, 0.5)
ULP_MEASURES = ("deviation_ulps", "ulps")
STOCK = "stock"


@dataclass
class Flag:
    kind: str
    severity: str
    device: str
    variant_key: str
    subject: str  # the test, or the kernel shape, the flag is about
    evidence: str  # one line a person reads
    run_id: str
    against: str | None = None  # the run compared with (None: within the run)
    baseline: Any = None
    current: Any = None
    details: dict = field(default_factory=dict)

    @property
    def is_regression(self) -> bool:
        return self.severity != "note"

    def to_json(self) -> dict:
        return asdict(self)


# (op, dtype, M, K, N, variant) -> the known implementations that executed it
Impls = dict[tuple, set[str]]


@dataclass
class ResultData:
    nodeid: str
    outcome: str
    category: str
    message: str
    expected: str | None
    link: str | None
    measurements: dict[str, list[dict]] = field(default_factory=lambda: defaultdict(list))
    fingerprints: dict[str, str] = field(default_factory=dict)
    impls: Impls = field(default_factory=lambda: defaultdict(set))


@dataclass
class JobData:
    run_id: str
    device: dict
    results: dict[str, ResultData] = field(default_factory=dict)
    # (op, dtype, M, K, N) -> variant -> (reason, nodeids)
    selections: dict[tuple, dict[str, tuple[str | None, set[str]]]] = field(
        default_factory=lambda: defaultdict(dict))
    # (op, dtype, M, K, N, variant) -> known implementation -> nodeids that ran it
    impls: dict[tuple, dict[str, set[str]]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(set)))

    def impls_of(self, key: tuple, variant: str) -> set[str]:
        return set(self.impls.get((*key, variant), {}))


@dataclass
class Comparison:
    device: str
    variant_key: str
    against: str | None
    why: str  # baseline | previous run | --against; or why nothing was compared


@dataclass
class Report:
    run_id: str
    flags: list[Flag]
    comparisons: list[Comparison]

    @property
    def regressions(self) -> list[Flag]:
        return [f for f in self.flags if f.is_regression]

    def to_json(self) -> dict:
        return {"run_id": self.run_id, "flags": [f.to_json() for f in self.flags],
                "comparisons": [asdict(c) for c in self.comparisons]}


def find_regressions(h: History, run_id: str, against: str = "baseline") -> list[Flag]:
    """Every flag for ``run_id`` against each device's baseline or against run ``against``."""
    return analyse(h, run_id, against).flags


def analyse(h: History, run_id: str, against: str = "baseline") -> Report:
    run_id = resolve_run(h, run_id)
    explicit = None if against in (None, "", "baseline") else resolve_run(h, against)
    current = load_jobs(h, run_id)
    flags: list[Flag] = []
    comparisons: list[Comparison] = []
    loaded: dict[str, list[JobData]] = {}
    for job in current:
        dev = job.device
        if explicit is not None:
            other, why = explicit, "--against"
        else:
            other, why = _baseline_for(h, job)
        base = None
        if other is not None and other != run_id:
            if other not in loaded:
                loaded[other] = load_jobs(h, other)
            base = _match(job, loaded[other])
        if base is None:
            if other is None:
                reason = "no baseline and no earlier run on this device"
            elif other == run_id:
                reason = "the baseline is this run itself"
            else:
                reason = f"run {other} ({why}) has no job on this device"
            comparisons.append(Comparison(dev["label"], dev["variant_key"], None,
                                          f"nothing to compare: {reason}"))
        else:
            comparisons.append(Comparison(dev["label"], dev["variant_key"], other, why))
            for check in PAIR_CHECKS:
                flags.extend(check(job, base))
            flags.extend(perf_drop(h, job, base))
        flags.extend(stale_expectations(h, job))
    flags.extend(consensus(current))
    flags.sort(key=lambda f: (SEVERITIES.index(f.severity), f.kind, f.device, f.subject))
    return Report(run_id, flags, comparisons)


# -- loading ------------------------------------------------------------------------------------

def load_jobs(h: History, run_id: str) -> list[JobData]:
    jobs: dict[int, JobData] = {}
    for r in run_results(h, run_id):  # ordered by id: a re-run of a test replaces the earlier
        job = jobs.setdefault(r["job_id"], JobData(run_id, r["device"]))
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
            if s.get("impl"):
                rd.impls[(*key, s["variant"])].add(s["impl"])
                job.impls[(*key, s["variant"])][s["impl"]].add(r["nodeid"])
    # A device that ran twice in one run (a retried job): its last job speaks for it.
    by_variant: dict[str, JobData] = {}
    for job_id in sorted(jobs):
        by_variant[jobs[job_id].device["variant_key"]] = jobs[job_id]
    return list(by_variant.values())


def _baseline_for(h: History, job: JobData) -> tuple[str | None, str]:
    dev = job.device
    with h.engine.connect() as c:
        started = c.execute(select(m.runs.c.started).where(m.runs.c.id == job.run_id)).scalar()
        found = c.execute(select(m.baselines.c.run_id)
                          .where(m.baselines.c.variant_key == dev["variant_key"])).scalar()
        if found:
            return found, "baseline"
        same_device_ids = select(m.devices.c.id).where(
            m.devices.c.lineage_key == dev["lineage_key"])
        found = c.execute(
            select(m.baselines.c.run_id)
            .join(m.devices, m.devices.c.variant_key == m.baselines.c.variant_key)
            .where(m.devices.c.lineage_key == dev["lineage_key"])
            .order_by(m.baselines.c.set_at.desc()).limit(1)).scalar()
        if found:
            return found, "baseline (other MLX version)"
        for ids, why in (([dev["id"]], "previous run"),
                         (same_device_ids, "previous run (other MLX version)")):
            found = c.execute(
                select(m.runs.c.id).join(m.jobs, m.jobs.c.run_id == m.runs.c.id)
                .where(m.jobs.c.device_id.in_(ids), m.runs.c.id != job.run_id,
                       m.runs.c.started <= started,
                       m.runs.c.status.in_(("passed", "failed", "incomplete")))
                .order_by(m.runs.c.started.desc(), m.runs.c.id.desc()).limit(1)).scalar()
            if found:
                return found, why
    return None, "no baseline"


def _match(job: JobData, others: list[JobData]) -> JobData | None:
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


def _flag(kind: str, severity: str, job: JobData, base: JobData | None, subject: str,
          evidence: str, baseline: Any = None, current: Any = None, **details: Any) -> Flag:
    return Flag(kind, severity, job.device["label"], job.device["variant_key"], subject,
                evidence, job.run_id, base.run_id if base else None, baseline, current, details)


# -- like with like -----------------------------------------------------------------------------

def same_impls(now: Impls, before: Impls) -> bool:
    """Whether two results' selections ran the same implementations: every (shape, variant)
    both made, with an implementation known on both sides, ran the same ones."""
    return all(now[k] == before[k] for k in set(now) & set(before) if now[k] and before[k])


def _impl_text(variants: set[str], job: JobData, key: tuple) -> str:
    """``scalar_kmajor[metal]/stock[stock-native]``; a variant of unknown implementation bare."""
    return "/".join(v + (f"[{'/'.join(sorted(i))}]" if (i := job.impls_of(key, v)) else "")
                    for v in sorted(variants))


# -- 1. kernel selection ------------------------------------------------------------------------

def kernel_selection(job: JobData, base: JobData) -> list[Flag]:
    """Another variant for the same shape. The implementation alone changing is not one (see
    `implementation_changed`); when the variant changed, the evidence shows both."""
    out = []
    for key in sorted(set(job.selections) & set(base.selections), key=str):
        now, before = set(job.selections[key]), set(base.selections[key])
        if now == before:
            continue
        op, dtype, M, K, N = key
        shape = f"{op} {dtype} M={M} K={K} N={N}"
        tuned_before = sorted(before - {STOCK})
        fell_back = bool(tuned_before) and STOCK in now and not (now & set(tuned_before))
        reasons = {v: job.selections[key][v][0] for v in sorted(now)}
        tests = sorted(set().union(*(job.selections[key][v][1] for v in now)))
        impls = {"before": {v: sorted(base.impls_of(key, v)) for v in sorted(before)},
                 "now": {v: sorted(job.impls_of(key, v)) for v in sorted(now)}}
        ev = (f"{shape}: {_impl_text(before, base, key)} -> {_impl_text(now, job, key)}"
              f" ({', '.join(f'{v}: {r}' for v, r in reasons.items() if r)})"
              f"{'; fell back to stock from a tuned kernel' if fell_back else ''}")
        out.append(_flag("kernel_selection", "high" if fell_back else "medium", job, base,
                         shape, ev, sorted(before), sorted(now), tests=tests, reasons=reasons,
                         impls=impls))
    return out


# -- 8. implementation changed (a note) ---------------------------------------------------------

def implementation_changed(job: JobData, base: JobData) -> list[Flag]:
    """Same shape, same variant, another implementation: visible, never a regression, and the
    tests whose measurements were therefore not compared are named."""
    out = []
    for key in sorted(set(job.selections) & set(base.selections), key=str):
        for variant in sorted(set(job.selections[key]) & set(base.selections[key])):
            now, before = job.impls_of(key, variant), base.impls_of(key, variant)
            if not now or not before or now == before:
                continue
            op, dtype, M, K, N = key
            shape = f"{op} {dtype} M={M} K={K} N={N}"
            tests = sorted(set().union(*job.impls[(*key, variant)].values()))
            skipped = sorted(n for n in tests if n in base.results
                             and not same_impls(job.results[n].impls, base.results[n].impls))
            ev = (f"{shape}: {variant} ran {'/'.join(sorted(before))} -> "
                  f"{'/'.join(sorted(now))}"
                  + (f"; measurements of {len(skipped)} test(s) not compared across it"
                     if skipped else ""))
            out.append(_flag("implementation_changed", "note", job, base, shape, ev,
                             sorted(before), sorted(now), variant=variant, tests=tests,
                             not_compared=skipped))
    return out


# -- 2. fingerprints ----------------------------------------------------------------------------

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
            out.append(_flag("fingerprint", sev, job, base, nodeid, ev, before[key], now[key],
                             key=key, mlx=[base.device["mlx_version"],
                                           job.device["mlx_version"]]))
    return out


# -- 3. new unexpected failures -----------------------------------------------------------------

def new_failure(job: JobData, base: JobData) -> list[Flag]:
    out = []
    for nodeid in sorted(set(job.results) & set(base.results)):
        now, before = job.results[nodeid], base.results[nodeid]
        if now.category in ("unexpected_fail", "crashed") and before.outcome == "passed":
            msg = now.message.splitlines()[0][:200] if now.message else ""
            out.append(_flag("new_failure", "high", job, base, nodeid,
                             f"{now.outcome} (passed in {base.run_id})" + (f": {msg}" if msg
                                                                            else ""),
                             before.outcome, now.outcome))
    return out


# -- 4. numeric drift ---------------------------------------------------------------------------

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
            out.append(_flag("numeric_drift", "high", job, base, nodeid,
                             f"deviation became non-finite (was {d_before['value']:.6g})",
                             d_before["value"], None))
            continue
        u_now, u_before = _ulps(now), _ulps(before)
        for name in sorted(set(u_now) & set(u_before)):
            grew = u_now[name] - u_before[name]
            if grew > 1:
                out.append(_flag("numeric_drift", "medium", job, base, nodeid,
                                 f"{name} grew by {grew:.3g} ulp ({u_before[name]:.3g} -> "
                                 f"{u_now[name]:.3g})", u_before[name], u_now[name],
                                 measure=name))
        h_now, h_before = _headroom(now), _headroom(before)
        if h_now is None or h_before is None:
            continue
        for level in HEADROOM_LEVELS:
            if h_before < level <= h_now:
                out.append(_flag("numeric_drift", "medium" if level >= 0.9 else "low", job,
                                 base, nodeid,
                                 f"headroom crossed {level}: deviation/bound "
                                 f"{h_before:.3g} -> {h_now:.3g}", h_before, h_now,
                                 measure="headroom", level=level))
                break
    return out


# -- 5. stale expectations ----------------------------------------------------------------------

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
            out.append(_flag("stale_expectation", "low", job, None, nodeid,
                             f"expected to fail ({r.link or 'no link'}) but passed in "
                             f"{len(streak)} consecutive runs: update the expectation",
                             "fail", "pass", runs=streak, link=r.link))
    return out


# -- 6. performance -----------------------------------------------------------------------------

def _direction(name: str) -> int:
    """+1 higher is better (throughput), -1 lower is better (latency), 0 not a perf metric."""
    if name.endswith("_per_s"):
        return 1
    if name.endswith(("_us", "_ms")):
        return -1
    return 0


def _perf_window(h: History, base: JobData, exclude: str) -> list[str]:
    """The baseline run and the runs before it on the same device: the baseline's samples."""
    with h.engine.connect() as c:
        started = c.execute(select(m.runs.c.started).where(m.runs.c.id == base.run_id)).scalar()
        return list(c.execute(
            select(m.runs.c.id).join(m.jobs, m.jobs.c.run_id == m.runs.c.id)
            .where(m.jobs.c.device_id == base.device["id"], m.runs.c.started <= started,
                   m.runs.c.id != exclude,
                   m.runs.c.status.in_(("passed", "failed", "incomplete")))
            .group_by(m.runs.c.id, m.runs.c.started)
            .order_by(m.runs.c.started.desc(), m.runs.c.id.desc())
            .limit(PERF_WINDOW)).scalars())


def _perf_samples(h: History, device_id: int, runs: list[str], current: dict[str, ResultData]
                  ) -> dict[tuple[str, str], list[float]]:
    """The window's samples of the ``current`` tests' bench measures, only from results whose
    selections ran the same implementations as the current result (like with like)."""
    out: dict[tuple[str, str], list[float]] = defaultdict(list)
    nodeids = sorted(current)
    if not runs or not nodeids:
        return out
    q = (select(m.results.c.id, m.results.c.nodeid, m.measurements.c.name,
                m.measurements.c.value)
         .join(m.results, m.results.c.id == m.measurements.c.result_id)
         .join(m.jobs, m.jobs.c.id == m.results.c.job_id)
         .where(m.jobs.c.device_id == device_id, m.jobs.c.run_id.in_(runs),
                m.results.c.nodeid.in_(nodeids), m.measurements.c.value.is_not(None)))
    with h.engine.connect() as c:
        rows = [row for row in c.execute(q) if _direction(row.name)]
        impls: dict[int, Impls] = defaultdict(lambda: defaultdict(set))
        ids = sorted({row.id for row in rows})
        s = m.selections.c
        for i in range(0, len(ids), 500):
            for rid, *key, impl in c.execute(
                    select(s.result_id, s.op, s.dtype, s.M, s.K, s.N, s.variant, s.impl)
                    .where(s.result_id.in_(ids[i:i + 500]), s.impl.is_not(None))):
                impls[rid][tuple(key)].add(impl)
    for row in rows:
        if same_impls(current[row.nodeid].impls, impls[row.id]):
            out[(row.nodeid, row.name)].append(row.value)
    return out


def perf_drop(h: History, job: JobData, base: JobData) -> list[Flag]:
    """Bench measurements get one sample per run, so the baseline's spread comes from the
    baseline run and up to ``PERF_WINDOW - 1`` runs before it on the same device; fewer than
    ``PERF_MIN_SAMPLES`` baseline samples never alert."""
    nodeids = sorted(n for n in set(job.results) & set(base.results)
                     if any(_direction(k) for k in job.results[n].measurements))
    if not nodeids:
        return []
    window = _perf_window(h, base, exclude=job.run_id)
    history = _perf_samples(h, base.device["id"], window, {n: job.results[n] for n in nodeids})
    out = []
    for nodeid in nodeids:
        for name, values in sorted(job.results[nodeid].measurements.items()):
            sign = _direction(name)
            cur = [x["value"] for x in values if x["value"] is not None]
            ref = history.get((nodeid, name), [])
            if not sign or not cur or len(ref) < PERF_MIN_SAMPLES:
                continue
            ref_med, cur_med = statistics.median(ref), statistics.median(cur)
            allowed = max(3 * statistics.stdev(ref), PERF_MIN_DROP * abs(ref_med))
            worse = (ref_med - cur_med) * sign
            if worse > allowed:
                out.append(_flag("perf_drop", "medium", job, base, nodeid,
                                 f"{name} {ref_med:.4g} -> {cur_med:.4g} "
                                 f"({-worse * sign / ref_med:+.1%}); the baseline's "
                                 f"{len(ref)} samples over {len(window)} runs allow "
                                 f"{allowed:.3g}", ref_med, cur_med, name=name,
                                 baseline_samples=ref, samples=cur, runs=window))
    return out


PAIR_CHECKS = (kernel_selection, implementation_changed, fingerprint, new_failure,
               numeric_drift)


# -- 7. cross-device consensus ------------------------------------------------------------------

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
                out.append(_flag("consensus", "medium", j, None, nodeid,
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
            out.append(_flag("consensus", "medium", j, None, nodeid,
                             f"deviation {shown} while the {len(others)} other devices of its "
                             f"generation agree on {center:.6g}", center, vals[i],
                             peers=[o.device["label"] for o in members if o is not j]))
    return out
