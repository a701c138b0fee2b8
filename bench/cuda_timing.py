"""The timing primitives of the CUDA bench (bench/cuda_verify.py and the cold sweep): the read
ceiling, the profilers on the machine, cold weight copies, and a launch's time three ways (a
batch of independent launches, a chain of dependent ones, and wall time as an eager caller sees
it). They know nothing of which kernel they time: each takes a function that makes a launch."""

from __future__ import annotations

import shutil
import statistics
import subprocess
import time
from pathlib import Path

import mlx.core as mx

from kernels.qweights import QWeights

L2_BYTES = 60 * 10 ** 6
COLD_TARGET_BYTES = 240 * 10 ** 6  # > 2x L2 with room to spare
GS, BITS = 64, 4


def read_ceiling(gib: float, reps: int) -> dict:
    """Read-only reduction and an elementwise read+write pass over the same ``gib`` GiB."""
    n = int(gib * (1 << 30)) // 4
    a = mx.ones((n,), dtype=mx.float32)
    mx.eval(a)
    out = {"gib": gib, "elements": n}
    for label, fn, moved in (("sum_read_only", lambda a=a: mx.sum(a), n * 4),
                             ("copy_a_plus_1_read_write", lambda a=a: a + 1.0, 2 * n * 4)):
        for _ in range(3):
            mx.eval(fn())
        ts = []
        for _ in range(reps):
            y = fn()
            t0 = time.perf_counter()
            mx.eval(y)
            ts.append(time.perf_counter() - t0)
            del y
        t = statistics.median(ts)
        out[label] = {"bytes": moved, "median_s": t, "Bps": moved / t,
                      "all_s": ts}
    del a
    mx.clear_cache()
    return out


def profilers() -> dict:
    res = {}
    for tool in ("nsys", "ncu", "nvidia-smi"):
        path = shutil.which(tool) or next(
            (p for p in (f"/usr/local/cuda/bin/{tool}",) if Path(p).exists()), None)
        entry = {"path": path}
        if path and tool != "nvidia-smi":
            try:
                entry["version"] = subprocess.run([path, "--version"], capture_output=True,
                                                  text=True, timeout=30, check=False).stdout.strip()[-200:]
            except Exception as e:  # noqa: BLE001 - recorded, not fatal
                entry["version_error"] = str(e)[:200]
        res[tool] = entry
    smi = res["nvidia-smi"]["path"]
    if smi:
        try:
            res["clocks"] = subprocess.run(
                [smi, ("--query-gpu=name,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,"
                       "power.draw,temperature.gpu,persistence_mode"),
                 "--format=csv"], capture_output=True, text=True, timeout=30,
                check=False).stdout.strip()
        except Exception as e:  # noqa: BLE001
            res["clocks_error"] = str(e)[:200]
    return res


def make_copies(k: int, n: int, dt, count: int, seed: int = 0) -> list[QWeights]:
    copies = []
    for i in range(count):
        w = mx.random.normal((n, k), key=mx.random.key(seed + i)) / k ** 0.5
        qw = QWeights.quantize(w, GS, BITS, dt)
        mx.eval(qw.wq, qw.scales, qw.biases)
        del w
        copies.append(qw)
    mx.clear_cache()
    return copies


def qbytes(qw: QWeights) -> int:
    return qw.wq.nbytes + qw.scales.nbytes + qw.biases.nbytes


def device_us(make, batch: int, reps: int) -> dict:
    """Per-launch time: ``batch`` launches built (untimed), then one timed ``mx.eval``. The
    per-batch figures are kept: their spread is the noise the selection table's regeneration
    (scripts/regen_sm90_table.py) holds a speed-up against."""
    for _ in range(2):
        mx.eval([make(i) for i in range(batch)])
    ts = []
    for _ in range(reps):
        outs = [make(i) for i in range(batch)]
        t0 = time.perf_counter()
        mx.eval(outs)
        ts.append((time.perf_counter() - t0) / batch * 1e6)
        del outs
    return {"us": statistics.median(ts), "min_us": min(ts), "max_us": max(ts), "batches_us": ts}


def chain_us(step, x: mx.array, batch: int, reps: int) -> dict:
    """Per launch when each launch waits for the one before, as a model's chain of dependent
    projections does (the batched ``device_us`` lets independent launches overlap): launch i+1
    reads ``x + 0 * y_i[:, :1]`` (one small fused kernel, the link), so the batch is a chain;
    the same chain of links alone is timed too and taken off. ``step(x_i, i)`` is launch i
    (``i`` picks its weight copy: cold weights stay cold). Median over ``reps`` chains after
    two warm-up chains. Each chain of launches is followed at once by its chain of links, and
    the time is the median of those pairs' differences: a stall that hit the links alone, timed
    apart, once took 35.9 us a link off a 39.6 us chain (an H100, 2026-12-05 18:39), leaving
    3.8 us "per launch" for a kernel whose floor was 18."""
    link = mx.compile(lambda a, y: a + (y[:, :1] * 0).astype(a.dtype))

    def timed(with_kernel: bool) -> float:
        xi, outs = x, []
        for i in range(batch):
            xi = link(x, step(xi, i) if with_kernel else xi)
            outs.append(xi)
        t0 = time.perf_counter()
        mx.eval(outs)
        return (time.perf_counter() - t0) / batch * 1e6
    chain, links = [], []
    for r in range(reps + 2):
        c, lk = timed(True), timed(False)
        if r >= 2:
            chain.append(c)
            links.append(lk)
    return {"us": statistics.median(c - lk for c, lk in zip(chain, links, strict=True)),
            "chain_us": statistics.median(chain), "link_us": statistics.median(links),
            "chain_batches_us": chain, "link_batches_us": links}


def wall_us(make, batch: int, reps: int) -> dict:
    """Per-launch time as an eager caller sees it: building the batch's graph and evaluating
    it, both timed (host cost + device time, partly overlapped)."""
    mx.eval([make(i) for i in range(batch)])
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        mx.eval([make(i) for i in range(batch)])
        ts.append((time.perf_counter() - t0) / batch * 1e6)
    return {"us": statistics.median(ts), "min_us": min(ts), "max_us": max(ts), "batches_us": ts}
