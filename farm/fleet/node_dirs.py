"""Each Ray node that `farm head` or `farm agent` starts unpacks run trees into a directory of its own.

Ray keeps a node's runtime envs under ``<session dir>/runtime_resources``, and the nodes of one
host share that session dir: a joining node takes the head's temp dir. A node's runtime-env agent
unpacks a run's working dir there the first time one of its workers needs it. It does so with
``overwrite=True`` (``download_and_unpack_package`` in the Ray we pin): it deletes the directory
and unzips it again, under the jobs that the host's other nodes are running in it.

The test fleet's agent logs show this: one create per node per run, all on one path. Jobs lost
their suite files, and an actor could not import its module. Several device nodes on one host
(twins, a loopback fleet) is a setup `farm agent` supports, so every node it starts names its own
directory. The names come through Ray's start hook (``RAY_START_HOOK``, called with the node's
``RayParams`` before it starts). A hook the user set already still runs, after ours.
"""

from __future__ import annotations

import os
import uuid

ENV_HOOK = "RAY_START_HOOK"  # ray_constants.RAY_START_HOOK
ENV_NEXT = "FARM_NEXT_RAY_START_HOOK"  # a hook of the user's own, run after ours
HOOK = "farm.fleet.node_dirs.own_runtime_env_dir"
PREFIX = "runtime_resources"  # Ray's DEFAULT_RUNTIME_ENV_DIR_NAME


def start_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` for a `ray start` whose node gets its own runtime-env directory."""
    out = dict(env)
    theirs = out.get(ENV_HOOK)
    if theirs and theirs != HOOK:
        out[ENV_NEXT] = theirs
    out[ENV_HOOK] = HOOK
    return out


def own_runtime_env_dir(params, head: bool) -> None:
    """Ray's start hook. The node manager's port tells a host's nodes apart, and names the node
    in a listing of the session dir; a node whose port Ray picks gets a random name. The
    directory sits inside Ray's own: a driver on this host stages its uploads there."""
    port = getattr(params, "node_manager_port", None)
    params.runtime_env_dir_name = f"{PREFIX}/node{port or uuid.uuid4().hex[:8]}"
    theirs = os.environ.get(ENV_NEXT)
    if theirs:
        from ray._common.utils import load_class

        load_class(theirs)(params, head)
