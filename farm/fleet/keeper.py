"""The warm fleet's keeper: the process `farm fleet up` leaves running (`farm.fleet.warm`).

It starts the local fleet (one node per device, the first the head, on 127.0.0.1), connects to
it as a Ray driver to start the nodes' warm executors (`farm.fleet.executor`), records the fleet
in the state file and waits: for a signal (`farm fleet down`) or for its GCS to stop answering.
Then it kills every process of the fleet and removes the record.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import sys
import time
from pathlib import Path

from farm.errors import EXIT_INFRA, FarmError
from farm.fleet.reaping import psutil_module
from farm.fleet.warm import WATCH_S, WarmFleet, remove_state, write_state


def keep(path: Path, nonce: str, devices: list[dict]) -> int:
    """The keeper's life: start the fleet, record it, wait for SIGTERM/SIGINT/SIGHUP (or its
    GCS to stop answering), kill the fleet, remove the record. (Signals are handled, not
    blocked: a blocked mask would be inherited by every Ray process it starts.)"""
    from devices.identity import DeviceIdentity
    from farm.fleet import embedded, reaping
    from farm.fleet.cluster import disconnect, use_token_auth
    from farm.tempdirs import owned_tmpdir

    stopping: list[int] = []

    def handle_signals() -> None:  # again after ray.init, which puts Ray's own in
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, lambda signum, frame: stopping.append(signum))
    handle_signals()
    fleet_id = os.environ.get(reaping.ENV_FLEET) or secrets.token_hex(8)
    token = secrets.token_hex(32)
    os.environ[reaping.ENV_FLEET] = fleet_id
    reaping.child_subreaper(True)
    use_token_auth(token)
    idents = [DeviceIdentity(**d) for d in devices]
    base = owned_tmpdir(embedded.TEMP_PREFIX)
    fleet = None
    watchdog = reaping.start_watchdog(base)  # noqa: F841 -- lives as long as the fleet
    try:
        with embedded.single_host_ray():
            address, nodes = embedded.start_local_fleet(idents, base)
            executors = _start_executors(address, list(nodes))
        handle_signals()
        me = psutil_module().Process()
        fleet = WarmFleet(address=address, token=token, fleet_id=fleet_id, keeper_pid=me.pid,
                          keeper_started=me.create_time(), temp_dir=str(base), devices=devices,
                          nodes={n: d.arch for n, d in nodes.items()}, started=time.time(),
                          log=str(path.with_name("fleet.log")), nonce=nonce, path=str(path),
                          executors=executors)
        write_state(fleet, path)
        print(f"warm fleet up at {address}: {', '.join(fleet.labels)}", flush=True)
        port = int(address.rpartition(":")[2])
        misses, tick = 0, time.monotonic()
        while not stopping:
            time.sleep(0.1)  # a signal cuts it short
            reaping.reap()  # orphans of the fleet are this subreaper's to collect
            if time.monotonic() - tick >= WATCH_S:
                tick = time.monotonic()
                misses = 0 if embedded._answers(port) else misses + 1
                if misses >= 3:
                    print(f"error: the fleet's GCS at {address} stopped answering", flush=True)
                    return EXIT_INFRA
        print(f"{signal.Signals(stopping[0]).name}: stopping the fleet", flush=True)
        return 0
    except FarmError as e:
        print(f"error: {e}", flush=True)
        return e.exit_code
    finally:
        with contextlib.suppress(Exception):
            disconnect()
        reaping.kill_fleet(fleet_id, roots={str(base)})
        if fleet is not None:
            remove_state(fleet)
        shutil.rmtree(base, ignore_errors=True)


def _start_executors(address: str, node_ids: list[str]) -> int:
    """The keeper connects as a driver and starts one executor per node (`farm.fleet.executor`);
    the protocol they speak, or 0 (and a line in the fleet's log) when they could not start:
    runs then start Ray workers, as on any cluster."""
    from farm.fleet import executor
    from farm.fleet.cluster import connect
    from farm.fleet.embedded import LOOPBACK

    try:
        connect(address, node_ip=LOOPBACK)
        executor.start_all(node_ids)
    except Exception as e:  # noqa: BLE001 -- the fleet is still usable without them
        print(f"warning: no warm executors ({type(e).__name__}: {str(e)[:200]}); runs on this "
              f"fleet start Ray workers", flush=True)
        return 0
    return executor.VERSION


if __name__ == "__main__":
    if len(sys.argv) == 4:
        sys.exit(keep(Path(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])))
    sys.exit(f"usage: {sys.executable} -m farm.fleet.keeper STATE NONCE DEVICES_JSON")
