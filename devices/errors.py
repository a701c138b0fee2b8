"""The project's error types, at the bottom so that every layer may raise them.

- ``Dflash2Error``: a mistake a user can make (bad spec, bad architecture, bad selector);
  front ends (the farm CLI, the pytest plugin) turn it into one line and a non-zero exit.
- ``FarmError``: a failure the farm's CLI prints as one line, exiting with its ``exit_code``
  (README: exit codes). Raised by the history (``db``) as well as the orchestrator (``farm``),
  so it lives below both: ``farm.errors`` and ``db.errors`` re-export it.
"""

EXIT_OK = 0
EXIT_FLAGGED = 1  # unexpected results or regressions
EXIT_USAGE = 2  # the user can fix it
EXIT_INFRA = 3  # lost devices, no device, cluster unreachable
EXIT_INTERNAL = 70  # a bug in the farm itself (sysexits' EX_SOFTWARE); 130/143: interrupted


class Dflash2Error(ValueError):
    """A user-correctable error; its message names the fix."""


class FarmError(Exception):
    """A failure the CLI prints as one line, exiting with ``exit_code``."""

    def __init__(self, message: str, exit_code: int = EXIT_USAGE):
        super().__init__(message)
        self.exit_code = exit_code
