"""The score: kill rates per source, variant and kind, and the report with every survivor
and its judgement."""

from __future__ import annotations

from mutation.generate import KINDS
from mutation.judged import JUDGEMENTS
from mutation.slots import DEVICES, SUITE


def _rate(killed: int, compiling: int) -> str:
    return f"{100.0 * killed / compiling:.1f}%" if compiling else "-"


def summarize(mutants: list[dict], results: dict[str, dict], exercised: dict) -> dict:
    def row(ms: list[dict]) -> dict:
        rs = [results[m["id"]] for m in ms if m["id"] in results]
        compiling = [r for r in rs if r.get("compiles")]
        killed = [r for r in compiling if r.get("killed")]
        equivalent = [r for r in compiling if not r.get("killed")
                      and JUDGEMENTS.get(r["id"], ("", ""))[0] == "equivalent"]
        nonequiv = len(compiling) - len(equivalent)
        return {"mutants": len(ms), "done": len(rs), "compiling": len(compiling),
                "killed": len(killed), "survived": len(compiling) - len(killed),
                "equivalent": len(equivalent), "kill_rate": _rate(len(killed), len(compiling)),
                "kill_rate_non_equivalent": _rate(len(killed), nonequiv)}

    by_source = {s: row([m for m in mutants if m["source"] == s])
                 for s in dict.fromkeys(m["source"] for m in mutants)}
    variants = sorted({v for m in mutants for v in m["variants"]})
    by_variant = {v: {**row([m for m in mutants if v in m["variants"]]),
                      "exercised_on": [a for a in DEVICES if v in exercised.get(a, [])]}
                  for v in variants}
    by_kind = {k: row([m for m in mutants if m["kind"] == k]) for k in KINDS}
    return {"by_source": by_source, "by_variant": by_variant, "by_kind": by_kind,
            "total": row(mutants)}


def _table(title: str, rows: dict[str, dict], extra: str | None = None) -> list[str]:
    head = f"| {title} | mutants | compiling | killed | survived | equivalent | kill rate | " \
           f"kill rate (non-equivalent) |" + (f" {extra} |" if extra else "")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for name, r in rows.items():
        cells = [name, r["mutants"], r["compiling"], r["killed"], r["survived"],
                 r["equivalent"], r["kill_rate"], r["kill_rate_non_equivalent"]]
        if extra:
            cells.append(", ".join(r.get("exercised_on") or []) or "not run by m8-parity")
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return lines


def write_report(out: dict, mutants: list[dict], results: dict[str, dict]) -> str:
    s = out["summary"]
    lines = ["# Mutation score of the Metal sources under m8-parity", "",
             (f"{out['date']}; tree {out['commit'][:12]} (`git archive HEAD`); "
             f"{out['host']['cpus']} CPUs, {out['jobs']} mutants at a time. Suite `{SUITE}` on "
             f"emulated {' and '.join(DEVICES)} through `farm.runner.device_job.run_job` (stopping "
             f"at the first failing test); a mutant is killed when either device fails a test "
             f"or ends its job in error or timeout. Mutants that do not compile are counted "
             f"apart and are not in the denominator."), "",
             (f"Wall time of the run that measured them: {out['measured_wall_s']:.0f} s "
             f"({out['measured_wall_s'] / 60:.1f} min) for {out['measured_mutants']} mutants "
             f"(sum over mutants {out['mutant_seconds']:.0f} s). "
             f"Command: `{out.get('measured_command', out['command'])}`."), "",
             "## Per source", ""]
    lines += _table("source", s["by_source"])
    lines += ["", ("## Per variant (a mutant counts for every variant whose source or header it "
              "changes)"), ""]
    lines += _table("variant", s["by_variant"], "selected (metal-emulated) by m8-parity on")
    lines += ["", "## Per mutation kind", ""]
    lines += _table("kind", s["by_kind"])
    t = s["total"]
    lines += ["", (f"**Total: {t['killed']} of {t['compiling']} compiling mutants killed "
              f"({t['kill_rate']}); {t['mutants'] - t['compiling']} of {t['mutants']} do not "
              f"compile; {t['equivalent']} survivors judged equivalent "
              f"({t['kill_rate_non_equivalent']} of the non-equivalent ones killed).**"), ""]
    survivors = [m for m in mutants if results.get(m["id"], {}).get("compiles")
                 and not results[m["id"]].get("killed")]
    lines += [f"## Survivors ({len(survivors)})", ""]
    for label, meta in (out.get("also") or {}).items():
        n = sum(bool((results[m["id"]].get("also") or {}).get(label, {}).get("killed"))
                for m in survivors)
        lines.append(f"- `{label}` kills {n} of them (tree {meta['commit'][:12]}, run by "
                     f"`{meta['command']}`" + (f" in {meta['wall_s']:.0f} s)." if "wall_s" in meta
                                                else ")."))
    if survivors:
        judged = [JUDGEMENTS.get(m["id"], ("not judged", ""))[0] for m in survivors]
        others = [m for m, v in zip(survivors, judged) if v != "equivalent"]
        caught = [m for m in others if any(
            v.get("killed") for v in (results[m["id"]].get("also") or {}).values())]
        lines.append(f"- {judged.count('equivalent')} judged equivalent, {len(others)} not; "
                     + (f"{len(caught)} of those {len(others)} are killed by at least one "
                        f"other check." if out.get("also") else "no other check was run."))
    lines += [""]
    for m in survivors:
        verdict, why = JUDGEMENTS.get(m["id"], ("not judged", ""))
        lines += [f"### `{m['id']}`", "", f"- {m['description']}",
                  f"- variants: {', '.join(m['variants'])}",
                  f"- judgement: **{verdict}**" + (f": {why}" if why else "")]
        for label, v in (results[m["id"]].get("also") or {}).items():
            lines.append(f"- {label}: " + (f"**killed** ({v['why']})" if v["killed"]
                                           else "survives"))
        lines += ["",
                  "```diff", m["diff"].rstrip("\n"), "```", ""]
    nc = [m for m in mutants if results.get(m["id"], {}).get("compiles") is False]
    lines += [f"## Not compiling ({len(nc)})", "",
              "| id | edit | compiler says |", "|---|---|---|"]
    for m in nc:
        first = results[m["id"]].get("compile_error", "")[:200].replace("|", "\\|")
        lines.append(f"| `{m['id']}` | `{m['old'].strip()[:40]}` -> "
                     f"`{m['new'].strip()[:40]}` | {first} |")
    return "\n".join(lines) + "\n"


def _print_tables(summary: dict) -> None:
    for title, key in (("source", "by_source"), ("variant", "by_variant"), ("kind", "by_kind")):
        print(f"\n{title:24s} {'mutants':>8s} {'compile':>8s} {'killed':>7s} {'surv':>5s} "
              f"{'equiv':>6s} {'rate':>7s} {'rate*':>7s}")
        for name, r in summary[key].items():
            print(f"{name:24s} {r['mutants']:8d} {r['compiling']:8d} {r['killed']:7d} "
                  f"{r['survived']:5d} {r['equivalent']:6d} {r['kill_rate']:>7s} "
                  f"{r['kill_rate_non_equivalent']:>7s}")
    t = summary["total"]
    print(f"\ntotal: {t['killed']}/{t['compiling']} compiling mutants killed ({t['kill_rate']});"
          f" rate* = without survivors judged equivalent: {t['kill_rate_non_equivalent']}")
