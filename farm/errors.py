"""Errors the farm reports as one line and an exit code (see README: exit codes). Defined in
``devices.errors``, below the history (``db``) that raises them too."""

from devices.errors import (
    EXIT_FLAGGED,
    EXIT_INFRA,
    EXIT_INTERNAL,
    EXIT_OK,
    EXIT_USAGE,
    Dflash2Error,
    FarmError,
)

__all__ = ["EXIT_FLAGGED", "EXIT_INFRA", "EXIT_INTERNAL", "EXIT_OK", "EXIT_USAGE", "Dflash2Error", "FarmError"]
