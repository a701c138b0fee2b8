"""What changes dispatch besides the tree: the runtime's environment, the selection table in
effect and the MLX version. A run records it, so a kernel-selection regression can name its
cause (table changed, the environment disabled the custom verifier, MLX upgraded), and the farm
ships the environment to every device explicitly instead of trusting nodes to inherit it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

PREFIX = "DFLASH2_"
# Set per node by the node itself (its device identity, its toolchain and caches): never taken
# from the driver, or every device would claim the driver's emulated architecture.
NODE_LOCAL = frozenset({"DFLASH2_DEVICE_ARCH", "DFLASH2_CLANG", "DFLASH2_EMU_CACHE",
                        "DFLASH2_MLX_METAL_WHEEL"})


def dispatch_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The ``DFLASH2_*`` variables that travel with a run (the node-local ones stay)."""
    env = os.environ if environ is None else environ
    return {k: v for k, v in sorted(env.items()) if k.startswith(PREFIX) and k not in NODE_LOCAL}


def without_dispatch_env(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` with every travelling ``DFLASH2_*`` variable removed, so a device runs with
    exactly the run's recorded variables, not leftovers of its own shell."""
    return {k: v for k, v in environ.items() if not (k.startswith(PREFIX)
                                                     and k not in NODE_LOCAL)}


def run_context(env: Mapping[str, str] | None = None) -> dict:
    """{env, table_hash, mlx_version}: plain JSON for the history."""
    import mlx.core as mx

    from kernels.selection import table_digest

    shipped = dispatch_env() if env is None else dict(sorted(env.items()))
    table = shipped.get("DFLASH2_SELECTION_TABLE")
    try:
        digest = table_digest(table)
    except (OSError, ValueError):
        digest = None  # an unreadable candidate table: the devices will report it
    return {"env": shipped, "table_hash": digest, "mlx_version": mx.__version__}
