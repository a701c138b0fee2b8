"""What a report plots, read from the history: the runs comparable with the one reported on
and, per kernel at a shape and per device and run, the measured values.

Apart from the page (farm.report.html) because these are queries with their own rules (only
runs of the same suite, none after the run reported on; a result plots under the kernel that
served it, not under stock) and they are tested against a real history on their own.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field

from sqlalchemy import select

from db import models as m
from db.details import decode_rows
from db.history import History

BENCH_MEASURE = "rows_per_s"
# The deviation-in-ulps measures the regression analysis judges by; named here so the page
# depends on the analyser only through ``analyse``.
ULP_MEASURES = ("deviation_ulps", "ulps")
PLOT_MEASURES = (*ULP_MEASURES, "headroom", "deviation", BENCH_MEASURE)
STOCK = "stock"


@dataclass(frozen=True)
class PlotKey:
    """A kernel at a shape: the variant that served, its dtype, and (M, K, N)."""

    variant: str
    dtype: str
    M: int
    K: int
    N: int

    @property
    def title(self) -> str:
        return f"{self.variant} · {self.dtype} · M={self.M} K={self.K} N={self.N}"

    @property
    def slug(self) -> str:
        return slugify(f"{self.variant}-{self.dtype}-m{self.M}-{self.K}x{self.N}")


@dataclass
class Cell:
    """The values one device gave one plot in one run (several tests may share a kernel)."""

    values: list[float | None] = field(default_factory=list)
    tests: list[str] = field(default_factory=list)


# plot subject -> measure -> (device id, run id) -> Cell
Trends = dict[object, dict[str, dict[tuple[int, str], Cell]]]


def slugify(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", text).strip("-")



def comparable_runs(h: History, run_id: str, device_ids: list[int], limit: int
                    ) -> dict[str, list[dict]]:
    """Per suite, the last ``limit`` runs started no later than ``run_id`` that ran on one of
    ``device_ids``, oldest first, each with the set of those devices it ran on. Only these
    are comparable: another suite runs other tests, and a run after the one reported on would
    put its future into an old report."""
    r, j = m.runs.c, m.jobs.c
    out: dict[str, list[dict]] = {}
    ran: dict[str, set[int]] = defaultdict(set)
    with h.engine.connect() as c:
        started = c.execute(select(r.started).where(r.id == run_id)).scalar()
        mine = (r.id.in_(select(j.run_id).where(j.device_id.in_(device_ids)))
                & ((r.started < started) | ((r.started == started) & (r.id <= run_id))))
        for suite in sorted(c.execute(select(r.suite).where(mine).distinct()).scalars()):
            rows = c.execute(select(r.id, r.suite, r.started, r.status)
                             .where(mine, r.suite == suite)
                             .order_by(r.started.desc(), r.id.desc())
                             .limit(max(limit, 1))).mappings().all()
            out[suite] = [dict(x) for x in reversed(rows)]
        ids = [x["id"] for runs in out.values() for x in runs]
        for i in range(0, len(ids), 500):
            for rid, dev in c.execute(select(j.run_id, j.device_id).where(
                    j.run_id.in_(ids[i:i + 500]), j.device_id.in_(device_ids))):
                ran[rid].add(dev)
    for runs in out.values():
        for x in runs:
            x["devices"] = ran[x["id"]]
    return out


def _plot_key(sels: list[tuple]) -> PlotKey | None:
    """The kernel a result measured: its first tuned selection (stock is the reference the
    suites compare against), else its first."""
    if not sels:
        return None
    tuned = [s for s in sels if s[0] != STOCK]
    return PlotKey(*(tuned or sels)[0])


def load_trends(h: History, run_ids: list[str], device_ids: list[int]) -> Trends:
    """Per plot subject (a ``PlotKey``, or a bench test's node id), per measure, per (device,
    run): the values recorded. Reads the jobs' results that have measurements, through the job
    index, and keeps the plotted measures (each result's details are JSON, `db.details`)."""
    r, j = m.results.c, m.jobs.c
    q = (select(r.id, r.nodeid, j.run_id, j.device_id, r.measurements_json, r.selections_json)
         .join(m.jobs, j.id == r.job_id)
         .where(j.run_id.in_(run_ids), j.device_id.in_(device_ids),
                r.measurements_json.is_not(None))
         .order_by(r.id))
    with h.engine.connect() as c:
        rows = c.execute(q).all() if run_ids else []
    per_result: dict[int, dict[str, tuple[float | None, float | None]]] = defaultdict(dict)
    where: dict[int, tuple[str, tuple[int, str]]] = {}
    sels: dict[int, list[tuple]] = {}
    for rid, nodeid, run_id, device_id, meas_json, sels_json in rows:
        mine = {}
        for name, value, _unit, bound in decode_rows("measurements", meas_json):
            if name in PLOT_MEASURES:
                mine.setdefault(name, (value, bound))
        if not mine:
            continue
        per_result[rid] = mine
        where[rid] = (nodeid, (device_id, run_id))
        # (variant, dtype, M, K, N) of each selection, in the order the test made them
        sels[rid] = [(x[5], x[1], x[2], x[3], x[4]) for x in decode_rows("selections", sels_json)]
    trends: Trends = defaultdict(lambda: defaultdict(lambda: defaultdict(Cell)))
    for rid, meas in per_result.items():
        nodeid, at = where[rid]
        key = _plot_key(sels.get(rid, []))
        if BENCH_MEASURE in meas:
            _add(trends[("bench", key or nodeid)], BENCH_MEASURE, at, meas[BENCH_MEASURE][0],
                 nodeid)
        if key is None:
            continue
        for name in ULP_MEASURES:
            if name in meas:
                _add(trends[key], name, at, meas[name][0], nodeid)
        if "headroom" in meas:
            _add(trends[key], "headroom", at, meas["headroom"][0], nodeid)
        elif "deviation" in meas and meas["deviation"][1]:
            value = meas["deviation"][0]
            _add(trends[key], "headroom", at,
                 None if value is None else value / meas["deviation"][1], nodeid)
    return trends


def _add(measures: dict, name: str, at: tuple[int, str], value: float | None, test: str) -> None:
    cell = measures[name][at]
    cell.values.append(value)
    cell.tests.append(test)


def series_names(devs: dict[int, dict]) -> dict[int, str]:
    """A name per device variant; variants that share a label (one Mac under two MLX
    versions) get the version, then the key, so no two series read the same."""
    names = {d: dev["label"] for d, dev in devs.items()}
    for extra in (lambda dev: f"MLX {dev['mlx_version']}", lambda dev: dev["variant_key"][:8]):
        taken = defaultdict(list)
        for d, name in names.items():
            taken[name].append(d)
        for same in (ds for ds in taken.values() if len(ds) > 1):
            for d in same:
                names[d] = f"{names[d]} · {extra(devs[d])}"
    return names
