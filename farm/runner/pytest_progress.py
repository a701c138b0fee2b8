"""pytest plugin the farm loads into every device job (``-p farm.runner.pytest_progress``).

The results stream says what finished; to name the test an interpreter died in, the device job
must also know what *started*. This plugin appends each test's node id to ``FARM_STARTED_FILE``
(flushed, one per line) as it starts. To show progress as done/total, it writes how many tests
this session will run (collected, after ``--deselect``) to ``FARM_COLLECTED_FILE`` once
collection is over. It also ends pytest when the job process that spawned it is gone
(``FARM_PARENT_PID``), so a device whose Ray worker died does not keep running a suite nobody
reads.
"""

from __future__ import annotations

import os

ENV_STARTED = "FARM_STARTED_FILE"
ENV_COLLECTED = "FARM_COLLECTED_FILE"
ENV_PARENT = "FARM_PARENT_PID"


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
