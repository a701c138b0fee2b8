"""Five short tests; on a node started with FARM_FIXTURE_KILL_NODE=1 the third kills its raylet
(=crash: and then its own interpreter at once, as the node's teardown does, while the Ray worker
that runs the job still lives).

The kill test finds the raylet as the parent of the Ray worker that spawned pytest, waits a
moment so the results before it are streamed, and kills it by pid: a node dying mid-job.
"""

import os
import signal
import time


def _parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def test_a():
    time.sleep(0.2)


def test_b():
    time.sleep(0.2)


def test_c_kills_node():
    how = os.environ.get("FARM_FIXTURE_KILL_NODE")
    if how in ("1", "crash"):
        time.sleep(1.5)
        worker = os.getppid()
        raylet = _parent_of(worker)
        os.kill(raylet, signal.SIGKILL)
        if how == "crash":  # the node's teardown kills this interpreter before the worker dies
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(60)


def test_d():
    time.sleep(0.2)


def test_e():
    pass
