"""The warm fleet: `farm fleet up` keeps a local loopback fleet between runs.

`farm fleet up` starts a *keeper* (``python -m farm.fleet.keeper ...``, `farm.fleet.keeper`) in a Unix session of
its own; the keeper starts the same local fleet an embedded run starts
(`farm.fleet.embedded.start_local_fleet`: one node per device, the first one the head, token
auth, everything on 127.0.0.1), writes the state file and waits. `farm run` without --address
(and without RAY_ADDRESS) reads the state file and, when the fleet is up and has a device for
every selector, attaches to it instead of starting Ray (it says so in one line). `farm fleet
down` stops the keeper, which kills its fleet, and then makes sure: every process of the fleet
-- the keeper's session, its descendants (the keeper is their child subreaper), anything
carrying the fleet's ``FARM_FLEET_ID``, renamed ``ray::`` processes holding files in the
fleet's temp dir -- is killed, and none is left.

The state file (``fleet.json``, mode 0600: it holds the token) lives in a per-user directory:
``$FARM_STATE_DIR``, else ``$XDG_STATE_HOME/dflash2-farm``, else
``~/.local/state/dflash2-farm``. A state file whose keeper is gone (or whose GCS no longer
answers) is stale: whichever command meets it first kills what is left of that fleet, removes
the file and says so in one line.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from farm.errors import EXIT_INFRA, EXIT_USAGE, FarmError
from farm.fleet.reaping import ENV_FLEET, fleet_processes, kill_fleet, psutil_module, same_process

ENV_STATE_DIR = "FARM_STATE_DIR"
STATE_NAME = "fleet.json"
DEFAULT_DEVICES = "g13s,g14,g15s"
UP_S = 120.0  # deadline for `farm fleet up`
DOWN_S = 20.0  # how long `down` waits for the keeper to stop its fleet before killing it all
WATCH_S = 2.0  # how often the keeper checks that its GCS still answers
_VERSION = 1


def state_dir(create: bool = True) -> Path:
    """The per-user directory of the warm fleet's state (made 0700 when ``create``: the fleet
    commands; `farm run` only looks, and an unusable directory just means no warm fleet)."""
    if env := os.environ.get(ENV_STATE_DIR):
        d = Path(env)
    elif xdg := os.environ.get("XDG_STATE_HOME"):
        d = Path(xdg) / "dflash2-farm"
    else:
        d = Path.home() / ".local" / "state" / "dflash2-farm"
    if not create:
        return d
    try:
        d.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as e:
        raise FarmError(f"cannot use the fleet state directory {d}: {e.strerror or e} (set "
                        f"{ENV_STATE_DIR} to a writable directory)", EXIT_USAGE) from None
    return d


def state_file(create: bool = True) -> Path:
    return state_dir(create) / STATE_NAME


@dataclass
class WarmFleet:
    """What the state file records of a warm fleet."""

    address: str
    token: str
    fleet_id: str
    keeper_pid: int
    keeper_started: float  # the keeper's process start time: a reused pid is not the keeper
    temp_dir: str
    devices: list[dict]  # DeviceIdentity.to_json() of each node, head first
    nodes: dict[str, str]  # node id -> arch
    started: float
    log: str
    nonce: str = ""
    version: int = _VERSION
    executors: int = 0  # the protocol its executors speak (`farm.fleet.executor`); 0: none
    path: str = field(default="", compare=False)

    @property
    def labels(self) -> list[str]:
        return [d["arch"] + (" (emulated)" if d.get("emulated") else "") for d in self.devices]

    def identities(self):
        from devices.identity import DeviceIdentity

        return [DeviceIdentity(**d) for d in self.devices]

    def to_json(self) -> dict:
        out = asdict(self)
        out.pop("token")  # never printed
        out.pop("path")
        return out


def read(path: Path | None = None) -> WarmFleet | None:
    """The recorded warm fleet, or None. An unreadable file is stale (`current` cleans it)."""
    path = path or state_file(create=False)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        fleet = WarmFleet(**{k: v for k, v in raw.items() if k != "path"})
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (OSError, ValueError, TypeError) as e:
        return WarmFleet("", "", "", 0, 0.0, "", [], {}, 0.0, "", nonce=f"unreadable: {e}",
                         version=-1, path=str(path))
    fleet.path = str(path)
    return fleet


def write_state(fleet: WarmFleet, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump({k: v for k, v in asdict(fleet).items() if k != "path"}, f, indent=1)
    os.replace(tmp, path)


def _keeper(fleet: WarmFleet):
    """The keeper's psutil.Process, or None when it is gone (or its pid now names another)."""
    return same_process(fleet.keeper_pid, fleet.keeper_started)


def problem(fleet: WarmFleet) -> str | None:
    """Why the recorded fleet is not usable (it is stale), or None when it is up."""
    from farm.fleet.embedded import _answers

    if fleet.version != _VERSION:
        return f"state file {fleet.path} is {fleet.nonce or 'of another version'}"
    if _keeper(fleet) is None:
        return f"its keeper (pid {fleet.keeper_pid}) is gone"
    port = int(fleet.address.rpartition(":")[2] or 0)
    if not _answers(port):
        return f"its GCS at {fleet.address} does not answer"
    return None


def _processes(fleet: WarmFleet) -> list:
    if not fleet.fleet_id:
        return []
    keeper = _keeper(fleet)
    found = fleet_processes(fleet.fleet_id, sessions={fleet.temp_dir} if fleet.temp_dir else set(),
                            root=keeper.pid if keeper else 0,
                            session_id=fleet.keeper_pid if keeper else None)
    if keeper is not None and all(p.pid != keeper.pid for p in found):
        found.append(keeper)
    return found


def _kill_all(fleet: WarmFleet) -> tuple[int, list[int]]:
    """Kill every process of the fleet (keeper included); (how many, pids left alive)."""
    before = {p.pid for p in _processes(fleet)}
    keeper = _keeper(fleet)
    left: list[int] = []
    if fleet.fleet_id:
        left = kill_fleet(fleet.fleet_id, roots={fleet.temp_dir} if fleet.temp_dir else set(),
                          root=keeper.pid if keeper else 0,
                          session_id=fleet.keeper_pid if keeper else None)
    if keeper is not None:
        with contextlib.suppress(Exception):
            keeper.kill()
            keeper.wait(5)
    return len(before), left


def remove_state(fleet: WarmFleet) -> None:
    path = Path(fleet.path) if fleet.path else state_file()
    with contextlib.suppress(FileNotFoundError):
        current = read(path)
        if current is None or current.fleet_id == fleet.fleet_id:
            path.unlink()
    if fleet.temp_dir and Path(fleet.temp_dir).name.startswith("farm-fleet-"):
        shutil.rmtree(fleet.temp_dir, ignore_errors=True)


def clean_stale(fleet: WarmFleet, why: str) -> str:
    """Kill what is left of a stale fleet, remove its state; the one line that says so."""
    n, left = _kill_all(fleet)
    remove_state(fleet)
    killed = f"{n} leftover process(es) killed" if n else "no process of it left"
    tail = f"; still alive: {left}" if left else ""
    return f"stale warm fleet ({why}): {killed}, state {fleet.path} removed{tail}"


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    """One `up`/`down` at a time per user."""
    with open(state_dir() / ".lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def current(say: Callable[[str], None]) -> WarmFleet | None:
    """The warm fleet if one is up; a stale one is cleaned (``say`` gets the line)."""
    fleet = read()
    if fleet is None:
        return None
    why = problem(fleet)
    if why is None:
        return fleet
    with _locked():
        again = read()
        if again is not None and again.fleet_id == fleet.fleet_id and problem(again):
            say(clean_stale(again, why))
    return None


def describe(fleet: WarmFleet) -> str:
    return (f"warm fleet (farm fleet up, keeper pid {fleet.keeper_pid}): {fleet.address} with "
            f"{', '.join(fleet.labels)}")


def attach(selectors, say: Callable[[str], None]) -> WarmFleet | None:
    """For `farm run` without an address: the warm fleet to attach to, with its token set for
    this process, or None (an embedded fleet then). One line either way when a fleet is
    recorded: attached, stale and cleaned, or lacking a device for a selector."""
    from farm.fleet.cluster import use_token_auth

    fleet = current(say)
    if fleet is None:
        return None
    idents = fleet.identities()
    missing = [s.text for s in selectors if not any(s.matches(d) for d in idents)]
    if missing:
        say(f"warm fleet at {fleet.address} has no device for {', '.join(missing)} (it has "
            f"{', '.join(fleet.labels)}): starting an embedded fleet instead")
        return None
    use_token_auth(fleet.token)
    say(f"attached to the warm fleet at {fleet.address} (`farm fleet up`, keeper pid "
        f"{fleet.keeper_pid}; `farm fleet down` stops it): no Ray start")
    return fleet


# -- up / down / status -------------------------------------------------------------------------

def up(devices_text: str, say: Callable[[str], None], timeout: float = UP_S) -> tuple[WarmFleet,
                                                                                      bool]:
    """Start the warm fleet for ``devices_text`` (selectors); (fleet, started now). Already up
    with the same devices: that one, not started again."""
    from farm.fleet import embedded
    from farm.fleet.devices import parse_selectors

    planned = embedded.plan(parse_selectors(devices_text))
    state_dir()  # usable, or one line
    with _locked():
        fleet = read()
        if fleet is not None:
            why = problem(fleet)
            if why is not None:
                say(clean_stale(fleet, why))
            elif [d.to_json() for d in planned] == fleet.devices:
                return fleet, False
            else:
                raise FarmError(f"a warm fleet is already up with {', '.join(fleet.labels)} "
                                f"(keeper pid {fleet.keeper_pid}): `farm fleet down` first",
                                EXIT_USAGE)
        return _spawn(planned, timeout), True


def _spawn(planned, timeout: float) -> WarmFleet:
    path = state_file()
    nonce = secrets.token_hex(8)
    log = path.with_name("fleet.log")
    root = Path(__file__).resolve().parent.parent.parent
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS",)}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), env.get("PYTHONPATH")) if p)
    env[ENV_FLEET] = secrets.token_hex(8)  # in the keeper's own environment too: found by it
    with open(log, "w", encoding="utf-8") as out:
        keeper = subprocess.Popen(
            [sys.executable, "-m", "farm.fleet.keeper", str(path), nonce,
             json.dumps([d.to_json() for d in planned])],
            cwd=path.parent, env=env, stdin=subprocess.DEVNULL, stdout=out,
            stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        fleet = read(path)
        if fleet is not None and fleet.nonce == nonce:
            return fleet
        if keeper.poll() is not None:
            break
        time.sleep(0.05)
    else:
        with contextlib.suppress(ProcessLookupError):
            os.kill(keeper.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            keeper.wait(DOWN_S)
        if keeper.poll() is None:
            keeper.kill()
        raise FarmError(f"the warm fleet did not come up within {timeout:g}s (log: {log})",
                        EXIT_INFRA)
    lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    why = next((ln for ln in reversed(lines) if ln.startswith("error:")), None)
    why = why or (lines[-1] if lines else f"exit {keeper.returncode}")
    raise FarmError(f"the warm fleet failed to start: {why.removeprefix('error: ')[:300]} "
                    f"(log: {log})", EXIT_INFRA)


def down(say: Callable[[str], None]) -> str:
    """Stop the warm fleet: every process of it gone, its state removed; the line to print."""
    state_dir()  # usable, or one line
    with _locked():
        fleet = read()
        if fleet is None:
            return f"no warm fleet is up (no {state_file()})"
        why = problem(fleet)
        if why is not None:
            return clean_stale(fleet, why)
        procs = _processes(fleet)
        with contextlib.suppress(ProcessLookupError):
            os.kill(fleet.keeper_pid, signal.SIGTERM)  # it kills its fleet, removes the state
        ps = psutil_module()
        _, alive = ps.wait_procs(procs, timeout=DOWN_S)
        alive = [p for p in alive if _running(p)]
        n_forced, left = _kill_all(fleet) if alive or _processes(fleet) else (0, [])
        remove_state(fleet)
        if left:
            raise FarmError(f"warm fleet at {fleet.address}: {len(left)} process(es) would not "
                            f"die: pids {left}", EXIT_INFRA)
        forced = f" ({n_forced} killed after the keeper's {DOWN_S:g}s)" if n_forced else ""
        return (f"warm fleet at {fleet.address} down: {len(procs)} process(es) stopped{forced}, "
                f"state {fleet.path} removed")


def _running(p) -> bool:
    ps = psutil_module()
    try:
        return p.status() != ps.STATUS_ZOMBIE
    except ps.Error:
        return False


def status(say: Callable[[str], None]) -> dict:
    """The warm fleet as JSON-ready data (``state`` "up" or "down"); stale state is cleaned."""
    state_dir()  # usable, or one line
    fleet = current(say)
    if fleet is None:
        return {"state": "down", "state_file": str(state_file())}
    procs = _processes(fleet)
    return {"state": "up", **fleet.to_json(), "processes": len(procs),
            "pids": sorted(p.pid for p in procs), "state_file": fleet.path,
            "uptime_s": round(time.time() - fleet.started, 1)}
