"""The rules that turn a device job's stream into its job's record and the run's exit code
(`farm.runner.events`, `farm.runner.verdict`), checked on their own: the cluster tests reach
them only through whole runs, where a wrong rule shows as a wrong count far from its cause."""

from __future__ import annotations

import ray

from farm.errors import EXIT_FLAGGED, EXIT_INFRA, EXIT_OK
from farm.fleet.devices import Device
from farm.report.summary import JobRecord
from farm.runner import events, verdict
from farm.runner.run_types import Shard


def _device(node: str = "n1") -> Device:
    return Device(node_id=node, host="h", address="127.0.0.1", arch="g14", generation=14,
                  size=None, backend="emulated", emulated=True, chip="", mlx_version="0",
                  busy=False)


def _job(status: str = "") -> JobRecord:
    return JobRecord(key="g14@n1", kind=("g14", True), device={"arch": "g14"}, node_id="n1",
                     status=status)


def _result(nodeid: str, outcome: str = "passed", expected: str | None = None) -> dict:
    return {"type": "result", "nodeid": nodeid, "outcome": outcome,
            "expectation": {"expected": expected} if expected else {}}


def test_absorb_records_results_with_their_provenance_and_stores_only_what_the_history_keeps():
    job, sh = _job(), Shard(0, _device())
    job.attempt = 2
    store = events.absorb(job, sh, [
        {"type": "farm_job_start"}, {"type": "farm_collected", "total": 3},
        {"type": "session_start"}, _result("t::a"), {"type": "log", "line": "x"},
        {"type": "farm_job_end", "status": "completed"}])
    assert sh.started and job.state == "running" and job.total == 3
    assert [e["type"] for e in store] == ["session_start", "result"]
    assert store[1]["farm_node"] == "n1" and store[1]["farm_attempt"] == 2
    assert job.results["t::a"] is store[1] and job.current == "t::a"
    assert sh.end == job.end == {"type": "farm_job_end", "status": "completed"}


def test_a_twins_late_copy_of_a_reported_test_is_dropped_and_a_whole_jobs_retry_is_kept():
    job = _job()
    events.absorb(job, Shard(0, _device("n1"), name="a"), [_result("t::a", "failed")])
    late = events.absorb(job, Shard(0, _device("n2"), name="b"), [_result("t::a")])
    assert late == [] and job.results["t::a"]["outcome"] == "failed"
    again = events.absorb(job, Shard(0, _device("n2")), [_result("t::a")])  # a retry: newest
    assert len(again) == 1 and job.results["t::a"]["outcome"] == "passed"


def test_undecodable_output_is_escaped_before_it_is_stored():
    job = _job()
    ev = {**_result("t::a"), "output": "a\udcffb"}
    (stored,) = events.absorb(job, Shard(0, _device()), [ev])
    stored["output"].encode("utf-8")  # raises if a lone surrogate got through


def test_a_completed_job_passes_only_when_nothing_unexpected_happened():
    end = {"status": "completed"}
    job = _job()
    job.results = {"a": _result("a"), "b": _result("b", "failed", expected="fail")}
    assert events.end_status(job, end) == "passed"
    for bad in (_result("c", "failed"), _result("c", "passed", expected="fail"),
                _result("c", "crashed")):
        job.results["c"] = bad
        assert events.end_status(job, end) == "failed", bad
    assert events.end_status(_job(), {"status": "timeout"}) == "timeout"
    assert events.end_status(_job(), {"status": "odd"}) == "error"


def test_ray_errors_that_mean_the_device_went_away_are_told_from_job_failures():
    assert events.node_died(ray.exceptions.WorkerCrashedError())
    assert events.node_died(ray.exceptions.GetTimeoutError("slow"))
    wrapped = ray.exceptions.RayTaskError("f", "tb", ray.exceptions.NodeDiedError("gone"))
    assert events.node_died(wrapped)
    failed = ray.exceptions.RayTaskError("f", "tb", ValueError("boom"))
    assert not events.node_died(failed)
    line = events.failure_line(ValueError("first\nlast line"))
    assert line == "ValueError: last line"


def test_an_infrastructure_fault_outranks_a_flagged_result_in_the_exit_code():
    passed, failed, lost = _job("passed"), _job("failed"), _job("lost")
    assert verdict.run_status([passed]) == "passed"
    assert verdict.run_status([passed, failed]) == "failed"
    assert verdict.run_status([failed, lost]) == "incomplete"
    assert verdict.exit_code([passed], []) == EXIT_OK
    assert verdict.exit_code([passed], [{"kind": "fingerprint"}]) == EXIT_FLAGGED
    assert verdict.exit_code([failed], []) == EXIT_FLAGGED
    assert verdict.exit_code([failed, lost], [{"kind": "x"}]) == EXIT_INFRA
    assert verdict.exit_code([_job("error")], []) == EXIT_INFRA
