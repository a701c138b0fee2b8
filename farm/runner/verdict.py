"""A run's status and exit code from its jobs' ends and its regression flags.

The exit code is the contract with scripts and CI (`farm.errors`): an infrastructure fault
(a job lost or in error) outranks a flagged result, so a rerun is what the caller tries first.
"""

from __future__ import annotations

from farm.errors import EXIT_FLAGGED, EXIT_INFRA, EXIT_OK
from farm.report.summary import JobRecord


def run_status(jobs: list[JobRecord]) -> str:
    statuses = {j.status for j in jobs}
    if statuses & {"lost", "error"}:
        return "incomplete"
    return "passed" if statuses <= {"passed"} else "failed"


def exit_code(jobs: list[JobRecord], flags: list[dict]) -> int:
    if any(j.status in ("lost", "error") for j in jobs):
        return EXIT_INFRA
    if flags or any(j.status != "passed" for j in jobs):
        return EXIT_FLAGGED
    return EXIT_OK
