"""History commands: runs, show, history, query, export, regressions, baseline, ingest.

Thin over the `db` library (sqlite-utils style): parse arguments, call one library function,
render a rich table or `--json`. Every error a user can cause is a `FarmError` line. What only
one command needs (export, ingest, the regression analysis) is imported by that command: every
`farm` invocation imports this module.
"""

import json
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from db import open_history
from db.events import CATEGORIES
from db.queries import (
    list_runs,
    resolve_run,
    run_jobs,
    run_query,
    run_suite,
    show_run,
    test_history,
)
from farm.cli.app import app
from farm.errors import EXIT_FLAGGED, EXIT_OK, EXIT_USAGE, FarmError

DbOpt = Annotated[str | None, typer.Option(
    "--db", metavar="URL|PATH",
    help="history database: a SQLite file or an SQLAlchemy URL (default: $FARM_DB, else the "
         "per-user data directory)")]
JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON instead of a table")]
DeviceOpt = Annotated[str | None, typer.Option(
    "--device", metavar="SEL", help="only devices matching a selector list, e.g. g13s,g14")]

SHORT = {"expected_pass": "pass", "expected_fail": "xfail", "unexpected_fail": "FAIL",
         "unexpected_pass": "XPASS", "crashed": "CRASH", "skipped": "skip"}
STYLE = {"expected_pass": "green", "expected_fail": "yellow", "unexpected_fail": "bold red",
         "unexpected_pass": "magenta", "crashed": "bold red", "skipped": "dim"}

baseline_app = typer.Typer(help="Per-device-variant baselines that regressions are judged "
                                "against.", no_args_is_help=True)
app.add_typer(baseline_app, name="baseline")


def _console() -> Console:
    # Piped output (a file, a CI log) gets wide tables instead of rich's 80-column default.
    return Console(highlight=False, soft_wrap=False, width=None if sys.stdout.isatty() else 200)


def _row(t: Table, *cells: str, markup: tuple[int, ...] = ()) -> None:
    """Add a row of data: every cell is escaped (test ids hold [params]) except ``markup``."""
    t.add_row(*(c if i in markup else escape(c) for i, c in enumerate(cells)))


def _echo_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2, sort_keys=True, default=str))


def _when(t: float | None) -> str:
    return "" if t is None else time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t))


def _device_filter(text: str | None):
    """A predicate over device dicts from the farm's selector grammar (`devices.identity`)."""
    if not text:
        return None
    from devices.identity import DeviceIdentity, parse_selectors

    sels = parse_selectors(text)

    def match(d: dict) -> bool:
        ident = DeviceIdentity.from_json({k: d.get(k) for k in DeviceIdentity.__dataclass_fields__})
        return any(s.matches(ident) for s in sels)

    return match


def _counts_text(counts: dict[str, int]) -> str:
    parts = [f"[{STYLE[c]}]{counts[c]} {SHORT[c]}[/]" for c in CATEGORIES if counts.get(c)]
    return " ".join(parts) or "[dim]-[/]"


@app.command("runs")
def runs_cmd(
    suite: Annotated[str | None, typer.Option(help="only runs of this suite")] = None,
    device: DeviceOpt = None,
    limit: Annotated[int, typer.Option(help="at most this many runs, newest first")] = 20,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List runs, newest first, with their devices and result counts."""
    with open_history(db, write=False) as h:
        rows = list_runs(h, suite=suite, device=_device_filter(device), limit=limit)
    if as_json:
        _echo_json(rows)
        return
    t = Table("run", "suite", "status", "started (UTC)", "revision", "devices", "results")
    for r in rows:
        rev = (r["git_sha"] or "")[:10] + ("+dirty" if r["dirty"] else "")
        _row(t, r["run_id"], r["suite"], r["status"], _when(r["started"]), rev,
             "\n".join(r["devices"]), _counts_text(r["counts"]), markup=(6,))
    _console().print(t)


@app.command("show")
def show_cmd(
    run: Annotated[str | None, typer.Argument(
        help="run id, a unique prefix of one, or 'latest' (default: latest)")] = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """A run's device x test matrix, with counts by expectation category, and the kernel
    each device selected per shape with the implementation that executed it."""
    with open_history(db, write=False) as h:
        doc = show_run(h, resolve_run(h, run))
    if as_json:
        _echo_json(doc)
        return
    r = doc["run"]
    con = _console()
    con.print(escape(f"run {r['run_id']}  suite {r['suite']}  status {r['status']}  "
                     f"started {_when(r['started'])} UTC  revision {(r['git_sha'] or '-')[:12]}"
                     f"{' (dirty)' if r['dirty'] else ''}"))
    jobs = Table("device", "variant", "chip", "MLX", "status", "attempts", "results", "error")
    for j in doc["jobs"]:
        d = j["device"]
        _row(jobs, d["label"], d["variant_key"], d["chip"], d["mlx_version"], j["status"],
             str(j["attempts"]), _counts_text(j["counts"]), (j["error"] or "")[:60],
             markup=(6,))
    con.print(jobs)
    matrix = Table("test", *(escape(j["device"]["label"]) for j in doc["jobs"]))
    for row in doc["matrix"]:
        cells = [_counts_text(row["cells"].get(str(j["id"]), {})) for j in doc["jobs"]]
        _row(matrix, row["test_id"], *cells, markup=tuple(range(1, len(cells) + 1)))
    con.print(matrix)
    if doc["selections"]:
        con.print(_selections_table(doc["selections"]))


def _selections_table(rows: list[dict]) -> Table:
    """One row per device and distinct selection, a rule between devices; every row names its
    device (label with "(emulated)", so a grep for one device keeps its rows), and an
    implementation recorded before results carried one reads ``unknown``."""
    t = Table("device", "op", "dtype", "M x K x N", "variant", "impl", "reason", "tests",
              title="kernel selections")
    last = None
    for s in rows:
        if last is not None and s["job_id"] != last:
            t.add_section()
        last = s["job_id"]
        _row(t, s["device"], s["op"], s["dtype"], f"{s['M']} x {s['K']} x {s['N']}",
             s["variant"], s["impl"] or "unknown", s["reason"] or "", str(s["tests"]))
    return t


@app.command("history")
def history_cmd(
    test: Annotated[str, typer.Argument(help="test id (path::name) or full pytest node id")],
    device: DeviceOpt = None,
    limit: Annotated[int, typer.Option(help="at most this many results, newest")] = 50,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """One test's outcomes and measurements over runs, oldest first."""
    with open_history(db, write=False) as h:
        rows = test_history(h, test, device=_device_filter(device), limit=limit)
    if as_json:
        _echo_json(rows)
        return
    t = Table("run", "started (UTC)", "device", "params", "outcome", "category",
              "measurements")
    for r in rows:
        meas = "  ".join(f"{x['name']}={'nan' if x['value'] is None else format(x['value'], '.6g')}"
                         + (f"/{x['bound']:.3g}" if x["bound"] is not None else "")
                         for x in r["measurements"])
        cat = f"[{STYLE[r['category']]}]{r['category']}[/]" if r["category"] in STYLE else escape(
            r["category"])
        _row(t, r["run_id"], _when(r["started"]), r["device"], r["params"], r["outcome"], cat,
             meas, markup=(5,))
    _console().print(t)


@app.command("query")
def query_cmd(
    sql: Annotated[str, typer.Argument(help="one SQL statement; the database refuses writes")],
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Run read-only SQL on the history (tables: runs, jobs, devices, results, ...)."""
    with open_history(db, write=False) as h:
        cols, rows = run_query(h, sql)
    if as_json:
        _echo_json([dict(zip(cols, r, strict=True)) for r in rows])
        return
    t = Table(*(escape(c) for c in cols)) if cols else Table("(no rows)")
    for r in rows:
        _row(t, *("NULL" if v is None else str(v) for v in r))
    _console().print(t)


@app.command("export")
def export_cmd(
    run: Annotated[str, typer.Argument(help="run id, a unique prefix of one, or 'latest'")],
    fmt: Annotated[str, typer.Option("--format", help="junit | json | csv")] = "json",
    output: Annotated[Path | None, typer.Option("--output", "-o",
                                                help="write here instead of stdout")] = None,
    db: DbOpt = None,
) -> None:
    """Write one run as JUnit XML, JSON or CSV."""
    from db.export import export_run

    with open_history(db, write=False) as h:
        text = export_run(h, resolve_run(h, run), fmt)
    if output is None:
        typer.echo(text, nl=False)
        return
    try:
        output.write_text(text, encoding="utf-8")
    except OSError as e:
        raise FarmError(f"cannot write {output}: {e.strerror or e}", EXIT_USAGE) from None


@app.command("regressions")
def regressions_cmd(
    run: Annotated[str | None, typer.Argument(help="run id or prefix (default: latest)")] = None,
    against: Annotated[str, typer.Option(help="'baseline' (per device variant) or a run id")
                       ] = "baseline",
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Flag what regressed in a run; exit 1 when anything did, 0 when nothing did."""
    from db.regressions import analyse

    with open_history(db, write=False) as h:
        report = analyse(h, resolve_run(h, run), against)
    if as_json:
        _echo_json(report.to_json())
    else:
        con = _console()
        for c in report.comparisons:
            con.print(escape(f"{c.device} [{c.variant_key}]: "
                             + (f"against {c.against} ({c.why})" if c.against else c.why)))
        if report.flags:
            t = Table("severity", "kind", "device", "subject", "evidence")
            for f in report.flags:
                _row(t, f.severity, f.kind, f.device, f.subject, f.evidence)
            con.print(t)
        n = len(report.regressions)
        if not report.compared and not report.flags:
            # Nothing was compared: saying "0 regressions" would claim a check that never ran.
            con.print(escape(f"no comparable earlier run (suite {report.suite}) for run "
                             f"{report.run_id}: nothing compared"))
        else:
            con.print(escape(f"{n} regression(s)" + (f", {len(report.flags) - n} note(s)"
                                                     if len(report.flags) > n else "")
                             + f" in run {report.run_id}"))
    # SystemExit, not typer.Exit: `farm.cli.app.main` runs click with standalone_mode=False, where an
    # Exit's code is returned (and dropped), while SystemExit reaches the shell as is.
    raise SystemExit(EXIT_FLAGGED if report.regressions else EXIT_OK)


@baseline_app.command("set")
def baseline_set_cmd(
    run: Annotated[str, typer.Argument(help="run id, a unique prefix of one, or 'latest'")],
    device: DeviceOpt = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Make RUN the baseline of its suite on every device variant it ran on (or those matching
    --device); other suites' baselines are untouched (a baseline is per suite and device)."""
    match = _device_filter(device)
    with open_history(db) as h:
        run_id = resolve_run(h, run)
        jobs = [j for j in run_jobs(h, run_id) if match is None or match(j["device"])]
        if not jobs:
            raise FarmError(f"run {run_id} has no job on {'a matching' if device else 'any'} "
                            f"device: nothing to set", EXIT_USAGE)
        h.set_baseline(run_id, [j["device"]["variant_key"] for j in jobs])
        suite = run_suite(h, run_id)
    rows = [{"suite": suite, "variant_key": j["device"]["variant_key"],
             "device": j["device"]["label"], "run_id": run_id} for j in jobs]
    if as_json:
        _echo_json(rows)
        return
    for r in rows:
        typer.echo(f"baseline of suite {r['suite']} on {r['device']} [{r['variant_key']}] is "
                   f"now run {run_id}")


@baseline_app.command("list")
def baseline_list_cmd(db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Every (suite, device variant)'s baseline run."""
    with open_history(db, write=False) as h:
        cols, rows = run_query(h, "SELECT b.suite, b.variant_key, d.arch, d.emulated, d.host, "
                                  "d.mlx_version, b.run_id, b.set_at FROM baselines b "
                                  "JOIN devices d ON d.variant_key = b.variant_key "
                                  "ORDER BY b.suite, d.arch, d.host")
    data = [dict(zip(cols, r, strict=True)) for r in rows]
    if as_json:
        _echo_json(data)
        return
    t = Table("suite", "variant", "device", "host", "MLX", "baseline run", "set (UTC)")
    for r in data:
        _row(t, r["suite"], r["variant_key"], r["arch"] + (" (emulated)" if r["emulated"] else ""),
             r["host"], r["mlx_version"], r["run_id"], _when(r["set_at"]))
    _console().print(t)


@app.command("ingest")
def ingest_cmd(
    path: Annotated[Path, typer.Argument(help="a results file from `pytest --results-jsonl`")],
    suite: Annotated[str | None, typer.Option(help="suite name to record (default: the "
                                                   "file's)")] = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Record a results file from a device outside the cluster as a run."""
    from db.ingest import events_digest, ingest_jsonl, ingested_run, load_jsonl

    events = load_jsonl(path)  # a bad file is refused before the history is opened
    with open_history(db) as h:
        before = ingested_run(h, events_digest(events))
        run_id = ingest_jsonl(h, path, suite=suite, events=events)
        doc = show_run(h, run_id)
    if as_json:
        _echo_json(doc["run"])
        return
    if before is not None:  # idempotent: the same results are one run
        typer.echo(f"already recorded as run {run_id} ({doc['run']['status']}): {path} "
                   f"holds the same results; nothing written")
        return
    typer.echo(f"recorded run {run_id} ({doc['run']['status']}) from {path}")
