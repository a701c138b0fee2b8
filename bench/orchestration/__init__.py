"""bench/bench_orchestration.py's parts, one job each, so that the command line and the pytest
plugin part stay small: ``common`` (what every part must agree on: devices, modes, targets, the
environment a timed process starts in), ``modes`` (the commands timed), ``probe`` (the
instrumented `farm run` and its phases), ``fleets`` (the loopback cluster and the warm fleet kept
up beside the runs) and ``report`` (the figures derived, the JSON and the markdown)."""
