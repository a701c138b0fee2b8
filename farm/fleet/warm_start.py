"""A run's start on a warm fleet: what it can skip because the fleet is already up and local.

A warm fleet's nodes are processes of this host, started by its keeper (`farm.fleet.warm`), so:
- the health check of each device the run may use runs here, in the run's staged tree, while
  the driver connects (`precheck`), as an embedded fleet's does while it starts;
- the run's tree is not unpacked by every node's runtime-env agent at connect time (`lazy`):
  device jobs go to the nodes' warm executors (`farm.fleet.executor`), which run the staged
  tree where it lies; a Ray task, should one still be needed, unpacks it on first use;
- `executors` finds those executors, or says in one line why the run starts Ray workers instead.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path

from farm.fleet import executor, health


def precheck(fleet, selectors, staged: Path) -> dict[str, Future]:
    """Start the health check of every node whose device a selector names; node id -> check."""
    return {node: health.precheck(ident, staged)
            for node, ident in zip(fleet.nodes, fleet.identities(), strict=True)
            if any(s.matches(ident) for s in selectors)}


def lazy(runtime_env: dict) -> dict:
    """``runtime_env`` without the eager install at connect time (Ray's default): on two cores
    every node unpacking the tree would compete with the run's first test for nothing."""
    return {**runtime_env, "config": {**runtime_env.get("config", {}), "eager_install": False}}


def executors(fleet, prechecks: dict[str, Future], say: Callable[[str], None]) -> dict:
    """After connecting: the prechecks stand for the nodes' health checks, and node id ->
    executor for the nodes whose executor speaks this checkout's protocol ({} and one line
    when none does)."""
    for node, fut in prechecks.items():
        health.adopt(node, fut)
    if not executor.wanted():
        say(f"warm fleet: {executor.ENV_OFF}=0: this run starts Ray workers")
        return {}
    found, why = executor.find(list(fleet.nodes))
    if why:
        say(f"warm fleet: {why}: this run starts Ray workers (`farm fleet down` and `farm fleet "
            f"up` to refresh it)")
    return found
