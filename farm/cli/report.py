"""`farm report`: one run as a self-contained HTML page (``farm.report.html`` renders it).

Thin like the other command modules: resolve the run, render, write; a bad run or an unwritable
path is one line and exit 2, never a traceback or a half-written page left behind silently. The
page is rendered whole before the file is opened, so a failure while rendering leaves no file.
"""

from pathlib import Path
from typing import Annotated

import typer

from db import open_history
from farm.cli.app import app
from farm.cli.history import DbOpt
from farm.errors import EXIT_USAGE, FarmError
from farm.report.html import DEFAULT_RUNS, render_report


@app.command("report")
def report_cmd(
    html: Annotated[Path, typer.Option("--html", metavar="PATH",
                                       help="write the HTML page here")],
    run: Annotated[str | None, typer.Argument(
        metavar="RUN", help="run id, a unique prefix of one, or 'latest' (default: latest)")] = None,
    against: Annotated[str, typer.Option(
        help="regressions against 'baseline' (per suite and device variant) or a run id"
    )] = "baseline",
    runs: Annotated[int, typer.Option(
        help="plot at most this many runs of each suite, up to and including RUN")
    ] = DEFAULT_RUNS,
    db: DbOpt = None,
) -> None:
    """Write RUN's status, device x test matrix, regression flags and per-suite trend plots as
    one HTML page."""
    if runs < 1:
        raise FarmError(f"--runs must be at least 1 (got {runs})", EXIT_USAGE)
    with open_history(db, write=False) as h:
        page = render_report(h, run, against=against, runs=runs)
    try:
        html.write_text(page, encoding="utf-8")
    except OSError as e:
        raise FarmError(f"cannot write {html}: {e.strerror or e}", EXIT_USAGE) from None
    typer.echo(f"wrote {html} ({len(page) // 1024} KiB)")
