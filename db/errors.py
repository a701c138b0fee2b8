"""The one error type of the history: `FarmError(message, exit_code)` (docs/CONTRACTS.md).

Defined in `devices.errors`, below both `db` and `farm`: the contract's "open_history raises
FarmError" holds without `db` depending on the orchestrator above it.
"""

from devices.errors import EXIT_FLAGGED, EXIT_INFRA, EXIT_OK, EXIT_USAGE, FarmError

__all__ = ["EXIT_FLAGGED", "EXIT_INFRA", "EXIT_OK", "EXIT_USAGE", "FarmError"]
