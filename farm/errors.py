"""Errors the farm reports as one line and an exit code (see README: exit codes)."""

from devices.errors import Dflash2Error

EXIT_OK = 0
EXIT_FLAGGED = 1  # unexpected results or regressions
EXIT_USAGE = 2  # the user can fix it
EXIT_INFRA = 3  # lost devices, no device, cluster unreachable
EXIT_INTERNAL = 70  # a bug in the farm itself (sysexits' EX_SOFTWARE); 130/143: interrupted


class FarmError(Exception):
    """A failure the CLI prints as one line, exiting with ``exit_code``."""

    def __init__(self, message: str, exit_code: int = EXIT_USAGE):
        super().__init__(message)
        self.exit_code = exit_code


__all__ = ["EXIT_FLAGGED", "EXIT_INFRA", "EXIT_INTERNAL", "EXIT_OK", "EXIT_USAGE", "Dflash2Error", "FarmError"]
