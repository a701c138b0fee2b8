"""pytest plugin: `--farm-db PATH` records a local run in the history."""
