"""Loopback nodes that stay on loopback.

Ray rewrites a node IP of 127.0.0.1 (``ray start --node-ip-address``, and the address a driver's
``ray.init`` is given) to the host's outward address (`ray._private.services.
resolve_ip_for_localhost`), so a "loopback" cluster's GCS, raylets and agents would bind to, and
talk over, the machine's network interface. A fleet of several nodes on one host, as the tests
and benches start, must keep to 127.0.0.1. So where the node IP is a loopback address, `ray
start` runs through a two-line shim that leaves it as given, and the driver does the same before
connecting. A real fleet (a Mac's routable address) is untouched.
"""

from __future__ import annotations

import ipaddress
import sys
from pathlib import Path

# `ray start ARGS...` with the loopback rewrite switched off; everything else is Ray's own CLI.
_SHIM = ("import sys, ray._private.services as s; s.resolve_ip_for_localhost = lambda h: h; "
         "from ray.scripts.scripts import main; sys.argv = ['ray', *sys.argv[1:]]; main()")


def is_loopback(host: str | None) -> bool:
    if not host:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def ray_executable() -> str:
    """The `ray` CLI of this interpreter's environment."""
    cand = Path(sys.executable).with_name("ray")
    return str(cand) if cand.exists() else "ray"


def ray_start(node_ip: str | None) -> list[str]:
    """The argv prefix of `ray start` for a node at ``node_ip``."""
    if is_loopback(node_ip):
        return [sys.executable, "-c", _SHIM, "start"]
    return [ray_executable(), "start"]


def keep_loopback_in_this_process() -> None:
    """Before ``ray.init`` against a loopback address: leave loopback hosts as given."""
    from ray._private import services

    original = services.resolve_ip_for_localhost
    if getattr(original, "_farm_loopback", False):
        return

    def resolve(host: str):
        return host if is_loopback(host) else original(host)

    resolve._farm_loopback = True  # type: ignore[attr-defined]
    services.resolve_ip_for_localhost = resolve
