"""A device job started by a warm executor (`farm.fleet.executor`): the run's own code.

The executor starts ``python -m farm.runner.exec_entry`` in the run's staged tree with the job's
spec on stdin and relays what this writes to its stdout: one JSON line per event batch of
`device_job.run_job`, the same batches a Ray task would yield. Anything else that would reach
stdout (a library's print) goes to stderr instead, so the stream stays JSON. A sharded job's twin
pulls its tests from the run's queue actor, so it connects to the fleet as a Ray driver of its
own first (a twin's share of a run; a job that is not sharded never imports Ray).
"""

from __future__ import annotations

import json
import os
import sys


def main() -> int:
    events = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # stray prints to stderr (the executor's log), never into the stream
    sys.stdout = sys.stderr
    spec = json.load(sys.stdin)
    if spec.get("shard"):
        from farm.fleet.cluster import connect

        connect(os.environ["FARM_EXEC_ADDRESS"])
    from farm.runner.device_job import run_job

    for batch in run_job(spec):
        events.write(json.dumps(batch) + "\n")
        events.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
