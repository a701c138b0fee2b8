"""History commands: runs, show, history, query, export, regressions, baseline, ingest."""
