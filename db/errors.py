"""The one error type of the history: `FarmError(message, exit_code)` (docs/CONTRACTS.md).

`farm.errors` is a leaf module (it imports only `devices.errors`); this is the single place `db/`
touches `farm`, so the contract's "open_history raises FarmError" holds without `db` depending
on the orchestrator.
"""

from farm.errors import EXIT_FLAGGED, EXIT_INFRA, EXIT_OK, EXIT_USAGE, FarmError

__all__ = ["EXIT_FLAGGED", "EXIT_INFRA", "EXIT_OK", "EXIT_USAGE", "FarmError"]
