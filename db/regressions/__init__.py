"""Regression flags: what changed for a suite on a device between a run and a comparable run.

Like is compared with like. The comparison key is (device variant, suite, test id, and for
kernels the op and shape): a job is compared with its suite's baseline on its device variant
(`farm baseline set`, per suite), else with the latest earlier run of the same suite on the same
device (across an MLX upgrade: the same device under the old MLX, where fingerprints only note
the change). Emulated and real devices are never compared. With nothing comparable, the report
says so ("no comparable earlier run"), never "no regressions". Kinds:

1. ``kernel_selection``  a test's path under test served by another variant for the same
                         (op, dtype, M, K, N); a fall back to stock from a tuned kernel: high.
                         Reference computations inside tests never count. The flag names its
                         cause: table changed, environment, MLX upgraded (`selection`)
2. ``fingerprint``       output digest changed on the same arch and MLX version (else a note)
3. ``new_failure``       an unexpected failure (or crash) of a test that passed before
4. ``numeric_drift``     deviation grew by more than one ulp, or headroom crossed 0.5 / 0.9
5. ``stale_expectation`` an expected failure passing in N consecutive runs
6. ``perf_drop``         a bench throughput or latency worse by Welch's t-test over windows
                         of comparable runs, beyond a minimum effect (`series`)
7. ``acceptance_drop``   mean accepted draft tokens per block fell beyond its noise; a collapse
                         to zero is high (`series`)
8. ``consensus``         one device the odd one out among devices of its generation in a run
9. ``implementation_changed`` (a note) same shape and variant, another implementation
                         executed it: the tests' measurements are not compared across it.
"""

from __future__ import annotations

from db.history import History
from db.queries import resolve_run
from db.regressions.load import comparable_run, load_jobs, match_job, run_info
from db.regressions.model import SEVERITIES, Comparison, Flag, JobData, Report
from db.regressions.outputs import (
    HEADROOM_LEVELS,
    ULP_MEASURES,
    consensus,
    fingerprint,
    new_failure,
    numeric_drift,
    stale_expectations,
)
from db.regressions.selection import implementation_changed, kernel_selection
from db.regressions.series import acceptance_drop, perf_drop

KINDS = ("kernel_selection", "fingerprint", "new_failure", "numeric_drift", "stale_expectation",
         "perf_drop", "acceptance_drop", "consensus", "implementation_changed")
PAIR_CHECKS = (kernel_selection, implementation_changed, fingerprint, new_failure,
               numeric_drift)
SERIES_CHECKS = (perf_drop, acceptance_drop)

__all__ = ["HEADROOM_LEVELS", "KINDS", "ULP_MEASURES", "Comparison", "Flag", "Report",
           "analyse", "find_regressions"]


def find_regressions(h: History, run_id: str, against: str = "baseline") -> list[Flag]:
    """Every flag for ``run_id`` against each device's comparable run or against ``against``."""
    return analyse(h, run_id, against).flags


def analyse(h: History, run_id: str, against: str = "baseline") -> Report:
    run_id = resolve_run(h, run_id)
    explicit = None if against in (None, "", "baseline") else resolve_run(h, against)
    current = load_jobs(h, run_id)
    suite = current[0].run.suite if current else run_info(h, run_id).suite
    flags: list[Flag] = []
    comparisons: list[Comparison] = []
    loaded: dict[str, list[JobData]] = {}
    for job in current:
        dev = job.device
        other, why = (explicit, "--against") if explicit is not None else comparable_run(h, job)
        base = None
        if other is not None and other != run_id:
            if other not in loaded:
                loaded[other] = load_jobs(h, other)
            base = match_job(job, loaded[other])
        if base is None:
            if other is None:
                reason = why
            elif other == run_id:
                reason = "the baseline is this run itself"
            else:
                reason = f"run {other} ({why}) has no job on this device"
            comparisons.append(Comparison(dev["label"], dev["variant_key"], None, reason))
        else:
            comparisons.append(Comparison(dev["label"], dev["variant_key"], other, why))
            for check in PAIR_CHECKS:
                flags.extend(check(job, base))
        for series_check in SERIES_CHECKS:
            flags.extend(series_check(h, job))
        flags.extend(stale_expectations(h, job))
    flags.extend(consensus(current))
    flags.sort(key=lambda f: (SEVERITIES.index(f.severity), f.kind, f.device, f.subject))
    return Report(run_id, suite, flags, comparisons)
