"""What a device job's stream means to its job: each batch of events folded into the job's
record, and each Ray error sorted into "the node is gone" or "the job failed".

Kept apart from the loop (`farm.runner.loop`) because these are the rules a reader checks
against the device side (`farm.runner.device_job`), while the loop is about Ray and time.
"""

from __future__ import annotations

import time

from db.events import scrub
from farm.report.summary import JobRecord
from farm.runner.run_types import Shard

# Ray errors that mean the device (its node, worker or objects) is gone, not that the job
# failed: the job moves to another device of its kind, or is lost.
DIED = ("NodeDiedError", "WorkerCrashedError", "ObjectLostError", "OwnerDiedError",
        "ObjectFetchTimedOutError", "TaskUnschedulableError", "RaySystemError",
        "ActorDiedError", "LocalRayletDiedError", "ReferenceCountingAssertionError",
        "OutOfMemoryError", "GetTimeoutError")


def node_died(error: BaseException) -> bool:
    """Whether a Ray error (or the error it wraps) says the device went away."""
    cause = getattr(error, "cause", None)
    return type(error).__name__ in DIED or type(cause).__name__ in DIED


def failure_line(error: BaseException) -> str:
    """A job's error as one stored line: the error's name and its message's last line."""
    return f"{type(error).__name__}: {str(error).strip().splitlines()[-1][:300]}"


def absorb(job: JobRecord, sh: Shard, batch: list[dict]) -> list[dict]:
    """Fold one batch from ``sh``'s stream into ``job``; returns the events to store.

    Undecodable bytes in a test's output are escaped once, here: stored, printed in the
    summary and written as JSON alike, never raising after the run is under way.
    """
    store: list[dict] = []
    for ev in scrub(batch):
        kind = ev.get("type")
        if kind == "farm_job_start":
            sh.started = True
            if job.state != "running":  # the first twin (or the attempt) to start
                job.state = "running"
                job.streaming, job.done_before = time.monotonic(), len(job.results)
        elif kind == "farm_collected" and isinstance(ev.get("total"), int):
            job.total = ev["total"]
        elif kind == "farm_job_end":
            sh.end = job.end = ev
        elif kind == "result":
            if sh.name and ev.get("nodeid", "") in job.results:
                continue  # a twin's late copy: each test has one result
            # provenance: the node that ran it, its host, the job's attempt
            ev["farm_node"], ev["farm_host"] = sh.device.node_id, sh.device.host
            ev["farm_attempt"] = job.attempt
            job.results[ev.get("nodeid", "")] = ev
            job.current = ev.get("nodeid", "")
            store.append(ev)
        elif kind in ("session_start", "session_finish"):
            store.append(ev)
    return store


def end_status(job: JobRecord, end: dict) -> str:
    """A whole job's status from its final event: a completed job passed unless a test
    failed, passed unexpectedly or crashed; anything else is its timeout or an error."""
    status = end.get("status")
    if status == "completed":
        c = job.counts()
        bad = c["unexpected_fail"] + c["unexpected_pass"] + c["crashed"]
        return "failed" if bad else "passed"
    return status if status in ("timeout", "error") else "error"
