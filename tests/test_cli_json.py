"""Every command's `--json` against the tables of docs/RESULTS_FORMAT.md, parsed here, so the
document and the code cannot drift: a key added, renamed (`id` for `run_id`) or dropped on
either side fails."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from db_fixtures import (
    device,
    meas,
    record,
    result,
    sel,
    session_finish,
    session_start,
    write_jsonl,
)
from test_history_cli import farm

from db import open_history

DOC = Path(__file__).resolve().parent.parent / "docs" / "RESULTS_FORMAT.md"
PART = "# The `farm` commands' `--json` output"
NODE = "suites/test_parity.py::test_m8[gate_up-bfloat16]"


def documented() -> dict[str, dict[str, str]]:
    """heading (e.g. ``farm runs --json``) -> key path -> type, from the document's tables."""
    text = DOC.read_text(encoding="utf-8")
    assert PART in text, f"{DOC} lost its section {PART!r}"
    out: dict[str, dict[str, str]] = {}
    heading = None
    for line in text.split(PART, 1)[1].splitlines():
        if m := re.match(r"^## `(farm [^`]+)`", line):
            heading = m.group(1)
            out[heading] = {}
        elif heading and (m := re.match(r"^\| `([^`]+)` \| ([^|]+) \|", line)):
            out[heading][m.group(1)] = m.group(2).strip()
    return out


def keys(value, types: dict[str, str], prefix: str = "") -> set[str]:
    """The key paths of ``value``, descending only where the document lists nested keys."""
    out: set[str] = set()
    if isinstance(value, list):
        for el in value:
            out |= keys(el, types, prefix + "[].")
        return out
    for k, v in value.items():
        path = prefix + k
        out.add(path)
        if types.get(path) == "object" and isinstance(v, dict):
            out |= keys(v, types, path + ".")
        elif types.get(path) == "list of objects" and isinstance(v, list):
            for el in v:
                out |= keys(el, types, path + "[].")
    return out


@pytest.fixture
def history(tmp_path):
    """Two runs on two devices, every list non-empty: selections, measurements, flags, a
    failure with output, a baseline."""
    db = str(tmp_path / "h.db")
    h = open_history(db)
    emu = device(arch="applegpu_g14g", generation=14, size="g", chip="emulated on EPYC",
                 backend="cpu", emulated=True)
    good = [result(measurements=[meas("deviation", 1e-4, 1e-3)],
                   selections=[{**sel("scalar_kmajor"), "impl": "metal"}])]
    bad = [{**result(outcome="failed", message="mismatch",
                     measurements=[meas("deviation", 1e-4, 1e-3)],
                     selections=[{**sel("stock", reason="fallback:unsupported-device"),
                                  "impl": "stock-native"}]), "output": "E   mismatch\n"}]
    r1 = record(h, [(device(), "mac-1", good), (emu, "linux-1", good)], started=1000.0)
    r2 = record(h, [(device(), "mac-1", bad), (emu, "linux-1", good)], started=2000.0)
    h.close()
    return db, r1, r2


def _json(*args: str, db: str | None = None):
    res = farm(*args, db=db)
    assert res.exit_code in (0, 1), (args, res.output, res.error)
    return json.loads(res.output)


def _devices_json(monkeypatch) -> list[dict]:
    """`farm devices --json` with the Ray layer stood in for (no cluster in this test): the
    rows are assembled by the command itself."""
    from farm.fleet import cluster, health
    from farm.fleet import devices as fleet

    dev = fleet.Device("n" * 16, "mac-1", "10.0.0.1", "applegpu_g13s", 13, "s", "metal", False,
                       "Apple M1 Max", "0.32.4", False)
    monkeypatch.setattr(cluster, "connect", lambda address, env=None: None)
    monkeypatch.setattr(cluster, "disconnect", lambda: None)
    monkeypatch.setattr(fleet, "live_devices", lambda *a, **k: [dev])
    monkeypatch.setattr(health, "check_devices", lambda devs, *a, **k: {
        dev.node_id: {"ok": True, "detail": "", "time": 1.0, "identity": {"chip": "M1 Max"}}})
    return _json("devices", "--address", "127.0.0.1:9", "--json")


def _run_json() -> dict:
    """What `farm run --json` prints: the run outcome's `to_json()` (a run needs a fleet)."""
    from db.revision import current_revision
    from farm.report.summary import JobRecord
    from farm.runner.driver import RunOutcome

    job = JobRecord(key="applegpu_g13s@n", kind=("applegpu_g13s", False), device={
        "arch": "applegpu_g13s", "generation": 13, "size": "s", "chip": "Apple M1 Max",
        "backend": "metal", "mlx_version": "0.32.4", "emulated": False}, node_id="n" * 16,
        host="mac-1", job_id=1, status="passed", state="done", nodes=["n" * 16])
    job.results[NODE] = result()
    return json.loads(json.dumps(RunOutcome("r", "passed", 0, [job], [], current_revision(),
                                            1.5).to_json()))


def test_every_json_output_has_exactly_the_documented_keys(history, tmp_path, monkeypatch):
    db, r1, r2 = history
    doc = documented()
    ingest_file = write_jsonl(tmp_path / "r.jsonl", [session_start(), result(),
                                                     session_finish()])
    actual = {
        "farm runs --json": _json("runs", "--json", db=db),
        "farm show --json": _json("show", "--json", db=db),
        "farm history TEST --json": _json("history", NODE, "--json", db=db),
        "farm regressions --json": _json("regressions", r2, "--against", r1, "--json", db=db),
        "farm baseline set RUN --json": _json("baseline", "set", r2, "--json", db=db),
        "farm baseline list --json": _json("baseline", "list", "--json", db=db),
        "farm logs RUN [TEST] --json": _json("logs", "latest", "--json", db=db),
        "farm ingest FILE --json": _json("ingest", str(ingest_file), "--json", db=db),
        "farm suites --json": _json("suites", "--json"),
        "farm devices --json": _devices_json(monkeypatch),
        "farm run --json": _run_json(),
    }
    assert set(doc) - {"farm query SQL --json", "farm export RUN --format json"} == set(actual)
    for heading, value in actual.items():
        assert value, f"{heading}: nothing to check"
        assert keys(value, doc[heading]) == set(doc[heading]), heading
    # `farm query` rows are the statement's columns; `farm export --format json` repeats
    # `farm show`'s run and jobs, each job with its results.
    assert _json("query", "SELECT id AS run_id FROM runs", "--json", db=db)[0] == {"run_id": r1}
    exported = json.loads(farm("export", r2, "--format", "json", db=db).output)
    show = doc["farm show --json"]
    assert keys(exported["run"], show, "run.") == {k for k in show if k.startswith("run.")}
    assert keys(exported["jobs"], show, "jobs") - {"jobs[].results"} == {
        k for k in show if k.startswith("jobs[].")}


def test_run_ids_are_named_run_id_everywhere(history):
    """The naming rule itself: no output names a run's id anything but `run_id`."""
    db, r1, r2 = history
    for args in (["runs"], ["show"], ["logs", "latest"], ["regressions", r2, "--against", r1]):
        text = farm(*args, "--json", db=db).output
        assert r2 in text
        for m in re.finditer(r'"(\w+)": "' + re.escape(r2) + '"', text):
            assert m.group(1) in ("run_id",), (args, m.group(0))
