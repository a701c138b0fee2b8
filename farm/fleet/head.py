"""`farm head`: start the Ray head node of a farm (wrapping ``ray start --head``).

Port choices (documented in ``farm head --help``): the head's GCS listens on ``--port``
(default 6379, Ray's own); its other services take the next ports up, PORT+1 .. PORT+7
(node manager, object manager, Ray client server, dashboard agent HTTP and gRPC, runtime-env
agent, metrics), and its workers PORT+100 .. PORT+299, so a head never collides with a second
node on the same host. The dashboard is off unless asked for. Token authentication stays on:
the head uses ``--token`` / ``RAY_AUTH_TOKEN`` if given, else Ray's token file
(``~/.ray/auth_token``, created on first start), and says how joiners pass it.
"""

from __future__ import annotations

import os
import secrets
import subprocess
from dataclasses import dataclass
from pathlib import Path

from farm.errors import EXIT_INFRA, FarmError
from farm.fleet import node_dirs
from farm.fleet.loopback import ray_start

DEFAULT_PORT = 6379
TOKEN_FILE = Path.home() / ".ray" / "auth_token"


def node_ports(base: int) -> list[str]:
    """`ray start` port flags for one node: base+1 .. base+7, workers base+100 .. base+299."""
    names = ["node-manager-port", "object-manager-port", "ray-client-server-port",
             "dashboard-agent-listen-port", "dashboard-agent-grpc-port",
             "runtime-env-agent-port", "metrics-export-port"]
    flags = [f"--{n}={base + 1 + i}" for i, n in enumerate(names)]
    return [*flags, f"--min-worker-port={base + 100}", f"--max-worker-port={base + 299}"]


def auth_env(token: str | None, token_file: Path | None) -> dict[str, str]:
    """Environment for a `ray start` with token auth (never switched off)."""
    env = dict(os.environ)
    env["RAY_AUTH_MODE"] = "token"
    if token_file is not None:
        try:
            token = token_file.read_text(encoding="utf-8").strip()
        except OSError as e:
            raise FarmError(f"cannot read token file {token_file}: {e.strerror or e}") from None
    if token:
        env["RAY_AUTH_TOKEN"] = token.strip()
    return env


def ensure_token_file(path: Path = TOKEN_FILE) -> bool:
    """Create the cluster's token on a head's first start (``~/.ray/auth_token``, mode 0600),
    where Ray's `ray start` would refuse to start without one; True when it made one."""
    if path.exists():
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32) + "\n")
    return True


@dataclass
class HeadOptions:
    port: int = DEFAULT_PORT
    node_ip: str | None = None
    object_store_mb: int = 256
    dashboard: bool = False
    dashboard_port: int = 8265
    num_cpus: int | None = None
    temp_dir: str | None = None
    token: str | None = None
    token_file: Path | None = None


def head_command(o: HeadOptions) -> list[str]:
    cmd = [*ray_start(o.node_ip), "--head", f"--port={o.port}", *node_ports(o.port),
           f"--object-store-memory={o.object_store_mb * 1024 * 1024}",
           f"--include-dashboard={'true' if o.dashboard else 'false'}",
           "--disable-usage-stats"]
    if o.dashboard:
        cmd.append(f"--dashboard-port={o.dashboard_port}")
    if o.node_ip:
        cmd.append(f"--node-ip-address={o.node_ip}")
    if o.num_cpus is not None:
        cmd.append(f"--num-cpus={o.num_cpus}")
    if o.temp_dir:
        cmd.append(f"--temp-dir={o.temp_dir}")
    return cmd


def start_head(o: HeadOptions) -> str:
    """Start the head; return the address joiners use. Errors are one FarmError line."""
    env = node_dirs.start_env(auth_env(o.token, o.token_file))
    if "RAY_AUTH_TOKEN" not in env:
        ensure_token_file()
    out = subprocess.run(head_command(o), env=env, capture_output=True, text=True,
                         timeout=120, check=False)
    if out.returncode != 0:
        lines = [ln for ln in (out.stdout + out.stderr).splitlines() if ln.strip()]
        # Ray prints INFO lines, then a traceback ending in the exception: that line says why.
        errors = [ln for ln in lines if "Error" in ln.split(":", 1)[0] or "error" in ln.lower()]
        why = (errors or lines or [str(out.returncode)])[-1].strip()
        raise FarmError(f"ray start --head failed: {why[:400]}", EXIT_INFRA)
    ip = o.node_ip
    if not ip:
        from ray._private.services import get_node_ip_address

        ip = get_node_ip_address()
    return f"{ip}:{o.port}"


def join_hint(address: str, o: HeadOptions) -> str:
    """How a machine joins: the agent command and where its token comes from."""
    if o.token or o.token_file:
        how = ("--token-file " + str(o.token_file)) if o.token_file else "--token <the token>"
        return f"join with: farm agent --address {address} {how}"
    return (f"join with: farm agent --address {address} --token-file {TOKEN_FILE} "
            f"(copy that file to each machine, or pass its content as RAY_AUTH_TOKEN)")
