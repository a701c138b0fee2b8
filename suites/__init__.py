"""See docs/CONTRACTS.md."""
