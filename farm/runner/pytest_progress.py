"""pytest plugin the farm loads into every device job (``-p farm.runner.pytest_progress``).

The results stream says what finished; to name the test an interpreter died in, the device job
must also know what *started*. This plugin appends each test's node id to ``FARM_STARTED_FILE``
(flushed, one per line) as it starts. To show progress as done/total, it writes how many tests
this session will run (collected, after ``--deselect``) to ``FARM_COLLECTED_FILE`` once
collection is over. It also ends pytest when the job process that spawned it is gone
(``FARM_PARENT_PID``), so a device whose Ray worker died does not keep running a suite nobody
reads. And it ends the interpreter as soon as pytest is done (``FARM_QUICK_EXIT``): the device
job waits for the process to exit before it reports the job's end, and tearing down an
interpreter that imported MLX costs 60-130 ms per job on two cores, after the last line of
output that matters.
"""

from __future__ import annotations

import os
import sys

import pluggy

# pytest's own marker (``pytest.hookimpl`` is this), without importing pytest into the device
# job, which imports this module for its constants.
hookimpl = pluggy.HookimplMarker("pytest")

ENV_STARTED = "FARM_STARTED_FILE"
ENV_COLLECTED = "FARM_COLLECTED_FILE"
ENV_PARENT = "FARM_PARENT_PID"
ENV_QUICK_EXIT = "FARM_QUICK_EXIT"  # "1": only in a device job's own pytest process

_exit_status: list[int] = []


def _parent_alive() -> bool:
    want = os.environ.get(ENV_PARENT)
    return not want or os.getppid() == int(want)


def pytest_collection_finish(session) -> None:
    path = os.environ.get(ENV_COLLECTED)
    if path:
        tmp = f"{path}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(f"{len(session.items)}\n")
        os.replace(tmp, path)  # the device job never reads a half-written count


def pytest_runtest_logstart(nodeid: str, location: tuple) -> None:
    if not _parent_alive():
        os._exit(70)  # nobody is reading: stop at once, without running another test
    path = os.environ.get(ENV_STARTED)
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(nodeid + "\n")


def pytest_sessionfinish(session, exitstatus) -> None:
    _exit_status.append(int(exitstatus))


@hookimpl(trylast=True)
def pytest_unconfigure(config) -> None:
    """The last hook of the session: every plugin has written and closed its files (the
    results stream is line-buffered and closed in its own ``pytest_unconfigure``), so what is
    left is the interpreter's teardown, which nobody waits for but the device job."""
    if _exit_status and os.environ.get(ENV_QUICK_EXIT) == "1":
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(_exit_status[-1])
