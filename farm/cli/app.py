"""The `farm` command line: thin typer commands over the `farm` and `db` libraries.

Each group of commands lives in its own module and registers itself on ``app``; this module only
assembles them and turns user errors into one line and an exit code.
"""

from __future__ import annotations

import sys

import typer

from farm.errors import EXIT_USAGE, Dflash2Error, FarmError

app = typer.Typer(
    help="Ship DFlash2 verification suites to a fleet of devices and query their history.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _register() -> None:
    # Imported for their side effect of adding commands to ``app``.
    from farm.cli import fleet, history, report  # noqa: F401


def main() -> None:
    _register()
    try:
        # standalone_mode=False returns an Exit's code instead of exiting: pass it on.
        rc = app(standalone_mode=False)
        sys.exit(rc if isinstance(rc, int) else 0)
    except FarmError as e:
        typer.echo(f"error: {e}", err=True)
        sys.exit(e.exit_code)
    except Dflash2Error as e:
        typer.echo(f"error: {e}", err=True)
        sys.exit(EXIT_USAGE)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        typer.echo("aborted", err=True)
        sys.exit(130)
    except Exception as e:  # click usage errors and the like
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
        raise
