"""The end of a `farm run` process: ``os._exit`` instead of a teardown, once all is done.

Disconnecting a Ray driver (``ray.shutdown``) and then finalizing an interpreter that holds
Ray's threads took about 0.55 s of every `farm run` on a warm fleet, and finalizing alone about
0.3 s after an embedded fleet's end, all of it after everything was stored and printed. The
installed `farm` script (`farm.cli.app.script`) sets ``ACTIVE``: the driver's teardown then
leaves the Ray connection to the process's end (`farm.fleet.cluster.disconnect`), and `farm run`
ends the process once its summary is out. What needs closing is closed before: the history (its
last transaction committed), the staged tree, an embedded fleet. The cluster sees the driver's
connection drop and ends its job, as for any driver that exits. Library callers, `main` called
in a process that goes on (the tests), and typer's CliRunner never set it.
"""

from __future__ import annotations

import os
import sys

ACTIVE = False


def end(code: int) -> None:
    """Flush and end the `farm` process with ``code`` (elsewhere: return)."""
    if not ACTIVE:
        return
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing left to say there
            pass
    os._exit(code)
