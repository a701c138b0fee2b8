#!/usr/bin/env python
"""Scale simulation behind docs/SCALE.md (issue 15, Deliver 5): one head, many devices.

No fleet of 100 Macs exists here, and 100 raylets do not fit on 2 cores. What a large fleet puts
on the head is simulated instead, and everything on the head's side is the farm's real code:

* the run loop (`farm.runner.loop.Driver`): its ``ray.wait`` over one streaming generator per
  device, ``take`` of every batch, the job records, ``finish_job``, the verdict and the
  regression analysis at the end, with the run's heartbeat thread (`RunRecord`) running;
* the history: a real SQLite file, written through ``History.ingest_events`` as `farm run` does.

What is synthetic is the devices: each is one async generator of a single Ray actor (one process,
no MLX) that replays a device's result stream of the full suite's shape (bench_history's
catalogue: measurements, selections, fingerprints) at ``--rate`` results/s, in batches every
0.1 s as `device_job` sends them. The Driver subclass below replaces only what touches a device:
``launch`` (the synthetic stream instead of a pinned task), ``check_health`` (no MLX golden) and
``watch`` (the synthetic nodes are not Ray nodes). Ray's own scheduling of 100+ real nodes, the
per-node runtime_env upload and the health checks are not simulated: their per-job costs come
from bench/results/orchestration.json (measured) and are added on paper in docs/SCALE.md.

Per fleet size it reports the offered rate (devices x rate), the achieved rate of stored results,
the driver's CPU per result, the lag between a result leaving its device and being stored (p50,
p95, max), the loop's batches per wakeup, the database's bytes per result and the time of the
regression analysis. Prints a table; writes bench/results/scale.{json,md}.

    .venv/bin/python bench/sim_scale.py                       # 10, 100, 300, 1000 devices
    .venv/bin/python bench/sim_scale.py --devices 100 --rate 5

Never run as a unit test (tests/test_sim_scale.py runs it once, tiny, for its shape).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

RESULTS = ROOT / "bench" / "results"
BATCH_S = 0.1  # device_job.POLL_S: how often a device job yields what it has


@dataclass
class SimSuite:
    """What the Driver reads of a suite."""

    name: str = "all"
    timeout: float = 300.0

    def pytest_args(self) -> list[str]:
        return ["suites"]


def device_stream(index: int) -> list[dict]:
    """Device ``index``'s result events: the `all` suite's shape from bench_history."""
    from history_bench.synthetic import DEVICES, run_events

    dev, _host, evs = run_events(index)[index % len(DEVICES)]
    return [{**e, "device": dev} if e["type"] == "session_start" else e for e in evs]


def synthetic_fleet(ray):
    @ray.remote(num_cpus=0, max_concurrency=100_000)
    class SyntheticFleet:
        """Every synthetic device: one async generator each, in this one process."""

        def __init__(self, streams: list[list[dict]]):
            self.streams = streams

        async def job(self, index: int, rate: float, start_at: float):
            evs = self.streams[index % len(self.streams)]
            start, results = evs[0], evs[1:-1]
            await asyncio.sleep(max(0.0, start_at - time.time()))
            yield [{"type": "farm_job_start", "time": time.time()},
                   {"type": "farm_collected", "total": len(results)}, dict(start)]
            per_batch = max(1, round(rate * BATCH_S))
            for k in range(0, len(results), per_batch):
                await asyncio.sleep(per_batch / rate)
                now = time.time()
                yield [{**r, "sent": now} for r in results[k:k + per_batch]]
            yield [dict(evs[-1]), {"type": "farm_job_end", "status": "completed",
                                   "error": None, "restarts": 0, "time": time.time()}]

    return SyntheticFleet


def sim_driver_class():
    from farm.fleet.devices import Device
    from farm.runner.loop import JOB_GRACE_S, Driver
    from farm.runner.run_types import Shard

    class SimDriver(Driver):
        """The run loop with synthetic devices (see the module docstring for what differs)."""

        fleet = None
        rate = 10.0
        start_at = 0.0
        lags: list[float]
        sent: list[float]
        wakeups = 0
        batches = 0
        writes = 0

        def check_health(self, devices: list[Device]) -> None:
            for d in devices:
                self.health[d.node_id] = {"ok": True, "identity": d.identity().to_json(),
                                          "os": "Darwin 24.1"}

        def launch(self, i: int, device: Device, shard: dict | None = None) -> int:
            slot = next(self._slots)
            self.shards[slot] = Shard(i, device)
            self.refs[slot] = self.fleet.job.options(num_returns="streaming").remote(
                i, self.rate, self.start_at)
            self.deadline[slot] = time.monotonic() + self.job_timeout + JOB_GRACE_S
            return slot

        def take(self, slot: int, batch: list[dict]) -> None:
            super().take(slot, batch)
            self.batches += 1
            self.sent += [ev["sent"] for ev in batch if "sent" in ev]

        def flush(self) -> None:
            super().flush()  # stored: the lag of what it held ends here
            stored, sent, self.sent = time.time(), self.sent, []
            self.lags += [stored - s for s in sent]
            self.writes += bool(sent)

        def step(self) -> None:
            self.wakeups += 1
            super().step()

        def watch(self) -> None:
            pass  # no Ray nodes behind the synthetic devices

    return SimDriver


def synthetic_devices(n: int, node_id: str) -> list:
    from history_bench.synthetic import DEVICES

    from farm.fleet.devices import Device

    out = []
    for k in range(n):
        dev, host = DEVICES[k % len(DEVICES)]
        out.append(Device(node_id=f"{node_id[:40]}{k:016x}"[:56], host=f"sim-{host}-{k}",
                          address="127.0.0.1", arch=dev["arch"], generation=dev.get("generation"),
                          size=dev.get("size"), backend=dev.get("backend", "metal"),
                          emulated=dev["emulated"], chip=dev.get("chip", "sim"),
                          mlx_version=dev.get("mlx_version", "0.32.4"), busy=False))
    return out


def simulate(n: int, rate: float, tmp: Path) -> dict:
    import ray
    from rich.console import Console

    from db import open_history
    from farm.report import summary as report
    from farm.runner import signals, verdict
    from farm.runner.progress import Progress
    from farm.runner.record import RunRecord
    from farm.runner.run_types import RunOptions

    db = tmp / f"sim-{n}.db"
    history = open_history(str(db))
    console = Console(stderr=True, quiet=True)
    record, show = RunRecord(history, console), Progress(console, live=False)
    suite, opts = SimSuite(), RunOptions(suite="all", db=str(db))
    revision = {"git_sha": None, "dirty": False, "tree_hash": "0" * 64, "files": 0,
                "root": str(ROOT)}
    streams = [device_stream(k) for k in range(8)]
    fleet = synthetic_fleet(ray).remote(streams)
    ray.get(fleet.__ray_ready__.remote())
    devices = synthetic_devices(n, ray.get_runtime_context().get_node_id())
    with signals.Guard() as guard:
        d = sim_driver_class()(opts, console, history, suite, revision, record, show, guard)
        d.fleet, d.rate, d.lags, d.sent = fleet, rate, [], []
        record.open(suite, opts, revision, None)
        d.run_id = record.run_id
        d.check_health(devices)
        t0, c0 = time.monotonic(), time.process_time()
        d.start_at = time.time() + 0.5 + n * 0.0005  # every device starts together
        for i, dev in enumerate(devices):
            d.jobs.append(report.JobRecord(key=dev.short, kind=dev.kind,
                                           device=dev.identity().to_json(),
                                           node_id=dev.node_id, host=dev.host))
            d.dispatch(i, dev)
        dispatched = time.monotonic() - t0
        d.loop()
        wall, cpu = time.monotonic() - t0, time.process_time() - c0
        status = verdict.run_status(d.jobs)
        record.finish(status)
        t1 = time.monotonic()
        flags = d.regressions()
        analyse_s = time.monotonic() - t1
    history.close()
    with sqlite3.connect(db) as con:  # what the history holds, not what the loop saw
        stored = con.execute("select count(*) from results").fetchone()[0]
    ray.kill(fleet)
    per_device = len(streams[0]) - 2
    produce_s = per_device / rate
    lags = sorted(d.lags) or [0.0]
    return {
        "devices": n, "rate_per_device": rate, "results": stored,
        "expected_results": n * per_device, "status": status,
        "offered_per_s": round(n * rate, 1),
        "achieved_per_s": round(stored / max(wall - 0.5, 1e-9), 1),
        "wall_s": round(wall, 2), "device_stream_s": round(produce_s, 2),
        "dispatch_s": round(dispatched, 3),
        "driver_cpu_s": round(cpu, 2),
        "driver_cpu_us_per_result": round(cpu / max(stored, 1) * 1e6, 1),
        "lag_p50_s": round(statistics.median(lags), 3),
        "lag_p95_s": round(lags[int(0.95 * (len(lags) - 1))], 3),
        "lag_max_s": round(lags[-1], 3),
        "batches": d.batches, "loop_wakeups": d.wakeups, "writes": d.writes,
        "regressions_s": round(analyse_s, 3), "flags": len(flags),
        "db_bytes_per_result": round(db.stat().st_size / max(stored, 1), 1),
    }


def start_ray():
    import ray

    from farm.fleet.loopback import keep_loopback_in_this_process

    keep_loopback_in_this_process()
    # address="local": a Ray of its own, never one it finds on the host (a fleet, a test's)
    ray.init(address="local", num_cpus=1, include_dashboard=False, _node_ip_address="127.0.0.1",
             configure_logging=False, log_to_driver=False, object_store_memory=200 * 2**20)
    return ray


COLUMNS = [("devices", "devices"), ("offered_per_s", "offered/s"),
           ("achieved_per_s", "stored/s"), ("results", "results"), ("wall_s", "wall s"),
           ("device_stream_s", "stream s"), ("driver_cpu_us_per_result", "driver CPU µs/result"),
           ("lag_p50_s", "lag p50 s"), ("lag_p95_s", "lag p95 s"), ("lag_max_s", "lag max s"),
           ("batches", "batches"), ("loop_wakeups", "wakeups"), ("writes", "writes"),
           ("regressions_s", "regressions s"), ("db_bytes_per_result", "bytes/result")]


def table(rows: list[dict]) -> str:
    head = "| " + " | ".join(h for _, h in COLUMNS) + " |"
    sep = "|" + "---|" * len(COLUMNS)
    body = ["| " + " | ".join(str(r[k]) for k, _ in COLUMNS) + " |" for r in rows]
    return "\n".join([head, sep, *body])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--devices", default="10,100,300,1000",
                    help="fleet sizes, comma-separated (default 10,100,300,1000)")
    ap.add_argument("--rate", type=float, default=10.0,
                    help="results/s per device (default 10: m8-parity on an emulated device "
                         "runs 21/s here; a real Mac's full suite fewer)")
    ap.add_argument("--out", type=Path, default=RESULTS / "scale.json")
    args = ap.parse_args()
    try:
        sizes = [int(s) for s in args.devices.split(",")]
    except ValueError:
        print(f"error: --devices takes comma-separated counts (got {args.devices!r})",
              file=sys.stderr)
        return 2
    if not sizes or min(sizes) < 1 or not args.rate > 0:
        print("error: --devices counts and --rate must be positive", file=sys.stderr)
        return 2
    ray = start_ray()
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="farm-sim-") as tmp:
            for n in sizes:
                print(f"simulating {n} device(s) at {args.rate:g} results/s each ...",
                      file=sys.stderr, flush=True)
                rows.append(simulate(n, args.rate, Path(tmp)))
                print(table(rows[-1:]).splitlines()[-1], file=sys.stderr, flush=True)
    finally:
        ray.shutdown()
    load = os.getloadavg()
    doc = {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "host": {"cpus": os.cpu_count(), "machine": platform.machine(),
                    "python": platform.python_version(), "loadavg": [round(x, 2) for x in load]},
           "rate_per_device": args.rate, "rows": rows}
    print(table(rows))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(
        f"# Scale simulation ({doc['when']})\n\n`bench/sim_scale.py --devices {args.devices} "
        f"--rate {args.rate:g}` on {os.cpu_count()} CPUs (load {load[0]:.1f}); see "
        f"docs/SCALE.md for what is real and what is synthetic.\n\n{table(rows)}\n")
    print(f"wrote {args.out} and {args.out.with_suffix('.md')}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
