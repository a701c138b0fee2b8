"""bench/bench_history.py's parts, one job each, so the command line stays small:
``synthetic`` (the fleet and suite whose runs fill the database; bench/sim_scale.py replays them
too), ``ingest`` (growing the database through the library, and plain sqlite3 beside it),
``plans`` (the statements the commands send and their query plans), ``measure`` (the commands'
latency at one size, library and CLI) and ``report`` (targets, verdicts, the table and the
markdown)."""
