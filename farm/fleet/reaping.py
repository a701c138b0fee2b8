"""Finding and killing every process of a local fleet, whatever state it was left in.

Ray's dashboard and runtime-env agents ignore SIGTERM and outlive a raylet that dies first, and
Ray's own bookkeeping of what it started is incomplete while it is still starting. So a fleet's
processes are found three ways (`fleet_processes`), stopped so none can start another, then
killed and reaped (`kill_fleet`); a watchdog kills them at once when their owner dies
(`start_watchdog`). Shared by the embedded fleet of one run and the warm fleet's keeper.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
import time
from pathlib import Path

ENV_FLEET = "FARM_FLEET_ID"  # in every process of one local fleet (they inherit it)
REAP_S = 10.0  # how long teardown waits for killed processes to be gone
_SESSION = re.compile(r"(/[^\s=:]*/session_\d{4}-\d\d-\d\d_[\d_-]+)(?=/|\s|$)")


# The fleet's watchdog (Linux): it waits for its owner (the driver, or a warm fleet's keeper) to
# die -- the pipe on its stdin closes -- and then kills every process of the fleet at once. The
# nodes die with their owner anyway (kernel fate sharing, see `start_local_fleet`), but Ray's agents, their
# raylet gone, try to tell the GCS for 60 s before they exit. Stdlib only, /proc only: the fleet
# is the processes whose environment carries its id, whose command line names its temp dir, or
# that hold files open there (Ray's renamed processes).
_WATCHDOG = r"""
import os, signal, sys, time
fid, base = sys.argv[1].encode(), sys.argv[2]
me = os.getpid()
try:
    while os.read(0, 4096):
        pass
except OSError:
    pass

def fleet():
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == me:
            continue
        try:
            with open(f"/proc/{d}/environ", "rb") as f:
                hit = b"FARM_FLEET_ID=" + fid in f.read().split(b"\0")
            with open(f"/proc/{d}/cmdline", "rb") as f:
                hit = hit or base.encode() in f.read()
            for fd in [] if hit else os.listdir(f"/proc/{d}/fd"):
                try:
                    if os.readlink(f"/proc/{d}/fd/{fd}").startswith(base):
                        hit = True
                        break
                except OSError:
                    pass
        except OSError:
            continue
        if hit:
            out.append(int(d))
    return out

for _ in range(10):
    pids = fleet()
    if not pids:
        break
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    time.sleep(0.2)
"""


def start_watchdog(base: Path):
    """The fleet's watchdog (above), for a fleet whose id is in this process's environment
    (`ENV_FLEET`) and whose nodes keep their files under ``base``; None off Linux. The caller
    keeps the returned Popen (its stdin is the pipe) for as long as the fleet lives."""
    import subprocess

    if not sys.platform.startswith("linux") or not os.environ.get(ENV_FLEET):
        return None
    return subprocess.Popen([sys.executable, "-S", "-c", _WATCHDOG, os.environ[ENV_FLEET],
                             str(base) + "/"], stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def psutil_module():
    """psutil as Ray ships it (on sys.path once ``ray`` is imported)."""
    import importlib

    import ray  # noqa: F401

    return importlib.import_module("psutil")


def same_process(pid: int, started: float):
    """The psutil.Process of ``pid`` if it is still the process started at ``started`` (its
    create time) and not a zombie; else None (gone, or the pid now names another)."""
    ps = psutil_module()
    try:
        p = ps.Process(int(pid))
        if abs(p.create_time() - float(started)) > 0.01 or p.status() == ps.STATUS_ZOMBIE:
            return None
        return p
    except ps.Error:
        return None


def descendants() -> set[tuple[int, float]]:
    """(pid, start time) of every process below this one."""
    psutil = psutil_module()
    out = set()
    for p in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            out.add((p.pid, p.create_time()))
    return out


def fleet_processes(fleet_id: str, before: set[tuple[int, float]] = frozenset(),
                    sessions: set[str] | None = None, root: int | None = None,
                    session_id: int | None = None) -> list:
    """The live processes of the fleet ``fleet_id`` (psutil.Process objects).

    Found as: descendants of ``root`` (None: this process; 0: none) not in ``before``; processes
    whose environment carries the fleet id; members of the Unix session ``session_id`` (a warm
    fleet's keeper leads one); renamed ``ray::`` processes holding files open under one of
    ``sessions``. ``sessions`` collects the fleet's Ray session directories (named on its
    processes' command lines; a caller may seed it with the fleet's temp dir): a process Ray
    renamed (``ray::DashboardAgent``; its environment is overwritten by the new title too) and
    that lost its parent is still found by the logs it holds open there.
    """
    psutil = psutil_module()
    sessions = set() if sessions is None else sessions
    me = os.getpid()
    found: dict[int, object] = {}
    with contextlib.suppress(psutil.Error):
        for p in psutil.Process(me if root is None else root).children(recursive=True) if (
                root is None or root > 0) else ():
            with contextlib.suppress(psutil.Error):
                if (p.pid, p.create_time()) not in before:
                    found[p.pid] = p
    renamed = []
    for p in psutil.process_iter():
        if p.pid == me or p.pid in found:
            continue
        with contextlib.suppress(psutil.Error):
            if _in_session(p.pid, session_id) or p.environ().get(ENV_FLEET) == fleet_id:
                found[p.pid] = p
            elif p.cmdline()[:1] and p.cmdline()[0].startswith("ray::"):
                renamed.append(p)
    for p in found.values():
        with contextlib.suppress(psutil.Error):
            sessions.update(_SESSION.findall(" ".join(p.cmdline())))
    inside = tuple(d.rstrip("/") + "/" for d in sessions)
    for p in renamed if sessions else ():
        with contextlib.suppress(psutil.Error, OSError):
            if any(f.path.startswith(inside) for f in p.open_files()):
                found[p.pid] = p
    return list(found.values())


def _in_session(pid: int, session_id: int | None) -> bool:
    if session_id is None:
        return False
    try:
        return os.getsid(pid) == session_id
    except OSError:
        return False


def kill_fleet(fleet_id: str, before: set[tuple[int, float]] = frozenset(),
               timeout: float = REAP_S, roots: set[str] | None = None, root: int | None = None,
               session_id: int | None = None) -> list[int]:
    """Stop, then kill, every process of the fleet (`fleet_processes`; ``roots``: directories
    its processes hold files in); wait (bounded) until they are gone.

    Returns the pids still alive after ``timeout`` (none, unless the kernel refuses).
    """
    psutil = psutil_module()
    seen: dict[int, object] = {}
    sessions: set[str] = set(roots or ())
    for _ in range(5):  # stopped parents start nothing: a few passes find the whole tree
        new = [p for p in fleet_processes(fleet_id, before, sessions, root, session_id)
               if p.pid not in seen]
        if not new:
            break
        for p in new:
            seen[p.pid] = p
            with contextlib.suppress(psutil.Error):
                p.send_signal(signal.SIGSTOP)
    for p in seen.values():
        with contextlib.suppress(psutil.Error):
            p.kill()
    deadline = time.monotonic() + timeout
    alive = list(seen.values())
    while alive and time.monotonic() < deadline:
        reap()
        _, alive = psutil.wait_procs(alive, timeout=0.2)
        alive = [p for p in alive if _running(p, psutil)]
    reap()
    return [p.pid for p in alive]


def _running(p, psutil) -> bool:
    try:
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def reap() -> None:
    """Collect exited children (the orphans a subreaper inherits are ours to wait for)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def child_subreaper(on: bool) -> bool:
    """Linux: make this process (or stop it being) the reaper of its orphaned descendants.
    Returns whether it was one before (elsewhere: False, nothing done)."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    was = ctypes.c_int(0)
    with contextlib.suppress(Exception):
        libc.prctl(37, ctypes.byref(was), 0, 0, 0)  # PR_GET_CHILD_SUBREAPER
        libc.prctl(36, 1 if on else 0, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    return bool(was.value)
