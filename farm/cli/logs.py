"""`farm logs RUN [TEST]`: the whole output of a run's failures, as pytest printed it."""

from typing import Annotated

import typer

from db import open_history
from db.logs import run_logs
from db.queries import resolve_run
from farm.cli.app import app
from farm.cli.history import DbOpt, JsonOpt, _echo_json


@app.command("logs")
def logs_cmd(
    run: Annotated[str, typer.Argument(help="run id, a unique prefix of one, or 'latest'")],
    test: Annotated[str | None, typer.Argument(
        help="a node id, a test id, or a unique part of one (default: every failure)")] = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Print the whole captured output (traceback, stdout, stderr, log) of a run's failures, or
    of one test on every device it ran on."""
    with open_history(db, write=False) as h:
        run_id = resolve_run(h, run)
        rows = run_logs(h, run_id, test)
    if as_json:
        _echo_json(rows)
        return
    if not rows:
        typer.echo(f"run {run_id} has no failures")
        return
    for i, r in enumerate(rows):
        if i:
            typer.echo("")
        # Plain text, never rich markup: output holds [params], [/...] and ANSI as printed.
        typer.echo(f"==== {r['device']}: {r['nodeid']} ({r['outcome']}, {r['category']}) ====")
        if r["output"]:
            typer.echo(r["output"].rstrip("\n"))
        elif r["outcome"] in ("passed", "skipped"):
            typer.echo(f"{r['outcome']}: no failure output" + (
                f" ({r['message']})" if r["message"] else ""))
        else:  # recorded before results kept their output
            typer.echo((r["message"] or "") + "\n(only this short message was recorded)")
