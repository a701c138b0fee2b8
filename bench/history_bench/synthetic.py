"""The synthetic fleet and suite: runs of the shipped suites' shape (devices x tests x
measurements, with the selections and fingerprints the suites emit), seeded by the run number
so that a size is the same database every time and the timings compare across runs."""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass

OPS = {"gate_up": (5120, 17408), "down": (17408, 5120), "out": (6144, 5120),
       "attn_q": (5120, 2048), "attn_kv": (5120, 1024), "router": (5120, 48)}
DTYPES = ("bfloat16", "float16")
MS = (4, 8, 16)
PROFILES = ("g13s", "g14g", "g15s", "g16d", "cpu")
BUDGETS = ("small", "default", "large", "off")

DEVICES = [  # (device identity, host): four Macs of four generations, two emulated on a CPU
    ({"arch": "applegpu_g13s", "generation": 13, "size": "s", "chip": "Apple M1 Max",
      "backend": "metal", "emulated": False}, "mac-13"),
    ({"arch": "applegpu_g14g", "generation": 14, "size": "g", "chip": "Apple M2",
      "backend": "metal", "emulated": False}, "mac-14"),
    ({"arch": "applegpu_g15s", "generation": 15, "size": "s", "chip": "Apple M3 Max",
      "backend": "metal", "emulated": False}, "mac-15"),
    ({"arch": "applegpu_g16d", "generation": 16, "size": "d", "chip": "Apple M4 Ultra",
      "backend": "metal", "emulated": False}, "mac-16"),
    ({"arch": "applegpu_g14g", "generation": 14, "size": "g", "chip": "emulated on AMD EPYC",
      "backend": "cpu", "emulated": True}, "ci-1"),
    ({"arch": "applegpu_g15s", "generation": 15, "size": "s", "chip": "emulated on AMD EPYC",
      "backend": "cpu", "emulated": True}, "ci-1"),
]
BASELINED = (0, 1, 4)  # devices whose baseline is set (`farm baseline set`) on the first run
MLX_VERSIONS = ("0.32.4", "0.33.0", "0.33.1")
MLX_EVERY = 400  # runs between MLX upgrades (new device variants; lineage baselines)
T0 = 1_764_000_000.0
RUN_EVERY_S = 3600.0

HISTORY_TEST = "suites/test_parity.py::test_m8_vs_stock"  # `farm history` of a parametrized test
HISTORY_NODE = HISTORY_TEST + "[gate_up-bfloat16]"  # ... and of one node id


@dataclass
class Case:
    """One test of the catalogue: what its result event carries besides the outcome."""

    nodeid: str
    test_id: str
    params: str
    meas: list[tuple[str, str, float, float | None]]  # name, unit, typical value, bound
    sels: list[tuple[str, str, int, int, int]]  # op, dtype, M, K, N
    fps: list[str]  # fingerprint keys
    xfail_on: frozenset[int] = frozenset()  # device indices with an expected failure
    skip_emulated: bool = False


def catalogue() -> list[Case]:
    """The `all` suite's shape: parity, numeric bounds, fingerprint, bench, selection, e2e."""
    cases = []

    def add(path, name, params, meas, sels=(), fps=(), **kw):
        test_id = f"suites/{path}::{name}"
        cases.append(Case(f"{test_id}[{params}]" if params else test_id, test_id, params,
                          list(meas), list(sels), list(fps), **kw))

    for op, (k, n) in OPS.items():
        for dt in DTYPES:
            p = f"{op}-{dt}"
            bound = 1e-3 if dt == "bfloat16" else 2e-4
            for name in ("test_m8_vs_stock", "test_m8_vs_m4_same_rows",
                         "test_wrapper_bit_exact_with_raw_dispatch",
                         "test_verifier_off_equals_stock"):
                add("test_parity.py", name, p,
                    [("deviation", "abs", bound * 0.3, bound), ("headroom", "ratio", 0.3, 1.0)],
                    [(op, dt, 8, k, n)])
            for m in MS:
                pm = f"{m}-{op}-{dt}"
                add("test_numeric_bounds.py", "test_bound", pm,
                    [("deviation", "abs", bound * 0.25, bound), ("bound", "abs", bound, None),
                     ("headroom", "ratio", 0.25, 1.0), ("deviation_ulps", "ulp", 3.0, None),
                     ("bound_below_ulp", "flag", 0.0, None),
                     ("certified_rows", "rows", float(m), None)],
                    [(op, dt, m, k, n)],
                    xfail_on=frozenset({3}) if (op, m) == ("router", 16) else frozenset())
                add("test_numeric_bounds.py", "test_accuracy", pm,
                    [("ulps", "ulp", 2.0, 8.0), ("ulps_own_magnitude", "ulp", 1.5, None),
                     ("rel_l2_vs_f64", "ratio", 1e-4, None)],
                    [(op, dt, m, k, n)])
                add("test_fingerprint.py", "test_fingerprint", f"{op}-{dt}-{m}",
                    [("golden_missing", "flag", 0.0, None)], [(op, dt, m, k, n)],
                    [f"scalar_kmajor/{k}x{n}/{dt}/M{m}"])
            add("test_bench.py", "test_verify_microbench", p,
                [("n_measured", "columns", float(n), None),
                 ("m4_rows_per_s", "rows/s", 4.1e6, None), ("m4_median_us", "us", 41.0, None),
                 ("m8_rows_per_s", "rows/s", 7.9e6, None), ("m8_median_us", "us", 43.0, None),
                 ("stock_rows_per_s", "rows/s", 5.2e6, None), ("stock_median_us", "us", 65.0, None),
                 ("rows_per_s", "rows/s", 7.9e6, None), ("m8_over_m4", "ratio", 1.9, None),
                 ("m8_over_stock", "ratio", 1.5, None)],
                [(op, dt, 4, k, n), (op, dt, 8, k, n), (op, dt, 16, k, n)], skip_emulated=True)
    for prof in PROFILES:
        add("test_selection.py", "test_selection_matches_expected", prof,
            [("rows_checked", "rows", 108.0, None), ("rows_changed", "rows", 0.0, 0.0)])
    for b in BUDGETS:
        add("test_greedy_e2e.py", "test_greedy_exact", b,
            [("blocks", "blocks", 12.0, None), ("mean_accepted", "tokens", 3.2, None)],
            [("gate_up", "bfloat16", 8, 5120, 17408), ("down", "bfloat16", 8, 17408, 5120)])
    return cases


CASES = catalogue()


def device_of(i: int, run: int) -> dict:
    dev, _ = DEVICES[i]
    return {**dev, "mlx_version": MLX_VERSIONS[min(run // MLX_EVERY, len(MLX_VERSIONS) - 1)]}


def _digest(*parts) -> str:
    return hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()


def run_events(run: int) -> list[tuple[dict, str, list[dict]]]:
    """Every device's events of run ``run``: [(device, host, [session_start, results..,
    session_finish])], seeded by the run so a size is the same database every time."""
    rnd = random.Random(run)
    t = T0 + run * RUN_EVERY_S
    # Rarely, a kernel falls back to stock, or an output changes, for a whole run on a device.
    fallback = {(rnd.randrange(len(DEVICES)), rnd.choice(list(OPS)))} if rnd.random() < 0.05 else set()
    fp_epoch = run // 250
    out = []
    for i, (_, host) in enumerate(DEVICES):
        dev = device_of(i, run)
        evs = [{"type": "session_start", "schema": 1, "time": t, "device": dev, "host": host,
                "os": "Darwin 24.1" if not dev["emulated"] else "Linux 6.8",
                "suite": "all", "args": ["suites"], "expectations": "suites/expectations.txt"}]
        counts: dict[str, int] = {}
        tt = t
        for c in CASES:
            tt += 0.05
            r = rnd.random()
            expected, link, reason = "pass", None, None
            if c.skip_emulated and dev["emulated"]:
                outcome, cat, msg = "skipped", "skipped", "bench: not on an emulated device"
            elif i in c.xfail_on:
                expected, link, reason = "fail", "crbug/123", "router M=16 bound on g16d"
                if r < 0.3:
                    outcome, cat, msg = "passed", "unexpected_pass", ""
                else:
                    outcome, cat, msg = "failed", "expected_fail", "assert 0.0012 <= 0.001"
            elif r < 0.004:
                outcome, cat, msg = "failed", "unexpected_fail", (
                    f"AssertionError: M=8 {c.params}: max |path - stock| = 0.0021 > 0.001")
            else:
                outcome, cat, msg = "passed", "expected_pass", ""
            counts[cat] = counts.get(cat, 0) + 1
            meas, sels, fps = [], [], []
            if outcome != "skipped":
                for name, unit, v, bound in c.meas:
                    val = v * (1 + 0.03 * rnd.gauss(0, 1)) if v else v
                    meas.append({"name": name, "value": val, "unit": unit, "bound": bound})
                for op, dt, m, k, n in c.sels:
                    stock = (i, op) in fallback
                    sels.append({"op": op, "dtype": dt, "M": m, "K": k, "N": n,
                                 "variant": "stock" if stock else
                                 ("scalar_kmajor" if m <= 8 else "simd_kmajor"),
                                 "reason": "fallback: no tuned entry" if stock else "tuned"})
                for key in c.fps:
                    fps.append({"key": key, "digest": _digest(dev["arch"], dev["mlx_version"],
                                                              key, fp_epoch),
                                "shape": [8, 5120], "dtype": key.rsplit("/", 2)[1]})
            evs.append({"type": "result", "nodeid": c.nodeid, "test_id": c.test_id,
                        "params": c.params, "outcome": outcome,
                        "duration": 0.02 + rnd.random() * 0.3, "message": msg,
                        "expectation": {"expected": expected, "link": link, "reason": reason,
                                        "category": cat},
                        "measurements": meas, "selections": sels, "fingerprints": fps,
                        "time": tt})
        evs.append({"type": "session_finish", "time": tt + 1, "exitstatus": 0,
                    "counts": counts})
        out.append((dev, host, evs))
    return out


RESULTS_PER_RUN = len(CASES) * len(DEVICES)
