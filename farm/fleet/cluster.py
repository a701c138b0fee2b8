"""Connecting the driver to a Ray cluster: token auth, reachability, one clear error.

Ray 2.60 turns token authentication on at the head, and reads the auth mode when ``ray`` is
first imported; so the mode is set before that import (and Ray's cached config refreshed if a
caller imported it already). An address that does not answer is reported in seconds, never
left to Ray's own long connection retries.
"""

from __future__ import annotations

import os
import socket
import sys

from farm.errors import EXIT_INFRA, FarmError
from farm.fleet.loopback import is_loopback, keep_loopback_in_this_process

CONNECT_PROBE_S = 5.0
NAMESPACE = "dflash2-farm"


def free_ports(n: int) -> list[int]:
    """``n`` distinct TCP ports free right now (all held open while choosing, so the OS cannot
    hand out one twice), for nodes whose Ray defaults would clash with another node's."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def use_token_auth(token: str | None = None) -> None:
    """Token auth for this process and the Ray processes it starts; ``token`` if given."""
    if token:
        os.environ["RAY_AUTH_TOKEN"] = token.strip()
    os.environ["RAY_AUTH_MODE"] = "token"
    if "ray" in sys.modules:  # refresh what Ray cached at import
        from ray._raylet import AuthenticationTokenLoader, Config

        Config.initialize("")
        AuthenticationTokenLoader.instance().reset_cache()


def probe(address: str) -> None:
    """Fail in seconds, with the fix, when nothing listens at ``address`` (HOST:PORT)."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise FarmError(f"bad cluster address {address!r}: use HOST:PORT of the head "
                        f"(`farm head` prints it)")
    try:
        with socket.create_connection((host, int(port)), timeout=CONNECT_PROBE_S):
            pass
    except OSError as e:
        raise FarmError(f"Ray cluster at {address} is unreachable ({e.strerror or e}): start "
                        f"it with `farm head` or check --address / RAY_ADDRESS", EXIT_INFRA) from None


def connect(address: str, runtime_env: dict | None = None, node_ip: str | None = None) -> None:
    """``ray.init`` the driver against ``address``, quietly; errors become one FarmError line.

    ``node_ip``: the address this driver's own Ray services use (the embedded fleet's loopback);
    else Ray picks this host's address."""
    address = address.removeprefix("ray://") if address.startswith("ray://") else address
    probe(address)
    use_token_auth()
    import ray

    host = address.rpartition(":")[0]
    if is_loopback(host):  # a loopback cluster: this driver stays on loopback too
        keep_loopback_in_this_process()
        node_ip = node_ip or "127.0.0.1"
    extra = {"_node_ip_address": node_ip} if node_ip else {}
    try:
        ray.init(address=address, runtime_env=runtime_env, namespace=NAMESPACE,
                 log_to_driver=False, logging_level="ERROR", configure_logging=True, **extra)
    except (ConnectionError, RuntimeError, ValueError, OSError, ray.exceptions.RayError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        # The port answered, so a refused connection is most often a token mismatch.
        hint = "; check the auth token (RAY_AUTH_TOKEN, or ~/.ray/auth_token as on the head)"
        raise FarmError(f"cannot connect to Ray at {address}: {first[:300]}{hint}",
                        EXIT_INFRA) from None
    _quiet_cluster_errors()


def _quiet_cluster_errors() -> None:
    """Ray's driver prints cluster error events (a node's death with its raylet log tail) to
    stdout, which would break `--json` output and bury the farm's own one-line account of the
    same event; keep the first line of each, on stderr."""
    from ray._private import worker

    def first_line_to_stderr(data: dict, ignore_prefix: bool = False) -> None:
        for line in data.get("lines", [])[:1]:
            text = str(line).strip().splitlines()
            if text:
                print(f"ray: {text[0][:200]}", file=sys.stderr)

    worker.print_to_stdstream = first_line_to_stderr


def reconnect(address: str, runtime_env: dict | None = None, node_ip: str | None = None) -> None:
    """Leave and connect again: a driver's runtime env is its Ray job's, fixed by ``ray.init``,
    so another one takes another job (always, quick exit or not: the run goes on)."""
    if "ray" in sys.modules and sys.modules["ray"].is_initialized():
        sys.modules["ray"].shutdown()
    connect(address, runtime_env, node_ip)


def disconnect() -> None:
    """Leave the cluster; in the `farm` process the connection is left to its end
    (`farm.quick_exit`)."""
    from farm import quick_exit

    if quick_exit.ACTIVE:
        return
    if "ray" in sys.modules and sys.modules["ray"].is_initialized():
        sys.modules["ray"].shutdown()
