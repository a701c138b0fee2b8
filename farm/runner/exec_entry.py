"""A device job started by a warm executor (`farm.fleet.executor`): the run's own code.

The executor starts ``python -m farm.runner.exec_entry`` in the run's staged tree and writes
the job's spec as one JSON line on stdin. This writes, to its stdout, one JSON line per event
batch of `device_job.run_job` (the same batches a Ray task would yield). Anything else that
would reach stdout (a library's print) goes to stderr instead, so the stream stays JSON. A twin
of a sharded job asks its test queue through the same pipes (`PipeQueue`): the executor, a Ray
worker already, makes the call; this process never imports Ray.
"""

from __future__ import annotations

import json
import os
import sys


class PipeQueue:
    """A twin's queue (what `shard_queue.Client` is inside a Ray task), through the executor:
    a question on the events pipe, its answer on stdin."""

    def __init__(self, out, answers) -> None:
        self.out, self.answers = out, answers

    def _call(self, method: str, *args):
        self.out.write(json.dumps({"queue": method, "args": list(args)}) + "\n")
        self.out.flush()
        line = self.answers.readline()
        if not line:
            raise RuntimeError("the executor closed the pipe")
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(reply["error"])
        return reply.get("value")

    def register(self, collected: list[str]) -> None:
        self._call("register", collected)

    def next(self) -> str | None:
        return self._call("next")


def main() -> int:
    events = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # stray prints to stderr (the executor's log), never into the stream
    sys.stdout = sys.stderr
    spec = json.loads(sys.stdin.readline())
    from farm.runner.device_job import run_job

    queue = PipeQueue(events, sys.stdin) if spec.get("shard") else None
    for batch in run_job(spec, queue=queue):
        events.write(json.dumps(batch) + "\n")
        events.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
