"""Fleet commands: head, agent, devices, run. Thin: parse options, call the farm library."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from farm import quick_exit
from farm.cli.app import app
from farm.errors import EXIT_USAGE, FarmError
from farm.fleet.devices import DEVICES_HELP, EVERY_HELP


def _console(stderr: bool = False) -> Console:
    """Wide when not a terminal, so piped matrices are not squeezed to 80 columns."""
    tty = (sys.stderr if stderr else sys.stdout).isatty()
    return Console(stderr=stderr) if tty else Console(stderr=stderr, width=160)


_TOKEN_HELP = "the cluster's auth token (else RAY_AUTH_TOKEN, else ~/.ray/auth_token)"


@app.command()
def head(
    port: int = typer.Option(6379, help="GCS port; the head also uses PORT+1..PORT+7 and "
                                        "workers PORT+100..PORT+299"),
    node_ip: str = typer.Option(None, help="address other machines reach this one at"),
    object_store_mb: int = typer.Option(256, help="object store size (Ray's default is 30% "
                                                  "of RAM per node)"),
    dashboard: bool = typer.Option(False, help="start Ray's dashboard (off by default)"),
    dashboard_port: int = typer.Option(8265, help="dashboard port, with --dashboard"),
    num_cpus: int = typer.Option(None, help="CPUs the head offers (default: all)"),
    temp_dir: str = typer.Option(None, help="Ray's session directory root"),
    token: str = typer.Option(None, envvar="RAY_AUTH_TOKEN", help=_TOKEN_HELP),
    token_file: Annotated[Path | None, typer.Option(help="read the auth token from this file")]
    = None,
) -> None:
    """Start the Ray head node of a farm (token auth on) and print how devices join it."""
    from farm.fleet.head import HeadOptions, join_hint, start_head

    o = HeadOptions(port, node_ip, object_store_mb, dashboard, dashboard_port, num_cpus,
                    temp_dir, token, token_file)
    address = start_head(o)
    typer.echo(f"farm head started: address {address}")
    typer.echo(join_hint(address, o))
    typer.echo(f"run against it with: farm run --address {address} --suite NAME --devices SEL")


@app.command()
def agent(
    address: str = typer.Option(..., envvar="RAY_ADDRESS", help="the head's HOST:PORT"),
    emulate: str = typer.Option(None, help="emulate this architecture (e.g. applegpu_g13s) on "
                                           "a host without an Apple GPU"),
    token: str = typer.Option(None, envvar="RAY_AUTH_TOKEN", help=_TOKEN_HELP),
    token_file: Annotated[Path | None, typer.Option(help="read the auth token from this file")]
    = None,
    object_store_mb: int = typer.Option(256, help="this node's object store size"),
    num_cpus: int = typer.Option(None, help="CPUs this node offers (default: all)"),
    port_base: int = typer.Option(None, help="use ports BASE+1..BASE+7 and workers "
                                             "BASE+100..BASE+299 (default: free ports)"),
    node_ip: str = typer.Option(None, help="address the cluster reaches this node at"),
    block: bool = typer.Option(False, help="stay in the foreground until the node stops"),
) -> None:
    """Join this machine to a farm as one device node (labels + one dflash2_device unit)."""
    from farm.fleet.agent import AgentOptions, start_agent

    typer.echo(start_agent(AgentOptions(address, emulate, token, token_file, object_store_mb,
                                        num_cpus, port_base, node_ip, block)))


@app.command()
def devices(
    address: str = typer.Option(None, help="the head's HOST:PORT (else RAY_ADDRESS)"),
    json_out: bool = typer.Option(False, "--json", help="print JSON"),
    check: bool = typer.Option(True, help="run each device's health check now"),
) -> None:
    """Live devices: node, host, arch, chip, MLX version, emulated, busy/idle, health."""
    from farm.fleet import cluster, health, shipping
    from farm.fleet import devices as fleet

    address = address or os.environ.get("RAY_ADDRESS")
    if not address:
        raise FarmError("no cluster: pass --address HOST:PORT or set RAY_ADDRESS (`farm run` "
                        "without one starts an embedded fleet instead)", EXIT_USAGE)
    with shipping.staged_tree(shipping.find_root()) as staged:
        cluster.connect(address, shipping.runtime_env(staged) if check else None)
        try:
            devs = fleet.live_devices()
            checks = health.check_devices(devs) if check and devs else {}
        finally:
            cluster.disconnect()
    rows = []
    for d in devs:
        h = checks.get(d.node_id, {})
        ident = h.get("identity") or {}
        rows.append({**d.to_json(), "chip": ident.get("chip") or d.chip,
                     "state": "busy" if d.busy else "idle",
                     "health": None if not h else ("ok" if h.get("ok") else "quarantined"),
                     "health_detail": h.get("detail"), "health_time": h.get("time")})
    if json_out:
        typer.echo(json.dumps(rows, indent=2))
        return
    t = Table(title=escape(f"devices at {address}"))
    for col in ("node", "host", "arch", "chip", "mlx", "emulated", "state", "health"):
        t.add_column(col)
    for r in rows:
        t.add_row(*(escape(str(c)) for c in (
            r["node_id"][:8], r["host"], r["arch"], r["chip"], r["mlx_version"],
            "yes" if r["emulated"] else "no", r["state"], _health(r))))
    _console().print(t)
    if not rows:
        typer.echo(fleet.describe([]))


def _health(row: dict) -> str:
    if not row["health"]:
        return "-"
    when = time.strftime("%H:%M:%S", time.localtime(row["health_time"] or 0))
    return row["health"] + f" at {when}" + (
        "" if row["health"] == "ok" else f": {row['health_detail']}")


@app.command()
def run(
    suite: str = typer.Option(..., help="a manifest suite name, or a pytest path in the tree"),
    devices: str = typer.Option("all", help=DEVICES_HELP),
    every: bool = typer.Option(False, help=EVERY_HELP),
    address: str = typer.Option(None, help="the head's HOST:PORT (else RAY_ADDRESS, else an "
                                           "embedded local fleet)"),
    db: str = typer.Option(None, help="history database path or URL (else FARM_DB)"),
    retries: int = typer.Option(1, help="times a job moves to another device when its node "
                                        "dies"),
    test_timeout: float = typer.Option(None, help="per-test timeout, seconds (default: the "
                                                  "suite's)"),
    job_timeout: float = typer.Option(None, help="per-job timeout, seconds (default 3600)"),
    json_out: bool = typer.Option(False, "--json", help="print the run as JSON on stdout"),
    junit: Annotated[Path | None, typer.Option(help="also write a JUnit XML report here")]
    = None,
) -> None:
    """Run a suite on every matching device of the fleet; stream, store and report results."""
    from farm.report.summary import print_summary, write_junit
    from farm.runner.driver import RunOptions
    from farm.runner.driver import run as run_farm

    if junit:
        _check_writable(junit)  # refused before the run, not as a traceback after it
    opts = RunOptions(suite=suite, devices=devices, every=every, address=address, db=db,
                      retries=retries, test_timeout=test_timeout, job_timeout=job_timeout,
                      json=json_out, junit=junit)
    err = _console(stderr=True)
    try:
        outcome = run_farm(opts, err)
    except KeyboardInterrupt as e:  # the run is already marked aborted, its results kept
        if not getattr(e, "reported", False):  # farm.runner.signals.Interrupted said it
            err.print("aborted")
        sys.exit(getattr(e, "exit_code", 130))  # 130 for SIGINT, 143 for SIGTERM
    if junit:
        try:
            write_junit(junit, outcome.jobs, outcome.run_id, suite)
        except OSError as e:  # the run is stored: say so, and still print its summary
            err.print(escape(f"error: cannot write --junit {junit}: {e.strerror or e} (run "
                             f"{outcome.run_id} is stored: `farm export {outcome.run_id} "
                             f"--format junit`)"))
    if json_out:
        typer.echo(json.dumps(outcome.to_json()))
    else:
        print_summary(_console(), outcome.jobs, outcome.flags, outcome.run_id,
                      outcome.exit_code, outcome.compared)
    # sys.exit, not typer.Exit: with standalone_mode=False click returns an Exit's code
    # instead of exiting, and farm.cli.app.main does not pass it on.
    quick_exit.end(outcome.exit_code)  # the `farm` process only: all is stored and printed
    sys.exit(outcome.exit_code)


def _check_writable(path: Path) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise FarmError(f"cannot write --junit {path}: {e.strerror or e}", EXIT_USAGE) from None
    if path.is_dir() or not os.access(path.parent, os.W_OK):
        raise FarmError(f"cannot write --junit {path}: "
                        f"{'a directory' if path.is_dir() else 'permission denied'}", EXIT_USAGE)


# -- the warm fleet: `farm fleet up | down | status` ---------------------------------------------

fleet_app = typer.Typer(help="A local loopback fleet kept warm between runs: `farm run` without "
                             "--address attaches to it.", no_args_is_help=True)
app.add_typer(fleet_app, name="fleet")


def _say(line: str) -> None:
    typer.echo(line, err=True)


@fleet_app.command("up", epilog=escape("Example: farm fleet up --devices g13s,g14,g15s"))
def fleet_up(
    devices: str = typer.Option(None, help="selectors of the devices to keep warm "
                                           "[default: g13s,g14,g15s]"),
    json_out: bool = typer.Option(False, "--json", help="print the fleet as JSON"),
) -> None:
    """Start a local fleet (one Ray node per device, on 127.0.0.1, token auth) that stays up:
    `farm run` without --address attaches to it until `farm fleet down`. Each node keeps an
    executor that runs a run's device jobs in that run's tree, so a run starts no Ray worker;
    SELECTOR*N starts N twins (g14*2)."""
    from farm.fleet import warm

    t0 = time.monotonic()
    if not json_out:
        _say("starting a warm fleet (local Ray on 127.0.0.1) ...")
    fleet, started = warm.up(devices or warm.DEFAULT_DEVICES, _say)
    if json_out:
        typer.echo(json.dumps({**fleet.to_json(), "started_now": started}))
    elif started:
        typer.echo(f"{warm.describe(fleet)}: up in {time.monotonic() - t0:.1f}s; `farm run` "
                   f"without --address attaches to it; `farm fleet down` stops it")
    else:
        typer.echo(f"{warm.describe(fleet)}: already up")


@fleet_app.command("down", epilog=escape("Example: farm fleet down"))
def fleet_down() -> None:
    """Stop the warm fleet: every process of it killed, its state file removed."""
    from farm.fleet import warm

    typer.echo(warm.down(_say))


@fleet_app.command("status", epilog=escape("Example: farm fleet status --json"))
def fleet_status(
    json_out: bool = typer.Option(False, "--json", help="print JSON"),
) -> None:
    """Whether a warm fleet is up: its address, devices, keeper and processes."""
    from farm.fleet import warm

    st = warm.status(_say)
    if json_out:
        typer.echo(json.dumps(st))
    elif st["state"] != "up":
        typer.echo(f"no warm fleet is up (state file {st['state_file']})")
    else:
        since = time.strftime("%H:%M:%S", time.localtime(st["started"]))
        labels = ", ".join(d["arch"] + (" (emulated)" if d.get("emulated") else "")
                           for d in st["devices"])
        typer.echo(f"warm fleet up since {since} ({st['uptime_s']:.0f}s): {st['address']} with "
                   f"{labels}; keeper pid {st['keeper_pid']}, {st['processes']} process(es); "
                   f"state file {st['state_file']}")
