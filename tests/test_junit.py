"""One JUnit writer (db/junit.py) behind `farm export --format junit`, `farm run --junit` and
`pytest --farm-junit`: each output validates against the Jenkins JUnit schema
(tests/data/junit-jenkins.xsd), and the three agree on suites, cases and verdicts."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import xmlschema
from db_fixtures import device, meas, result, sel, session_finish, session_start
from test_history_cli import farm, run_main

from db import junit, open_history
from farm.report.summary import JobRecord, write_junit

pytest_plugins = ["pytester"]
SCHEMA = xmlschema.XMLSchema(str(Path(__file__).parent / "data" / "junit-jenkins.xsd"))
EMU = device(arch="applegpu_g14g", generation=14, size="g", chip="emulated on EPYC",
             backend="cpu", emulated=True)
OUTPUT = "def test_m8():\n>   assert y == ref\nE   AssertionError: <mismatch> & \x1b[31mred\x1b[0m\x00"


def _events() -> dict[str, list[dict]]:
    """Every category on the real device; a clean pass on the emulated one."""
    fail = {**result("suites/t.py::test_m8[bf16-(8,5120,17408)]", outcome="failed",
                     message="AssertionError: <mismatch> \x1b[1m"), "output": OUTPUT}
    return {"mac-1": [
        result(measurements=[meas("deviation", 1e-4, 1e-3), meas("ulps", None)],
               selections=[{**sel("scalar_kmajor"), "impl": "metal"}]),
        fail,
        result("suites/t.py::test_bound", outcome="failed", category="expected_fail",
               expected="fail", link="crbug/1", message="deviation 0.0078125 > 0.001"),
        result("suites/t.py::test_stale", outcome="passed", category="unexpected_pass",
               expected="fail", link="crbug/2"),
        result("suites/t.py::test_crash", outcome="crashed", category="crashed",
               message="worker died"),
        result("suites/t.py::test_fixture", outcome="error", message="fixture broke"),
        result("suites/t.py::test_skip", outcome="skipped", message="needs a Mac"),
    ], "linux-1": [result()]}


# What each case of the real device must be: (child element, its type attribute).
VERDICTS = {
    "test_m8[gate_up-bfloat16]": (None, None),
    "test_m8[bf16-(8,5120,17408)]": ("failure", "failed"),
    "test_bound": (None, None),  # expected: passes, as the farm judges it
    "test_stale": ("failure", "unexpected_pass"),
    "test_crash": ("error", "crashed"),
    "test_fixture": ("error", "error"),
    "test_skip": ("skipped", None),
}


def _history(tmp_path: Path) -> tuple[str, str]:
    db = str(tmp_path / "h.db")
    h = open_history(db)
    run_id = h.start_run("m8-parity", "g13s,g14", {"git_sha": "a" * 40, "dirty": False,
                                                    "tree_hash": "t"})
    for dev, host in ((device(), "mac-1"), (EMU, "linux-1")):
        job = h.add_job(run_id, dev, host, "Darwin 24.1", f"node-{host}")
        h.ingest_events(job, [session_start(dev, host), *_events()[host], session_finish()])
        h.finish_job(job, "lost" if host == "mac-1" else h.job_verdict(job),
                     error="node died: [/bold] <gone>" if host == "mac-1" else None)
    h.finish_run(run_id, h.run_verdict(run_id))
    h.close()
    return db, run_id


def _checked(text: str) -> ET.Element:
    """Valid against the schema; no Python repr anywhere a value is written."""
    SCHEMA.validate(text)
    root = ET.fromstring(text.encode())
    for prop in root.iter("property"):
        value = prop.get("value")
        assert value not in ("None", "True", "False") and not value.startswith("{'"), (
            prop.attrib)
    assert not any(c.find("properties") is not None for c in root.iter("testcase"))
    return root


def _verdicts(suite: ET.Element) -> dict[str, tuple[str | None, str | None]]:
    out = {}
    for case in suite.iter("testcase"):
        child = next((c for c in case if c.tag in ("failure", "error", "skipped")), None)
        out[case.get("name")] = (None, None) if child is None else (child.tag, child.get("type"))
    return out


def test_export_junit_is_valid_and_judges_as_the_farm_does(tmp_path):
    db, run_id = _history(tmp_path)
    res = farm("export", run_id, "--format", "junit", db=db)
    assert res.exit_code == 0, res.output
    root = _checked(res.output)
    suites = {s.get("name"): s for s in root.iter("testsuite")}
    assert set(suites) == {"applegpu_g13s @mac-1", "applegpu_g14g (emulated) @linux-1"}
    mac = suites["applegpu_g13s @mac-1"]
    assert (mac.get("tests"), mac.get("failures"), mac.get("errors"), mac.get("skipped")) == (
        "7", "2", "2", "1")
    assert _verdicts(mac) == VERDICTS
    props = {p.get("name"): p.get("value") for p in mac.find("properties")}
    assert props["emulated"] == "false" and props["run_id"] == run_id
    assert props["suite"] == "m8-parity" and props["chip"] == "Apple M1 Max"
    assert "size" not in props or props["size"] == "s"
    emu_props = {p.get("name"): p.get("value") for p in suites[
        "applegpu_g14g (emulated) @linux-1"].find("properties")}
    assert emu_props["emulated"] == "true"
    assert mac.find("system-err").text == "lost: node died: [/bold] <gone>"
    cases = {c.get("name"): c for c in mac.iter("testcase")}
    failure = cases["test_m8[bf16-(8,5120,17408)]"].find("failure")
    assert failure.get("message") == "AssertionError: <mismatch> \\x1b[1m"
    notes = cases["test_m8[gate_up-bfloat16]"].find("system-out").text
    assert "measurement deviation = 0.0001 abs (bound 0.001)" in notes
    assert "measurement ulps = non-finite" in notes
    assert "kernel gate_up bfloat16 M=8 K=5120 N=17408: scalar_kmajor (tuned, metal)" in notes
    assert "crbug/1" in cases["test_bound"].find("system-out").text
    assert cases["test_skip"].find("skipped").text == "needs a Mac"


def test_farm_run_junit_matches_the_export_of_the_same_run(tmp_path):
    db, run_id = _history(tmp_path)
    exported = _checked(farm("export", run_id, "--format", "junit", db=db).output)
    jobs = []
    for dev, host in ((device(), "mac-1"), (EMU, "linux-1")):
        j = JobRecord(key=f"{dev['arch']}@n", kind=(dev["arch"], dev["emulated"]), device=dev,
                      node_id="n" * 16, host=host, status="passed")
        j.results = {ev["nodeid"]: ev for ev in _events()[host]}
        jobs.append(j)
    jobs[0].status, jobs[0].error = "lost", "node died: [/bold] <gone>"
    path = tmp_path / "out" / "run.xml"
    write_junit(path, jobs, run_id, "m8-parity")
    written = _checked(path.read_text(encoding="utf-8"))
    failure = next(c for c in written.iter("testcase")
                   if c.get("name") == "test_m8[bf16-(8,5120,17408)]").find("failure")
    assert failure.text.startswith("def test_m8():\n>   assert y == ref\n")  # the whole output
    assert "AssertionError: <mismatch> & \\x1b[31mred\\x1b[0m\\x00" in failure.text
    for a, b in zip(exported.iter("testsuite"), written.iter("testsuite"), strict=True):
        assert a.get("name") == b.get("name")
        assert [a.get(k) for k in ("tests", "failures", "errors", "skipped")] == [
            b.get(k) for k in ("tests", "failures", "errors", "skipped")]
        assert _verdicts(a) == _verdicts(b)
        assert a.find("system-err") is None or a.find("system-err").text == b.find(
            "system-err").text


def test_pytest_farm_junit_writes_the_local_session(pytester, monkeypatch):
    monkeypatch.setenv("DFLASH2_DEVICE_ARCH", "applegpu_g13s")
    pytester.makepyfile(test_local="""
        import sys
        import pytest

        def test_ok(measure):
            measure.record("deviation", 0.25, "abs", 1.0)

        @pytest.mark.parametrize("shape", ["(8,5120,17408)"])
        def test_bad(shape):
            print("captured <stdout> line")
            assert shape == "[/bold]"

        def test_skip():
            pytest.skip("not here")
    """)
    out = pytester.path / "reports" / "junit.xml"
    res = pytester.runpytest_inprocess("-p", "no:cacheprovider", f"--farm-junit={out}",
                                       f"--farm-db={pytester.path / 'h.db'}")
    assert res.ret == 1, res.outlines
    root = _checked(out.read_text(encoding="utf-8"))
    (suite,) = root.iter("testsuite")
    assert suite.get("name").startswith("applegpu_g13s (emulated) @")
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("3", "1", "1")
    assert _verdicts(suite) == {"test_ok": (None, None),
                                "test_bad[(8,5120,17408)]": ("failure", "failed"),
                                "test_skip": ("skipped", None)}
    props = {p.get("name"): p.get("value") for p in suite.find("properties")}
    assert props["emulated"] == "true" and props["suite"] == str(pytester.path)  # no args: the directory


def test_unwritable_farm_junit_is_one_usage_error(pytester):
    blocker = pytester.path / "file"
    blocker.write_text("")
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    res = pytester.runpytest_inprocess("-p", "no:cacheprovider",
                                       f"--farm-junit={blocker / 'j.xml'}")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    err = "\n".join(res.errlines)
    assert "--farm-junit: cannot write" in err and "Traceback" not in err


SUITE = '<testsuites><testsuite name="d" tests="1" failures="0"{errors}>{case}</testsuite></testsuites>'
CASE = '<testcase name="t" classname="c">{inner}</testcase>'


@pytest.mark.parametrize("bad", [
    # no errors attribute (what `farm run --junit` wrote)
    SUITE.format(errors="", case=CASE.format(inner="")),
    # <properties> inside <testcase> (what `farm export` wrote)
    SUITE.format(errors=' errors="0"', case=CASE.format(
        inner='<properties><property name="a" value="b"/></properties>')),
    # Jenkins' <skipped> takes no attributes
    SUITE.format(errors=' errors="0"', case=CASE.format(inner='<skipped message="m"/>')),
])
def test_the_schema_refuses_what_the_old_writers_produced(bad):
    """The schema bites: the two defects this writer replaced are refused (and the same
    document without the defect is accepted)."""
    assert not SCHEMA.is_valid(bad)
    assert SCHEMA.is_valid(SUITE.format(errors=' errors="0"', case=CASE.format(inner="")))


def test_values_are_text_never_python_reprs():
    assert [junit.xml_text(v) for v in (True, None, 0.5, {"a": None}, "x\x07")] == [
        "true", "null", "0.5", '{"a": null}', "x\\x07"]
    props = junit.device_properties({**device(), "size": None}, run_id="r", suite=None)
    assert "size" not in props and "suite" not in props and props["emulated"] is False
    assert json.loads(junit.xml_text([1, "a"])) == [1, "a"]


def test_farm_run_refuses_an_unwritable_junit_path_before_running(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    for target, why in ((blocker / "run.xml", "cannot write --junit"),
                        (tmp_path, "a directory")):
        p = run_main(capsys, "run", "--suite", "m8-parity", "--junit", str(target),
                     "--db", str(tmp_path / "h.db"))
        lines = p.stderr.strip().splitlines()
        assert p.returncode == 2 and len(lines) == 1 and why in lines[0], p.stderr
    assert not (tmp_path / "h.db").exists()  # refused before any run was recorded
