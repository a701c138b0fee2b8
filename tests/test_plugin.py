"""The suites plugin end to end, through pytester in subprocesses (as a user or the farm runs it):
measurements, selections and fingerprints reach user_properties and the JSONL stream, expected
failures keep the run green, stale ones show, and it all holds under pytest-xdist."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np
import pytest

from kernels.recorder import IMPLEMENTATIONS, Selection
from suites.measure import float32_digest
from suites.outcome import split_nodeid

pytest_plugins = ["pytester"]

EXPECTATIONS = """\
# tags: [ applegpu_g13s cpu ]
# tags: [ emulated real ]
# known wrong answer
bug/1 test_inner.py::test_known[a-b] [ Failure ]
# fixed long ago
bug/2 test_inner.py::test_stale [ Failure ]
bug/3 test_inner.py::test_skipped [ Skip ]  # never run this
bug/4 [ emulated ] test_inner.py::test_emulated_only [ Failure ]
bug/5 test_inner.py::test_setup_error [ Failure ]
bug/6 test_inner.py::test_hangs [ Failure ]
"""

INNER = """\
import math
import os
import time

import mlx.core as mx
import pytest

from devices.identity import current_device
from kernels.recorder import Selection, report

SEL = Selection("gate_up", "bfloat16", 8, 5120, 17408, "scalar_kmajor", "tuned",
                impl="metal-emulated")


def test_measured(measure):
    measure.record("deviation", 0.0078125, unit="abs", bound=0.001)
    measure.record("ulps", math.nan)
    measure.record("headroom", math.inf, bound=math.inf)
    report(SEL)
    report(SEL)
    report(Selection("down", "bfloat16", 8, 17408, 5120, "stock", "fallback:shape"))
    assert [s.variant for s in measure.selections] == ["scalar_kmajor", "stock"]
    measure.fingerprint("scalar_kmajor/4x8/bfloat16",
                        mx.arange(32, dtype=mx.bfloat16).reshape(4, 8) / 7)


def test_unmeasured_selection_is_not_captured():
    report(SEL)


@pytest.mark.parametrize("p", ["a-b"])
def test_known(p):
    assert 1.0 == 2.0, "deviation 0.0078125 above bound 0.001"


def test_stale():
    pass


def test_skipped():
    raise AssertionError("a Skip expectation must keep this from running")


def test_emulated_only():
    assert not current_device().emulated, "wrong answer on emulated devices"


@pytest.fixture
def broken():
    raise RuntimeError("fixture broke")


def test_setup_error(broken):
    pass


@pytest.mark.timeout(0.5, method="signal")
def test_hangs():
    time.sleep(20)


def test_unexpected():
    assert False, "nobody expected this"


def test_device_seen_in_process():
    assert current_device().arch == os.environ.get("EXPECT_ARCH", "cpu")
"""

CONFTEST = """\
import json

def pytest_runtest_logreport(report):
    if report.when == "teardown":
        with open("user_properties.jsonl", "a") as fh:
            fh.write(json.dumps([report.nodeid, [list(p) for p in report.user_properties]],
                                default=str) + "\\n")
"""


def _strict_json(line: str) -> Any:
    def refuse(token: str) -> None:
        raise ValueError(f"non-JSON constant {token}")
    return json.loads(line, parse_constant=refuse)


def _events(path: Path) -> list[dict[str, Any]]:
    return [_strict_json(line) for line in path.read_text().splitlines()]


def _results(events: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {e["nodeid"].split("::", 1)[1]: e for e in events if e["type"] == "result"}


@pytest.fixture
def inner(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makefile(".txt", exp=EXPECTATIONS)
    pytester.makepyfile(test_inner=INNER, conftest=CONFTEST)
    return pytester


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "--expectations", "exp.txt",
                                         "--results-jsonl", "out.jsonl", *args)


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_stream_categories_and_exit_status(inner: pytest.Pytester, xdist: list[str]) -> None:
    result = _run(inner, *xdist)
    events = _events(inner.path / "out.jsonl")
    assert events[0]["type"] == "session_start" and events[-1]["type"] == "session_finish"
    start, finish, res = events[0], events[-1], _results(events)
    assert start["schema"] == 1 and start["device"]["arch"] == "cpu"
    assert start["expectations"] == "exp.txt" and "--results-jsonl" in start["args"]
    cat = {k: (v["outcome"], v["expectation"]["category"]) for k, v in res.items()}
    assert cat == {
        "test_measured": ("passed", "expected_pass"),
        "test_unmeasured_selection_is_not_captured": ("passed", "expected_pass"),
        "test_known[a-b]": ("failed", "expected_fail"),
        "test_stale": ("passed", "unexpected_pass"),
        "test_skipped": ("skipped", "skipped"),
        "test_emulated_only": ("passed", "expected_pass"),  # its line is for emulated only
        "test_setup_error": ("error", "unexpected_fail"),  # a broken fixture is never expected
        "test_unexpected": ("failed", "unexpected_fail"),
        "test_hangs": ("timeout", "unexpected_fail"),  # a hang is never the known failure
        "test_device_seen_in_process": ("passed", "expected_pass"),
    }
    assert finish["counts"] == {"expected_pass": 4, "expected_fail": 1, "unexpected_fail": 3,
                                "unexpected_pass": 1, "skipped": 1}
    assert finish["exitstatus"] == 1 and result.ret == 1

    m = res["test_measured"]
    assert m["measurements"] == [
        {"name": "deviation", "value": 0.0078125, "unit": "abs", "bound": 0.001},
        {"name": "ulps", "value": None, "unit": None, "bound": None},
        {"name": "headroom", "value": None, "unit": None, "bound": None},
    ]
    assert [s["variant"] for s in m["selections"]] == ["scalar_kmajor", "stock"]
    assert m["selections"] == [
        {"op": "gate_up", "dtype": "bfloat16", "M": 8, "K": 5120, "N": 17408,
         "variant": "scalar_kmajor", "reason": "tuned", "impl": "metal-emulated",
         "role": "under_test"},
        # A dispatcher that does not name the implementation: null, read as unknown.
        {"op": "down", "dtype": "bfloat16", "M": 8, "K": 17408, "N": 5120, "variant": "stock",
         "reason": "fallback:shape", "impl": None, "role": "under_test"}]
    expected = mx.arange(32, dtype=mx.bfloat16).reshape(4, 8) / 7
    assert m["fingerprints"] == [{"key": "scalar_kmajor/4x8/bfloat16",
                                  "digest": float32_digest(expected), "shape": [4, 8],
                                  "dtype": "bfloat16"}]
    assert res["test_unmeasured_selection_is_not_captured"]["selections"] == []

    known = res["test_known[a-b]"]
    assert known["test_id"].endswith("::test_known") and known["params"] == "a-b"
    assert known["expectation"] == {"expected": "fail", "link": "bug/1",
                                    "reason": "known wrong answer", "category": "expected_fail"}
    assert "deviation 0.0078125 above bound 0.001" in known["message"]
    assert res["test_skipped"]["message"].endswith("bug/3 never run this")
    assert "fixture broke" in res["test_setup_error"]["message"]
    assert res["test_hangs"]["message"].startswith("Failed: Timeout (>0.5s)")
    assert all(e["duration"] >= 0 for e in res.values())

    # user_properties keep the raw figures (NaN included) for any reporter; only JSONL nulls.
    props = [json.loads(line) for line in
             (inner.path / "user_properties.jsonl").read_text().splitlines()]
    measured = next(p for nodeid, p in props if nodeid.endswith("::test_measured"))
    assert measured[0][0] == "dflash2"
    assert measured[0][1]["measurements"][0]["value"] == 0.0078125
    assert math.isnan(measured[0][1]["measurements"][1]["value"])
    assert [(s["variant"], s["impl"]) for s in measured[0][1]["selections"]] == [
        ("scalar_kmajor", "metal-emulated"), ("stock", None)]


def test_expected_failure_alone_is_not_a_red_run(inner: pytest.Pytester) -> None:
    result = _run(inner, "-k", "test_known or test_stale or test_skipped", "-n", "2")
    assert result.ret == 0
    result.assert_outcomes(xfailed=1, xpassed=1, skipped=1)  # pytest's own view: not red
    result.stdout.fnmatch_lines([
        "*dflash2 expectations on cpu (exp.txt)*",
        "expected_pass: 0",
        "expected_fail: 1",
        "*test_inner.py::test_known?a-b? (bug/1, exp.txt:4)",
        "unexpected_fail: 0",
        "unexpected_pass: 1 (stale expectations*",
        "*test_inner.py::test_stale (bug/2, exp.txt:6)",
        "skipped: 1",
    ])
    events = _events(inner.path / "out.jsonl")
    assert events[-1]["exitstatus"] == 0


def test_device_arch_emulates_in_session_start_and_in_process(inner: pytest.Pytester,
                                                             monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    monkeypatch.setenv("EXPECT_ARCH", "applegpu_g13s")
    monkeypatch.delenv("DFLASH2_DEVICE_ARCH", raising=False)
    result = _run(inner, "--device-arch", "applegpu_g13s",
                  "-k", "emulated_only or device_seen")
    assert result.ret == 0
    events = _events(inner.path / "out.jsonl")
    device = events[0]["device"]
    assert device["arch"] == "applegpu_g13s" and device["emulated"] is True
    assert device["generation"] == 13
    cats = {k: v["expectation"]["category"] for k, v in _results(events).items()}
    assert cats == {"test_emulated_only": "expected_fail",
                    "test_device_seen_in_process": "expected_pass"}
    result.stdout.fnmatch_lines(["*dflash2 expectations on applegpu_g13s (emulated)*"])


def test_environment_variable_emulates_too(inner: pytest.Pytester,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DFLASH2_DEVICE_ARCH", "applegpu_g14g")
    monkeypatch.setenv("EXPECT_ARCH", "applegpu_g14g")
    result = _run(inner, "-k", "device_seen")
    assert result.ret == 0
    assert _events(inner.path / "out.jsonl")[0]["device"]["arch"] == "applegpu_g14g"


def test_bad_arch_is_a_one_line_usage_error(inner: pytest.Pytester) -> None:
    result = _run(inner, "--device-arch", "applegpu_g99x")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.stderr.lines if line.strip()]
    assert len(errors) == 1, errors
    assert errors[0].startswith("ERROR: bad device architecture 'applegpu_g99x'")
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


def test_malformed_expectations_is_a_usage_error_naming_the_line(inner: pytest.Pytester) -> None:
    inner.makefile(".txt", exp="# tags: [ cpu ]\nbug/1 [ cpu ] test_inner.py::test_stale\n")
    result = _run(inner)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: exp.txt:2: missing results block*"])


def test_stream_is_written_as_each_test_finishes(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_inc="""
        import json
        from pathlib import Path

        def test_first(measure):
            measure.record("x", 1.0)

        def test_second():
            lines = Path("out.jsonl").read_text().splitlines()
            events = [json.loads(line) for line in lines]
            assert [e["type"] for e in events] == ["session_start", "result"]
            assert events[1]["nodeid"].endswith("::test_first")
    """)
    pytester.makefile(".txt", exp="")
    result = _run(pytester)
    result.assert_outcomes(passed=2)


def test_worker_crash_under_xdist_is_a_crashed_result(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_c="""
        import os

        def test_crash():
            os._exit(3)

        def test_after():
            pass
    """)
    pytester.makefile(".txt", exp="bug/1 test_c.py::test_crash [ Failure ]\n")
    result = _run(pytester, "-n", "2")
    assert result.ret == 1
    res = _results(_events(pytester.path / "out.jsonl"))
    assert res["test_crash"]["outcome"] == "crashed"
    assert res["test_crash"]["expectation"]["category"] == "unexpected_fail"
    assert "crashed while running" in res["test_crash"]["message"]
    assert res["test_after"]["outcome"] == "passed"


def test_interrupted_test_is_still_reported(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_i="def test_interrupt():\n    raise KeyboardInterrupt\n")
    pytester.makefile(".txt", exp="")
    _run(pytester)
    events = _events(pytester.path / "out.jsonl")
    assert [e["type"] for e in events] == ["session_start", "result", "session_finish"]
    assert events[1]["outcome"] == "error"
    assert events[1]["message"] == "interrupted: no report after the setup phase"
    assert events[2]["exitstatus"] == int(pytest.ExitCode.INTERRUPTED)


def test_hook_receives_events_without_jsonl(pytester: pytest.Pytester) -> None:
    pytester.makeconftest("""
        import json

        def pytest_farm_event(config, event):
            with open("events.jsonl", "a") as fh:
                fh.write(json.dumps(event["type"]) + "\\n")
    """)
    pytester.makepyfile(test_h="def test_ok():\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == 0
    types = [json.loads(x) for x in (pytester.path / "events.jsonl").read_text().splitlines()]
    assert types == ["session_start", "result", "session_finish"]
    # Not asked and no suite test ran: the plugin prints nothing of its own.
    assert "dflash2 expectations" not in result.stdout.str()


def test_fingerprint_is_sha256_of_float32_bytes() -> None:
    a = np.linspace(-1, 1, 24, dtype=np.float64).reshape(2, 3, 4)
    want = hashlib.sha256(a.astype(np.float32).tobytes()).hexdigest()
    assert float32_digest(a) == want
    assert float32_digest(a.T.copy().T) == want  # layout does not matter: C order is hashed
    assert float32_digest(mx.array(a.astype(np.float32))) == want
    b16 = mx.array(a.astype(np.float32)).astype(mx.bfloat16)
    assert float32_digest(b16) == float32_digest(b16) == hashlib.sha256(
        np.asarray(b16.astype(mx.float32)).tobytes()).hexdigest()
    assert float32_digest(b16) != want  # bf16 rounding changes the bytes
    assert float32_digest(a + 1e-3) != want


@pytest.mark.parametrize(("nodeid", "test_id", "params"), [
    ("a.py::t[x-y]", "a.py::t", "x-y"),
    ("a.py::C::t[a[1]]", "a.py::C::t", "a[1]"),
    ("a.py::t", "a.py::t", ""),
    ("d[1]/a.py::t", "d[1]/a.py::t", ""),
])
def test_split_nodeid(nodeid: str, test_id: str, params: str) -> None:
    assert split_nodeid(nodeid) == (test_id, params)


def test_selection_names_its_implementation() -> None:
    """The five implementation names are defined once; a misspelt one fails at dispatch."""
    assert IMPLEMENTATIONS == ("metal", "metal-emulated", "portable", "cuda", "stock-native")
    for impl in IMPLEMENTATIONS:
        sel = Selection("out", "float16", 8, 4096, 4096, "narrow_output", "tuned", impl=impl)
        assert sel.to_json()["impl"] == impl
    assert Selection("out", "float16", 8, 4096, 4096, "stock", "fallback:shape"
                     ).to_json()["impl"] is None
    with pytest.raises(ValueError, match="'gpu' is not one of metal, metal-emulated"):
        Selection("out", "float16", 8, 4096, 4096, "stock", "fallback:shape", impl="gpu")
