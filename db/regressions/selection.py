"""Kernel selection: the path under test of a test served by another variant, and why.

Only selections a test made on its path under test count (`kernels.recorder.ROLES`): a test's
deliberate stock reference would otherwise keep the set of variants seen for a shape the same
across a real fallback and hide it. Selections are compared test by test, so one test's
reference cannot mask another's fallback, and a flag is one per shape, naming the tests.

A flag explains its cause from what the runs recorded (`dflash2.runtime_context`): the selection
table changed, a ``DFLASH2_*`` variable changed (``DFLASH2_CUSTOM_VERIFIER=0`` disables the
custom verifier), or MLX was upgraded.
"""

from __future__ import annotations

from collections import defaultdict

from db.regressions.model import STOCK, Flag, JobData, make_flag, same_impls

DTYPE_SHORT = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
VERIFIER_ENV = "DFLASH2_CUSTOM_VERIFIER"


def shape_text(key: tuple) -> str:
    op, dtype, M, K, N = key
    return f"{op} {DTYPE_SHORT.get(dtype, dtype)} ({M},{K},{N})"


def _reason_text(reason: str | None) -> str:
    """``fallback:disabled`` -> ``fallback: disabled``."""
    if not reason:
        return ""
    kind, _, why = reason.partition(":")
    return f"{kind}: {why}" if why else kind


def causes(job: JobData, base: JobData) -> list[str]:
    """What the two runs recorded differently that can change dispatch."""
    out = []
    now, before = job.run.context, base.run.context
    if now is not None and before is not None:
        env_now, env_before = now.get("env") or {}, before.get("env") or {}
        for k in sorted(set(env_now) | set(env_before)):
            a, b = env_before.get(k), env_now.get(k)
            if a == b:
                continue
            if k == VERIFIER_ENV and b is not None and b.strip().lower() in ("0", "false",
                                                                            "off", "no"):
                out.append(f"the environment disabled the custom verifier ({k}={b})")
            else:
                out.append(f"environment {k}: {'unset' if a is None else repr(a)} -> "
                           f"{'unset' if b is None else repr(b)}")
        th_now, th_before = now.get("table_hash"), before.get("table_hash")
        if th_now and th_before and th_now != th_before:
            out.append(f"selection table changed ({th_before[:12]} -> {th_now[:12]})")
    mlx_now, mlx_before = job.device.get("mlx_version"), base.device.get("mlx_version")
    if mlx_now and mlx_before and mlx_now != mlx_before:
        out.append(f"MLX upgraded {mlx_before} -> {mlx_now}")
    if not out:
        out.append("nothing recorded changed (tree, table, environment and MLX the same)"
                   if now is not None and before is not None
                   else "unknown: a run recorded no dispatch context")
    return out


def _impl_text(variants: set[str], job: JobData, key: tuple) -> str:
    """``scalar_kmajor[metal]/stock[stock-native]``; a variant of unknown implementation bare."""
    return "/".join(v + (f"[{'/'.join(sorted(i))}]" if (i := job.impls_of(key, v)) else "")
                    for v in sorted(variants))


def kernel_selection(job: JobData, base: JobData) -> list[Flag]:
    """Per test, the variants its path under test selected for a shape, before and now."""
    # shape -> [(before variants, now variants, now reasons, nodeid)]
    changed: dict[tuple, list] = defaultdict(list)
    for nodeid in sorted(set(job.results) & set(base.results)):
        now_sel, before_sel = job.results[nodeid].under_test, base.results[nodeid].under_test
        for key in set(now_sel) & set(before_sel):
            now, before = set(now_sel[key]), set(before_sel[key])
            if now != before:
                changed[key].append((before, now, now_sel[key], nodeid))
    if not changed:
        return []
    why = causes(job, base)
    out = []
    for key in sorted(changed, key=str):
        before = set().union(*(c[0] for c in changed[key]))
        now = set().union(*(c[1] for c in changed[key]))
        reasons = {v: r for c in changed[key] for v, r in c[2].items() if v in now}
        tests = sorted(c[3] for c in changed[key])
        tuned_before = before - {STOCK}
        fell_back = bool(tuned_before) and STOCK in now and not (now & tuned_before)
        reason = "; ".join(_reason_text(reasons[v]) for v in sorted(now)
                           if reasons.get(v))
        ev = (f"{shape_text(key)} on {job.device['label']}: {_impl_text(before, base, key)} -> "
              f"{_impl_text(now, job, key)}" + (f" ({reason})" if reason else "")
              + f"; cause: {', '.join(why)}; {len(tests)} test(s)")
        impls = {"before": {v: sorted(base.impls_of(key, v)) for v in sorted(before)},
                 "now": {v: sorted(job.impls_of(key, v)) for v in sorted(now)}}
        out.append(make_flag("kernel_selection", "high" if fell_back else "medium", job, base,
                             shape_text(key), ev, sorted(before), sorted(now), tests=tests,
                             reasons=reasons, causes=why, fell_back=fell_back, impls=impls))
    return out


def implementation_changed(job: JobData, base: JobData) -> list[Flag]:
    """Same shape, same variant, another implementation: visible, never a regression, and the
    tests whose measurements were therefore not compared are named."""
    out = []
    for key in sorted(set(job.selections) & set(base.selections), key=str):
        for variant in sorted(set(job.selections[key]) & set(base.selections[key])):
            now, before = job.impls_of(key, variant), base.impls_of(key, variant)
            if not now or not before or now == before:
                continue
            tests = sorted(set().union(*job.impls[(*key, variant)].values()))
            skipped = sorted(n for n in tests if n in base.results
                             and not same_impls(job.results[n].impls, base.results[n].impls))
            ev = (f"{shape_text(key)}: {variant} ran {'/'.join(sorted(before))} -> "
                  f"{'/'.join(sorted(now))}"
                  + (f"; measurements of {len(skipped)} test(s) not compared across it"
                     if skipped else ""))
            out.append(make_flag("implementation_changed", "note", job, base, shape_text(key),
                                 ev, sorted(before), sorted(now), variant=variant, tests=tests,
                                 not_compared=skipped))
    return out
