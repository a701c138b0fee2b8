"""The `farm` command line: thin typer commands over the `farm` and `db` libraries.

Each group of commands lives in its own module and registers itself on ``app``; this module only
assembles them and turns user errors into one line and an exit code.
"""

from __future__ import annotations

import logging
import sys
from importlib.metadata import PackageNotFoundError, version
from typing import Annotated

import typer
from rich.markup import escape
from sqlalchemy.exc import DatabaseError

from farm import quick_exit
from farm.errors import EXIT_INTERNAL, EXIT_USAGE, Dflash2Error, FarmError

app = typer.Typer(
    help="Ship DFlash2 verification suites to a fleet of devices and query their history.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)

# One example per command, shown at the end of its --help. Kept here, in one table, so every
# command has one (tests/test_cli_help.py checks) whichever module defines the command.
EXAMPLES = {
    "head": "farm head --port 6379",
    "agent": "farm agent --address HEAD:6379 --emulate applegpu_g13s",
    "devices": "farm devices --address HEAD:6379 --json",
    "run": "farm run --suite m8-parity --devices g13s,g14 --junit run.xml",
    "suites": "farm suites --json",
    "runs": "farm runs --suite m8-parity --device g13s --limit 5",
    "show": "farm show    (the latest run; or: farm show RUN --json)",
    "history": "farm history suites/test_parity.py::test_m8_vs_stock --device g13s",
    "query": "farm query \"SELECT suite, count(*) AS n FROM runs GROUP BY suite\"",
    "export": "farm export latest --format junit -o run.xml",
    "regressions": "farm regressions latest --against baseline",
    "baseline set": "farm baseline set latest --device g13s",
    "baseline list": "farm baseline list --json",
    "ingest": "farm ingest results.jsonl --suite m8-parity",
    "logs": "farm logs latest test_m8_vs_stock[gate_up-bfloat16]",
    "report": "farm report --html run.html latest",
}
# -q / -v set this logger's level and are read by commands that print progress.
VERBOSITY = {-1: logging.ERROR, 0: logging.WARNING, 1: logging.INFO, 2: logging.DEBUG}


def _version(value: bool) -> None:
    if value:
        try:
            typer.echo(f"farm (dflash2-farm) {version('dflash2-farm')}")
        except PackageNotFoundError:  # a checkout on sys.path without an install
            typer.echo("farm (dflash2-farm) not installed: run `pip install -e .`")
        raise typer.Exit()


@app.callback(epilog=escape("Example: farm run --suite m8-parity --devices g13s,g14"))
def _root(
    ctx: typer.Context,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="only results and errors: no "
                                        "progress, no notes")] = False,
    verbose: Annotated[int, typer.Option("--verbose", "-v", count=True,
                                         help="more detail (twice: debug logging)")] = 0,
    _: Annotated[bool, typer.Option("--version", is_eager=True, callback=_version,
                                    help="print the version and exit")] = False,
) -> None:
    """Ship DFlash2 verification suites to a fleet of devices and query their history."""
    level = -1 if quiet else min(verbose, 2)
    ctx.obj = {"verbosity": level}
    logging.basicConfig(level=VERBOSITY[level], format="%(levelname)s %(name)s: %(message)s")


def verbosity(ctx: typer.Context | None) -> int:
    """-1 with -q, 0 by default, 1 or 2 with -v / -vv, for a command that takes ``ctx``."""
    obj = ctx.find_root().obj if ctx is not None else None
    return obj.get("verbosity", 0) if isinstance(obj, dict) else 0


def _register() -> None:
    # Imported for their side effect of adding commands to ``app``.
    from farm.cli import fleet, history, logs, report, suites  # noqa: F401

    groups = [("", app)] + [(f"{g.name} ", g.typer_instance) for g in app.registered_groups]
    for prefix, typer_app in groups:
        for cmd in typer_app.registered_commands:
            name = prefix + (cmd.name or cmd.callback.__name__.replace("_", "-"))
            if not cmd.epilog and name in EXAMPLES:
                cmd.epilog = escape(f"Example: {EXAMPLES[name]}")


def script() -> None:
    """The `farm` command (the installed script): `main`, in a process that ends when the
    command does, so `farm run` may end it at once once all is stored (`farm.quick_exit`)."""
    quick_exit.ACTIVE = True
    main()


def main() -> None:
    _register()
    try:
        # standalone_mode=False returns an Exit's code instead of exiting: pass it on.
        rc = app(standalone_mode=False)
        sys.exit(rc if isinstance(rc, int) else 0)
    except FarmError as e:
        typer.echo(f"error: {e}", err=True)
        sys.exit(e.exit_code)
    except DatabaseError as e:  # the history failed under a read (a damaged page, say)
        orig = " ".join(str(getattr(e, "orig", None) or e).split())[:300]
        typer.echo(f"error: the history could not be read ({orig}): if it is damaged, recover "
                   f"it (`sqlite3 FILE .recover`) or point --db elsewhere", err=True)
        sys.exit(EXIT_USAGE)
    except Dflash2Error as e:
        typer.echo(f"error: {e}", err=True)
        sys.exit(EXIT_USAGE)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        typer.echo("aborted", err=True)
        sys.exit(130)
    except Exception as e:  # noqa: BLE001 - click usage errors, and our bugs as one line
        if isinstance(e, typer.TyperException) and hasattr(e, "format_message"):
            # typer >= 0.22 vendors click (typer._click): its usage errors are not click's.
            if type(e).__name__ == "NoArgsIsHelpError":  # a bare group: its help, not an error
                typer.echo(e.format_message(), err=True)
            else:
                typer.echo(f"error: {e.format_message()}", err=True)
            sys.exit(getattr(e, "exit_code", None) or EXIT_USAGE)
        import click

        if isinstance(e, click.exceptions.ClickException):
            typer.echo(f"error: {e.format_message()}", err=True)
            sys.exit(e.exit_code if e.exit_code else EXIT_USAGE)
        # A bug of ours: its own exit code (never 1, which means "unexpected results"), one
        # line, and the traceback only when asked for (-v).
        if logging.getLogger().isEnabledFor(logging.INFO):
            import traceback

            traceback.print_exc()
        text = " ".join(str(e).split())[:300]
        typer.echo(f"error: internal error ({type(e).__name__}: {text}): a bug in dflash2-farm; "
                   f"-v shows the traceback", err=True)
        sys.exit(EXIT_INTERNAL)
