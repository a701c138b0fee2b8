"""The `farm` process's end, once a command has used Ray: ``os._exit`` instead of a teardown.

Disconnecting a Ray driver (``ray.shutdown``) and then finalizing an interpreter that holds
Ray's threads took about 0.55 s of every `farm run` on a warm fleet, after everything was
stored and printed. The command-line entry (`farm.cli.app.main`) sets ``ACTIVE``: the driver's
teardown then leaves the connection to the process's end (`farm.fleet.cluster.disconnect`), and
the entry ends the process at once after flushing its output. What needs closing is closed
before: the history (its last transaction committed), the staged tree, an embedded fleet. The
cluster sees the driver's connection drop and ends its job, as for any driver that exits.
Library callers and in-process tests (typer's CliRunner) never set it.
"""

from __future__ import annotations

import os
import sys

ACTIVE = False


def ray_connected() -> bool:
    return "ray" in sys.modules and sys.modules["ray"].is_initialized()


def end(code: int) -> None:
    """Flush and end the process with ``code`` when Ray is still connected; else return."""
    if not (ACTIVE and ray_connected()):
        return
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing left to say there
            pass
    os._exit(code)
