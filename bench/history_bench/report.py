"""The history bench's verdicts against its targets, and the console table and markdown made
from the results document alone (history.json), so a report can be rendered again without
measuring."""

from __future__ import annotations

TARGET_INGEST = 50_000.0  # results/s
TARGET_REGRESSIONS_S = 0.5  # at 1M results
TARGET_HISTORY_S = 0.1  # `farm history TEST` at 1M results


def fmt_ms(s: float) -> str:
    return f"{s * 1e3:.0f} ms" if s >= 0.1 else f"{s * 1e3:.1f} ms"


def render(doc: dict) -> tuple[str, str]:
    """(console text, markdown) of the results."""
    hdr = ["results", "runs", "db MiB", "ingest res/s", "(CPU-time res/s)",
           "beside: library", "beside: raw sqlite3", "show", "history", "history(node)",
           "regressions", "CLI show", "CLI history", "CLI regressions"]
    rows = []
    for s in doc["sizes"]:
        lib, c, b = s["library"], s.get("cli", {}), s.get("beside")
        rows.append([f"{s['results']:,}", f"{s['runs']:,}", f"{s['db_bytes'] / 2**20:.0f}",
                     f"{s['ingest']['results_per_s']:,.0f}",
                     f"{s['ingest']['cpu_results_per_s']:,.0f}",
                     f"{b['library']['results_per_s']:,.0f}" if b else "-",
                     f"{b['raw_sqlite3']['results_per_s']:,.0f}" if b else "-",
                     *(fmt_ms(lib[k]["median_s"]) for k in
                       ("show", "history", "history_node", "regressions")),
                     *(f"{c[k]['wall_s']:.2f} s ({c[k].get('cpu_s', 0):.2f} CPU)" if k in c
                       else "-" for k in ("show", "history", "regressions"))])
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(hdr)]
    line = lambda cells: "  ".join(x.rjust(w) for x, w in zip(cells, widths))
    text = [line(hdr), line(["-" * w for w in widths]), *map(line, rows)]
    md = ["| " + " | ".join(hdr) + " |", "|" + "|".join("---:" for _ in hdr) + "|",
          *("| " + " | ".join(r) + " |" for r in rows)]
    return "\n".join(text), "\n".join(md)


def verdicts(doc: dict) -> list[str]:
    out = []
    for s in doc["sizes"]:
        rate = s["ingest"]["results_per_s"]
        out.append(f"ingestion up to {s['results']:,} results: {rate:,.0f} results/s "
                   f"({'meets' if rate >= TARGET_INGEST else 'MISSES'} >= {TARGET_INGEST:,.0f})")
        if b := s.get("beside"):
            out.append(f"  beside it, in turns at that size: library "
                       f"{b['library']['results_per_s']:,.0f} results/s (ingest_events alone "
                       f"{b['library']['ingest_events_results_per_s']:,.0f}/s), plain sqlite3 "
                       f"executemany of the same rows {b['raw_sqlite3']['results_per_s']:,.0f}"
                       f"/s (CPU time: {b['library']['cpu_results_per_s']:,.0f} vs "
                       f"{b['raw_sqlite3']['cpu_results_per_s']:,.0f}/s)")
    big = [s for s in doc["sizes"] if s["results"] >= 1_000_000]
    if big:
        hist = big[-1]["library"]["history"]["median_s"]
        out.append(f"farm history (library call) at {big[-1]['results']:,} results: "
                   f"{hist * 1e3:.1f} ms ({'meets' if hist <= TARGET_HISTORY_S else 'MISSES'} "
                   f"<= {TARGET_HISTORY_S * 1e3:.0f} ms)")
        if c := big[-1].get("cli", {}).get("history"):
            out.append(f"farm history (CLI, wall incl. interpreter start, median of 3) at "
                       f"{big[-1]['results']:,} results: {c['wall_s'] * 1e3:.0f} ms, "
                       f"{c['cpu_s'] * 1e3:.0f} ms CPU "
                       f"({'meets' if c['wall_s'] <= TARGET_HISTORY_S else 'MISSES'} "
                       f"<= {TARGET_HISTORY_S * 1e3:.0f} ms; `farm --help` alone: "
                       f"{big[-1]['cli_startup']['wall_s'] * 1e3:.0f} ms)")
        r = big[-1]["library"]["regressions"]["median_s"]
        out.append(f"regressions at {big[-1]['results']:,} results: {r:.3f} s "
                   f"({'meets' if r <= TARGET_REGRESSIONS_S else 'MISSES'} <= "
                   f"{TARGET_REGRESSIONS_S} s)")
    else:
        out.append("regressions at 1M: not measured in this run (sizes below 1M)")
    return out


def plan_summary(doc: dict) -> tuple[list[str], list[str]]:
    """(findings, indexes no benchmarked statement used) at the largest size."""
    last = doc["sizes"][-1]
    findings = sorted({f"{q}: {f}" for q, plans in last["plans"].items() for p in plans
                       for f in p["findings"]})
    used = {i for plans in last["plans"].values() for p in plans for i in p["indexes"]}
    unused = sorted(f"{name} ({table})" for name, table in last["indexes"].items()
                    if name not in used)
    return findings, unused


def markdown(doc: dict, table: str) -> str:
    sh, mach = doc["shape"], doc["machine"]
    startup = ", ".join(f"{s['cli_startup']['wall_s']:.2f} s "
                        f"({s['cli_startup']['cpu_s']:.2f} CPU)" for s in doc["sizes"]
                        if "cli_startup" in s) or "-"
    lines = [
        "# History benchmark",
        "",
        (f"`bench/bench_history.py`, {doc['when']}: {mach['cpus']} CPUs shared with other work "
         f"(1-min load {mach['load_avg_start'][0]:.1f} at start, {mach['load_avg_end'][0]:.1f} "
         f"at end), SQLite {mach['sqlite']}, SQLAlchemy {mach['sqlalchemy']}."),
        "",
        (f"Synthetic runs of the shipped suites' shape: {sh['devices']} devices x "
        f"{sh['tests_per_device']} tests = {sh['results_per_run']} results per run, each result "
        f"with its measurements, kernel selections and fingerprints; MLX upgraded every "
        f"{sh['mlx_upgrade_every_runs']} runs; {sh['baselined_devices']} devices have a "
        f"baseline (first run). Ingested through `History.start_run/add_job/ingest_events/"
        f"finish_job/finish_run`, one `ingest_events` per job (<= {sh['batch']} results). "
        f"Ingestion rate: results of each growth segment / wall time inside the library calls "
        f"(CPU-time rate beside it). Beside: at each size, in turns, one run through the "
        f"library and one by plain sqlite3 (`executemany` of the same row tuples, "
        f"`db.events.batch_rows`, built inside the timer; same schema and pragmas; one "
        f"transaction per job), 3 turns each, so both meet the same size and load. Library "
        f"latency: median of 5 on a read-only History. CLI: the installed `farm ... --db`, "
        f"median of 3, wall time including interpreter start, and the child's CPU time "
        f"(`farm --help` alone: {startup}). "
        f"`history`: `{sh['history_test']}` (every param); `history(node)`: "
        f"`{sh['history_node']}`; `show` and `regressions`: the latest run."),
        "",
        table,
        "",
        "## Targets",
        "",
        *(f"- {v}" for v in doc["verdicts"]),
        "",
        "## Query plans (largest size)",
        "",
        *(f"- {f}" for f in doc["findings"]),
        *([] if doc["findings"] else [("- no full scan of a large table in any statement of "
                                        "show / history / regressions")]),
        ("- indexes none of these statements used (a write cost for ingestion; other commands "
         "and `farm query` may use them): ")
        + (", ".join(doc["indexes_unused_by_these_commands"]) or "none"),
    ]
    if "small_db_comparison" in doc:
        lines += ["", "## Ingestion into an empty database, 3 runs", "",
                  *(f"- {k}: {v['results_per_s']:,.0f} results/s "
                    f"({v['cpu_results_per_s']:,.0f}/s of CPU time)"
                    for k, v in doc["small_db_comparison"].items())]
    if doc.get("notes"):
        lines += ["", "## Notes", "", *doc["notes"]]
    return "\n".join(lines) + "\n"
