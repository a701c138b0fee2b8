"""What runs inside a copy of the tree with a mutant in it (a subprocess, PYTHONPATH = the copy).

bench/mutation_score.py starts itself with ``--runner compile|suite JSON`` in the copy; these
import the copy's kernels and farm, so what they measure is the mutant, which each proves by
printing ``kernels.__file__``."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path


def _runner_compile(job: dict) -> int:
    """Build each variant the mutant affects once (the executor is not entered): 0 if every
    build succeeds, 3 on a CompileError. Prints one JSON line."""
    import mlx.core as mx

    import kernels
    from kernels.metal_emu import executor, toolchain
    from kernels.metal_emu import variant as emulated
    from kernels.qweights import QWeights
    from kernels.variants import VARIANTS

    class Built(Exception):
        pass

    def stop(*_a, **_k):
        raise Built

    executor.launch = stop  # run.run calls executor.launch after the build
    def holds(v) -> bool:
        return any(hashlib.sha256(t.encode()).hexdigest()[:16] == job["sha"]
                   for t in (v.METAL_SOURCE, v.HEADER))

    report = {"kernels": kernels.__file__, "errors": {},
              "mutant_imported": [n for n in job["variants"] if holds(VARIANTS[n])]}
    if report["mutant_imported"] != job["variants"]:
        report["error"] = "the copy's variants do not hold the mutated text"
        print(json.dumps(report))
        return 4
    rc = 0
    for name in job["variants"]:
        v = VARIANTS[name]
        k, n = 1024, 32
        dtype = mx.float16 if name == "fp16_matrix" else mx.bfloat16
        qw = QWeights.quantize(mx.random.normal((n, k), key=mx.random.key(0)) / 32)
        x = mx.random.normal((v.ROWS, k), key=mx.random.key(1)).astype(dtype)
        try:
            emulated.launch(v, x, qw, dict(v.DEFAULTS))
        except Built:
            continue
        except toolchain.CompileError as e:
            report["errors"][name] = str(e)[:2000]
            rc = 3
    print(json.dumps(report))
    return rc


def _runner_suite(job: dict) -> int:
    """The suite on one emulated device through the farm's own device job; stops at the first
    test that fails. Prints the job's events, one JSON object per line."""
    import kernels
    from farm.fleet import shipping
    from farm.runner import device_job

    print(json.dumps({"type": "mutation_runner", "kernels": kernels.__file__,
                      "device_job": device_job.__file__}), flush=True)
    with shipping.as_run_worker(Path.cwd()):  # the mutant's tree, shipped as a run ships it
        gen = device_job.run_job(job["spec"])
        try:
            for batch in gen:
                for ev in batch:
                    print(json.dumps(ev), flush=True)
                if any(_fails(ev) for ev in batch):
                    print(json.dumps({"type": "mutation_runner_stopped"}), flush=True)
                    break
        finally:
            gen.close()  # run_job's finally kills pytest
    return 0


def _fails(ev: dict) -> bool:
    if ev.get("type") != "result":
        return False
    cat = (ev.get("expectation") or {}).get("category")
    return cat in ("unexpected_fail", "crashed") or (
        cat is None and ev.get("outcome") not in ("passed", "skipped"))
