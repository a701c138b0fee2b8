"""The code that runs on a device: one suite job, pytest in a subprocess, results as they come.

``run_job`` is a plain generator (the driver wraps it as a Ray streaming-generator task); it
yields lists of JSON-ready dicts (the suites plugin's results stream plus a few ``farm_*``
events) as the subprocess writes them, so a device that dies mid-job has already delivered
everything it finished. pytest runs in a subprocess because a reused Ray worker caches imported
modules (the shipped tree changes between runs) and because a test may kill its interpreter.

Faults handled here, each turned into a result so the job goes on:
- the interpreter dies in a test (segfault, abort): that test is ``crashed``; pytest is started
  again with ``--deselect`` for every test already reported, until the suite is done;
- a test hangs: pytest-timeout (signal method) fails it, reported as ``timeout``; a hang the
  signal cannot break is killed by a watchdog after the timeout plus a grace period;
- the job runs past its own timeout: the running test is ``timeout`` and the job ends there;
- the node dies under the job (its raylet gone, this process reparented): pytest's SIGKILL is
  the teardown's, not the test's, so nothing more is reported and the driver, told of the
  death, moves the job's unreported tests to another device of the arch.

A twin of a sharded job (``spec["shard"]``) runs no fixed list: its pytest pulls each test from
the job's queue (`shard_relay`, `pytest_shard`), and a test it was handed but never reported
goes to its next pytest first after a crash, or back to the queue when the job ends.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from farm.errors import FarmError
from farm.fleet.device_env import job_env
from farm.fleet.shipping import job_tree
from farm.runner.pytest_progress import ENV_COLLECTED, ENV_PARENT, ENV_QUICK_EXIT, ENV_STARTED
from farm.runner.shard_queue import Client  # at import: Ray's working dir may be gone mid-job
from farm.runner.shard_relay import Relay
from farm.tempdirs import owned_tmpdir

POLL_S = 0.1
HANG_GRACE_S = 10.0  # after --timeout, how long a test may ignore SIGALRM before it is killed
# After pytest is SIGKILLed while this process's parent (the raylet that started this Ray
# worker) is gone, how long to wait to be torn down with the node before reporting the kill
# as the test's crash after all.
NODE_TEARDOWN_WAIT_S = 60.0
# A raylet SIGKILLed is not reparented-from at once: its exit (every thread) can lag the death
# of the pytest its teardown killed, so that death is read against the parent for this long
# before it counts as the test's own SIGKILL (once: the kill=crash cluster test, 2026-12-05, read
# the raylet as alive, streamed the test as crashed and ran the rest on the dying node).
PARENT_GONE_WAIT_S = 3.0
MAX_RESTARTS = 1000
LOG_TAIL = 2000
_TIMEOUT_MSG = re.compile(r"\bTimeout\b.*>\s*[\d.]+\s*s", re.IGNORECASE)


def _parent_gone(parent: int, within: float) -> bool:
    """Whether this process is (or, within ``within`` seconds, becomes) reparented away from
    ``parent``: the raylet that started this Ray worker has died."""
    deadline = time.monotonic() + within
    while os.getppid() == parent:
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_S / 2)
    return True


def _die_with_parent() -> None:
    """In the child (Linux): get SIGKILL when the Ray worker that started it dies."""
    os.setsid()
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(Exception):
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


def _tail(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return text[-LOG_TAIL:].strip()


def _exit_text(rc: int | None) -> str:
    if rc is not None and rc < 0:
        with contextlib.suppress(ValueError):
            return f"signal {signal.Signals(-rc).name}"
    return f"exit status {rc}"


def synthesized_result(nodeid: str, outcome: str, message: str, duration: float) -> dict:
    """A result the farm writes itself for a test pytest could not report (crash, hang)."""
    head, sep, tail = nodeid.rpartition("::")
    test_id, params = nodeid, ""
    if tail.endswith("]") and "[" in tail:
        i = tail.index("[")
        test_id, params = head + sep + tail[:i], tail[i + 1:-1]
    return {
        "type": "result", "nodeid": nodeid, "test_id": test_id, "params": params,
        "outcome": outcome, "duration": round(duration, 3), "message": message,
        # As the suites plugin classifies: a crash is `crashed`, a hang an unexpected failure.
        "expectation": {"expected": "pass", "link": None, "reason": None,
                        "category": "crashed" if outcome == "crashed" else "unexpected_fail"},
        "measurements": [], "selections": [], "fingerprints": [], "time": time.time(),
        "farm": True,
    }


class _Follower:
    """Tails one pytest subprocess's results file and started-tests file, and reads its
    collected count once (a ``farm_collected`` event: ``total`` counts the tests this job
    reported before this subprocess, which it deselects, plus the ones it collected)."""

    def __init__(self, results: Path, started: Path, collected: Path | None = None,
                 before: int = 0):
        self.results, self.started, self.collected = results, started, collected
        self.before = before
        self._pos = 0
        self._buf = ""
        self._started_seen = 0
        self.current: str | None = None  # started, not yet reported
        self.current_since = 0.0

    def _collected(self) -> list[dict]:
        if self.collected is None:
            return []
        try:
            count = int(self.collected.read_text(encoding="utf-8").strip())
        except (OSError, ValueError):
            return []
        self.collected = None  # once
        return [{"type": "farm_collected", "count": count, "total": self.before + count,
                 "time": time.time()}]

    def read(self, done: set[str]) -> list[dict]:
        events: list[dict] = self._collected()
        with contextlib.suppress(FileNotFoundError), open(self.results, encoding="utf-8") as f:
            f.seek(self._pos)
            chunk = f.read()
            self._pos = f.tell()
            self._buf += chunk
            *lines, self._buf = self._buf.split("\n")
            for line in lines:
                if line.strip():
                    with contextlib.suppress(json.JSONDecodeError):
                        events.append(json.loads(line))
        for ev in events:
            if ev.get("type") == "result":
                done.add(ev.get("nodeid", ""))
                if ev.get("outcome") == "failed" and _TIMEOUT_MSG.search(ev.get("message", "")):
                    ev["outcome"] = "timeout"  # a plugin that does not tell timeouts apart
        with contextlib.suppress(FileNotFoundError):
            names = self.started.read_text(encoding="utf-8").splitlines()
            if len(names) > self._started_seen:
                self._started_seen = len(names)
                self.current, self.current_since = names[-1], time.monotonic()
        if self.current in done:
            self.current = None
        return events


def run_job(spec: dict, queue=None) -> Iterator[list[dict]]:
    """Run the suite of ``spec`` here; yield batches of events until it is done.

    ``spec``: suite (name), pytest_args, test_timeout, job_timeout, device (the node's device
    labels as a dict), deselect (node ids already reported by an earlier attempt), attempt,
    env (extra environment, optional), shard (optional: ``{"queue", "job", "name"}``, the
    queue actor's name, the job's key in it and this twin's name). The last batch holds a
    ``farm_job_end`` event. ``queue`` stands in for the queue actor's client (tests).
    """
    deadline = time.monotonic() + float(spec["job_timeout"])
    parent = os.getppid()  # on a node, its raylet: reparented means the node is going away
    test_timeout = float(spec["test_timeout"])
    done: set[str] = set(spec.get("deselect") or [])
    tmp = owned_tmpdir("farm-job-")
    workdir = tmp / "tree"  # the run's tree, copied and checked (`shipping.job_tree`)
    node_id = os.environ.get("FARM_EXEC_NODE", "")  # started by a warm executor
    if not node_id and "ray" in sys.modules and sys.modules["ray"].is_initialized():
        node_id = sys.modules["ray"].get_runtime_context().get_node_id()  # never start Ray here
    yield [{"type": "farm_job_start", "node_id": node_id, "host": socket.gethostname(),
            "os": f"{platform.system()} {platform.release()}", "pid": os.getpid(),
            "workdir": str(workdir), "attempt": spec.get("attempt", 1), "time": time.time()}]
    status, error, restarts, sent_start = "completed", None, 0, False
    last_finish: dict | None = None
    proc: subprocess.Popen | None = None
    relay: Relay | None = None
    try:
        job_tree(workdir)
    except FarmError as e:  # never run a tree that is not the run's, whole
        shutil.rmtree(tmp, ignore_errors=True)
        yield [{"type": "farm_job_end", "status": "error", "error": str(e)[:500], "restarts": 0,
                "time": time.time()}]
        return
    try:
        if spec.get("shard") and queue is None:
            queue = Client(spec["shard"])
        while True:
            prev = relay
            relay = Relay(queue, prev.unreported(done) if prev else None) if queue else None
            if prev is not None:
                prev.close()
            results, started = tmp / f"results-{restarts}.jsonl", tmp / f"started-{restarts}"
            collected = tmp / f"collected-{restarts}"
            log = tmp / f"pytest-{restarts}.log"
            cmd = [sys.executable, "-m", "pytest", *spec["pytest_args"],
                   "-p", "suites.plugin", "-p", "pytest_timeout", "-p", "farm.runner.pytest_progress",
                   "-p", "no:cacheprovider", "-q", "--results-jsonl", str(results),
                   # The tree's own addopts are for its test runs (e.g. xdist's --dist), and
                   # name plugins a device job does not load: the farm sets every option.
                   "-o", "addopts=",
                   "--timeout", f"{test_timeout:g}",
                   "--timeout-method", "signal" if hasattr(signal, "SIGALRM") else "thread"]
            if spec.get("suite"):
                cmd += ["--farm-suite", spec["suite"]]
            if relay is not None:  # the queue says what runs: nothing to deselect
                cmd += ["-p", "farm.runner.pytest_shard"]
            else:
                for nodeid in sorted(done):
                    cmd += ["--deselect", nodeid]
            env = job_env(spec["device"], workdir,
                          {**(spec.get("env") or {}), ENV_STARTED: str(started),
                           ENV_COLLECTED: str(collected), ENV_PARENT: str(os.getpid()),
                           ENV_QUICK_EXIT: "1",
                           **(relay.env() if relay else {})})
            with open(log, "wb") as out:
                proc = subprocess.Popen(cmd, cwd=workdir, env=env, stdout=out,
                                        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                        pass_fds=relay.child_fds if relay else (),
                                        preexec_fn=_die_with_parent)  # noqa: PLW1509 (setsid+prctl only)
            if relay is not None:
                relay.started()
            # A twin collects the whole suite; otherwise what was deselected counts as done.
            follow = _Follower(results, started, collected,
                               before=0 if relay is not None else len(done))
            last_finish = None  # only the last subprocess's summary describes the job's end
            ended = None  # why this subprocess ended, when the farm ended it
            while True:
                rc = proc.poll()
                batch = []
                for ev in follow.read(done):
                    kind = ev.get("type")
                    if kind == "session_start":
                        if sent_start:
                            continue
                        sent_start = True
                    elif kind == "session_finish":
                        last_finish = ev
                        continue
                    batch.append(ev)
                now = time.monotonic()
                if rc is None and now > deadline:
                    ended = "job"
                elif (rc is None and follow.current
                      and now - follow.current_since > test_timeout + HANG_GRACE_S):
                    ended = "test"
                if ended:
                    _kill(proc)
                    batch += follow.read(done)  # anything written before the kill
                    if follow.current:
                        why = (f"job timeout: the job ran past {spec['job_timeout']:g}s"
                               if ended == "job" else
                               f"hang: no result {test_timeout + HANG_GRACE_S:g}s after start "
                               f"(--timeout {test_timeout:g}s did not interrupt it)")
                        batch.append(synthesized_result(follow.current, "timeout", why,
                                                        now - follow.current_since))
                        done.add(follow.current)
                if batch:
                    yield batch
                if rc is not None or ended:
                    break
                if relay is None:
                    try:  # wakes as soon as pytest exits, not at the next tick
                        proc.wait(POLL_S)
                    except subprocess.TimeoutExpired:
                        pass
                    continue
                try:  # answer the subprocess's pulls while waiting
                    missing = [t for t in relay.serve(POLL_S) if t not in done]
                except Exception as e:  # noqa: BLE001 (the queue is gone: the job cannot go on)
                    _kill(proc)
                    yield follow.read(done)
                    status, error = "error", f"test queue: {type(e).__name__}: {e}"[:500]
                    break
                if missing:
                    done.update(missing)
                    yield [synthesized_result(t, "error", f"not collected on this node "
                                              f"({socket.gethostname()}) although a twin of "
                                              f"its device variant collected it", 0.0)
                           for t in missing]
            if error is not None:
                break
            if ended == "job":
                status, error = "timeout", f"job timeout after {spec['job_timeout']:g}s"
                break
            if ended == "test":
                restarts += 1
                continue
            if (follow.current and rc == -signal.SIGKILL
                    and _parent_gone(parent, PARENT_GONE_WAIT_S)):
                # The node is going away (its raylet died; this SIGKILL is its teardown's, not
                # the test's): report nothing more, so that the driver, told of the node's
                # death, moves the tests not reported, this one included, to another device.
                # Reporting it crashed lost it to the dying node: a raylet killed mid-test, and
                # this worker streamed the test as crashed and ran the rest there before the
                # driver learnt of the death (tests/test_farm_cluster.py, kill=crash).
                time.sleep(NODE_TEARDOWN_WAIT_S)
            if follow.current:  # the interpreter died inside this test
                msg = (f"interpreter died ({_exit_text(rc)}) during this test; the job "
                       f"continued with the remaining tests")
                yield [synthesized_result(follow.current, "crashed", msg,
                                          time.monotonic() - follow.current_since)]
                done.add(follow.current)
                restarts += 1
                if restarts > MAX_RESTARTS:
                    status, error = "error", f"gave up after {MAX_RESTARTS} interpreter deaths"
                    break
                continue
            if last_finish is None or rc not in (0, 1, 5):
                status = "error"
                error = f"pytest ended ({_exit_text(rc)}) outside any test: {_tail(log)}"
            break
    finally:
        if proc is not None:
            _kill(proc)
        if relay is not None:
            relay.close()
        shutil.rmtree(tmp, ignore_errors=True)
    end: list[dict] = [last_finish] if last_finish else []
    yield [*end, {"type": "farm_job_end", "status": status, "error": error,
                  "restarts": restarts, "time": time.time()}]
