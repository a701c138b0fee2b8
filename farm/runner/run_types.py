"""What a run is asked to do, what it comes to, and one device job in flight: plain data that
crosses from the CLI to the run loop (`farm.runner.loop`) and back, and that the benches drive.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from farm.fleet.devices import Device
from farm.report import summary as report


@dataclass
class RunOptions:
    suite: str
    devices: str = "all"
    every: bool = False
    address: str | None = None
    db: str | None = None
    retries: int = 1
    test_timeout: float | None = None
    job_timeout: float | None = None
    json: bool = False
    junit: Path | None = None
    root: Path | None = None  # the checkout to ship (default: around the cwd)
    env: dict[str, str] = field(default_factory=dict)  # extra environment for device jobs


@dataclass
class RunOutcome:
    run_id: str
    status: str
    exit_code: int
    jobs: list[report.JobRecord]
    flags: list[dict]
    revision: dict
    seconds: float
    # Whether any device had a comparable earlier run: no flags means "none" only then.
    compared: bool = True

    def to_json(self) -> dict:
        return {"run_id": self.run_id, "status": self.status, "exit_code": self.exit_code,
                "revision": self.revision, "seconds": round(self.seconds, 2),
                "jobs": [j.to_json() for j in self.jobs], "regressions": self.flags,
                "compared": self.compared}


@dataclass
class Shard:
    """One device job in flight: a whole job on its device, or one twin of a sharded job."""

    job: int  # index in Driver.jobs
    device: Device
    name: str = ""  # the twin's name in its job's queue; "" for a job that is not sharded
    started: bool = False  # its farm_job_start arrived
    end: dict | None = None  # its farm_job_end, once it arrived
