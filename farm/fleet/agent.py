"""`farm agent`: join this machine to a farm as one device node (wrapping ``ray start``).

The device is detected through ``dflash2`` (MLX's own device info; ``--emulate ARCH`` on a host
without an Apple GPU) and advertised as node labels (architecture, generation, size letter,
backend, chip, MLX version, emulated) plus one ``dflash2_device`` resource unit, so one suite job
at a time runs on it. Emulation is exported to the node's processes (``DFLASH2_DEVICE_ARCH``)
and shows in every listing. Each node gets its own ports (``--port-base``, else free ones) and a
sized object store, and its own runtime-env directory (`node_dirs`), so several agents can share
one host; token auth is always on.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from farm.errors import EXIT_INFRA, FarmError
from farm.fleet import node_dirs
from farm.fleet.cluster import free_ports, probe
from farm.fleet.devices import RESOURCE, device_labels
from farm.fleet.head import auth_env, node_ports
from farm.fleet.loopback import ray_start


@dataclass
class AgentOptions:
    address: str
    emulate: str | None = None
    token: str | None = None
    token_file: Path | None = None
    object_store_mb: int = 256
    num_cpus: int | None = None
    port_base: int | None = None
    node_ip: str | None = None
    block: bool = False


def _ports(base: int | None) -> list[str]:
    if base is not None:
        return node_ports(base)
    names = ["node-manager-port", "object-manager-port", "dashboard-agent-listen-port",
             "dashboard-agent-grpc-port", "runtime-env-agent-port", "metrics-export-port"]
    return [f"--{n}={p}" for n, p in zip(names, free_ports(len(names)), strict=True)]


def agent_command(o: AgentOptions, labels: dict[str, str]) -> list[str]:
    cmd = [*ray_start(o.node_ip), f"--address={o.address}", *_ports(o.port_base),
           f"--object-store-memory={o.object_store_mb * 1024 * 1024}",
           "--labels=" + ",".join(f"{k}={v}" for k, v in labels.items()),
           "--resources=" + json.dumps({RESOURCE: 1}), "--disable-usage-stats"]
    if o.num_cpus is not None:
        cmd.append(f"--num-cpus={o.num_cpus}")
    if o.node_ip:
        cmd.append(f"--node-ip-address={o.node_ip}")
    if o.block:
        cmd.append("--block")
    return cmd


def start_agent(o: AgentOptions) -> str:
    """Join the cluster; return a one-line description of the device node it started."""
    from devices.identity import ENV_ARCH, current_device

    probe(o.address)
    dev = current_device(o.emulate) if o.emulate else current_device()
    env = node_dirs.start_env(auth_env(o.token, o.token_file))
    if dev.emulated:
        env[ENV_ARCH] = dev.arch
    if sys.platform == "darwin":
        env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "1"  # Ray refuses multi-node macOS without
    cmd = agent_command(o, device_labels(dev))
    if o.block:
        rc = subprocess.run(cmd, env=env, check=False).returncode
        if rc != 0:
            raise FarmError(f"ray start exited with status {rc}", EXIT_INFRA)
        return f"{dev.label} node stopped"
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180,
                         check=False)
    if out.returncode != 0:
        lines = [ln for ln in (out.stderr + out.stdout).splitlines() if ln.strip()]
        hint = next((ln for ln in lines if "AuthenticationError" in ln),
                    lines[-1] if lines else f"exit {out.returncode}")
        raise FarmError(f"ray start --address {o.address} failed: {hint.strip()[:300]}",
                        EXIT_INFRA)
    return f"joined {o.address} as {dev.label} ({dev.chip}, MLX {dev.mlx_version})"
