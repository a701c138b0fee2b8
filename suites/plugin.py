"""pytest plugin: measure fixture, expectations, JSONL results stream (see docs/CONTRACTS.md)."""
