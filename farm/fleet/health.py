"""The health check a device passes before its first job of a run: a tiny golden kernel run.

It runs in a subprocess with the device's environment (its emulated architecture, the shipped
tree first on the path) and checks two things: the device is what its node labels say (MLX
reports the advertised architecture), and a 4-bit quantized matmul matches its dequantize +
float32 matmul golden. A device failing either is quarantined for the run. The subprocess prints
one JSON object; ``python -m farm.fleet.health`` runs it by hand.

On an embedded fleet every node is a process of this host, so the check needs no node: it runs
here (`precheck`), in the same subprocess with the same environment and shipped tree, while the
fleet starts, and the result is adopted for the node started for that device (`adopt`), keyed by
that node's id. `check_devices` takes an adopted result instead of scheduling a task.
"""

from __future__ import annotations

import json
import platform
import shutil
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import Future
from pathlib import Path

from farm.errors import FarmError
from farm.fleet.device_env import job_env
from farm.fleet.shipping import job_tree
from farm.tempdirs import owned_tmpdir

REMOTE_S = 90.0  # deadline for a fleet's checks, Ray scheduling included
GOLDEN_TOL = 1e-3  # relative to the output's scale; float32 QMM here matches to ~1e-6
CHECK_TIMEOUT_S = 60.0

# node id -> the check already under way for that node's device (embedded fleets): a cache whose
# key is one node of one fleet, taken once (each node is checked once per run).
_ADOPTED: dict[str, Future] = {}


def golden() -> dict:
    """Device identity and the golden comparison, measured in this process."""
    import mlx.core as mx

    from devices.identity import current_device

    dev = current_device()
    mx.random.seed(0)
    w = mx.random.normal((128, 256))
    x = mx.random.normal((8, 256))
    wq, scales, biases = mx.quantize(w, group_size=64, bits=4)
    y = mx.quantized_matmul(x, wq, scales, biases, transpose=True, group_size=64, bits=4)
    ref = x @ mx.dequantize(wq, scales, biases, group_size=64, bits=4).T
    err = float(mx.max(mx.abs(y - ref)).item())
    scale = float(mx.max(mx.abs(ref)).item()) or 1.0
    return {"identity": dev.to_json(), "max_abs_error": err, "scale": scale,
            "ok": err <= GOLDEN_TOL * scale}


def check(device: dict, workdir: Path | None = None) -> dict:
    """Run ``golden`` for ``device`` (its labels as a dict) in a subprocess; never raises.
    ``workdir``: the tree to check with; default a checked copy of the run's (a Ray task)."""
    if workdir is None:
        tmp = owned_tmpdir("farm-health-")
        try:
            return check(device, job_tree(tmp / "tree"))
        except FarmError as e:
            return {"host": socket.gethostname(), "time": time.time(), "ok": False,
                    "seconds": 0.0, "detail": str(e)[:300]}
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    t0 = time.monotonic()
    base = {"host": socket.gethostname(), "os": f"{platform.system()} {platform.release()}",
            "time": time.time()}
    try:
        out = subprocess.run([sys.executable, "-m", "farm.fleet.health"], cwd=workdir,
                             env=job_env(device, workdir), capture_output=True, text=True,
                             timeout=CHECK_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return {**base, "ok": False, "seconds": CHECK_TIMEOUT_S,
                "detail": f"health check hung for {CHECK_TIMEOUT_S:g}s"}
    seconds = round(time.monotonic() - t0, 3)
    try:
        result = json.loads(out.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        tail = (out.stderr or out.stdout).strip().splitlines()[-1:] or [f"exit {out.returncode}"]
        return {**base, "ok": False, "seconds": seconds, "detail": tail[0][:300]}
    if result.get("error"):
        return {**base, "ok": False, "seconds": seconds, "detail": result["error"][:300]}
    ident = result.get("identity") or {}
    detail = f"qmm max error {result['max_abs_error']:.2e} (scale {result['scale']:.1f})"
    ok = bool(result.get("ok"))
    if not ok:
        detail = "golden mismatch: " + detail
    if ident.get("arch") != device.get("arch") or bool(ident.get("emulated")) != bool(
            device.get("emulated")):
        ok, detail = False, (f"device reports {ident.get('arch')} (emulated="
                             f"{ident.get('emulated')}), node advertises {device.get('arch')}")
    return {**base, "ok": ok, "seconds": seconds, "detail": detail, "identity": ident}


def precheck(device, workdir: Path) -> Future:
    """Start ``check`` for ``device`` (a DeviceIdentity) on this host now, in a thread; the
    future holds its result."""
    fut: Future = Future()
    spec = {"arch": device.arch, "emulated": device.emulated}

    def work() -> None:
        try:
            fut.set_result(check(spec, workdir))
        except BaseException as e:  # noqa: BLE001 -- check never raises; this is a bug's line
            fut.set_result({"ok": False, "detail": f"{type(e).__name__}: {e}"[:300]})

    threading.Thread(target=work, name="farm-health-precheck", daemon=True).start()
    return fut


def adopt(node_id: str, fut: Future) -> None:
    """The check ``fut`` (`precheck`) is the health check of node ``node_id``."""
    _ADOPTED[node_id] = fut


def forget() -> None:
    """Drop adopted checks (the fleet is gone; a check still running is the fleet's process,
    killed with it)."""
    _ADOPTED.clear()


def check_devices(devices: list, timeout: float = REMOTE_S) -> dict[str, dict]:
    """Health-check ``devices`` (fleet.Device) in parallel on their nodes, with one deadline
    (a check already adopted for a node is taken instead, within the same deadline).

    Returns node id -> result; ``died`` is set when the node was gone.
    """
    t0 = time.monotonic()
    adopted = {d.node_id: _ADOPTED.pop(d.node_id) for d in devices if d.node_id in _ADOPTED}
    out: dict[str, dict] = {}
    todo = [d for d in devices if d.node_id not in adopted]
    if todo:
        out.update(_remote_checks(todo, timeout))
    for node_id, fut in adopted.items():
        try:
            out[node_id] = fut.result(max(0.0, timeout - (time.monotonic() - t0)))
        except TimeoutError:
            out[node_id] = {"ok": False, "detail": f"no answer within {timeout:g}s"}
    return out


def _remote_checks(devices: list, timeout: float) -> dict[str, dict]:
    import ray

    from farm.fleet.placement import pinned

    task = ray.remote(max_retries=0, num_cpus=0)(check)
    refs = {d.node_id: task.options(**pinned(d)).remote({"arch": d.arch, "emulated": d.emulated})
            for d in devices}
    ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout)
    out: dict[str, dict] = {}
    for node_id, ref in refs.items():
        if ref not in ready:
            ray.cancel(ref, force=True)
            out[node_id] = {"ok": False, "detail": f"no answer within {timeout:g}s"}
            continue
        try:
            out[node_id] = ray.get(ref, timeout=30)
        except ray.exceptions.RayError as e:  # the node died, or no place for the task
            out[node_id] = {"ok": False, "died": True,
                            "detail": f"{type(e).__name__}: {str(e).strip()[:200]}"}
    return out


if __name__ == "__main__":
    try:
        print(json.dumps(golden()))
    except Exception as e:  # noqa: BLE001 -- any failure of the golden run is the verdict
        print(json.dumps({"ok": False, "identity": {}, "max_abs_error": float("nan"),
                          "scale": 0.0, "error": f"{type(e).__name__}: {e}"}))
        sys.exit(1)
