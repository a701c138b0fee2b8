"""pytest plugin: the ``measure`` fixture, per-device expectations and the JSONL results stream.

Loaded in every pytest run through the ``pytest11`` entry point, so it stays inert unless asked:
it detects the device once (``current_device``, cheap), reads the small expectations file, and
prints its summary only when a suite test ran or one of its options was given.

Results are assembled where pytest's reports end up: in the main process, which under
pytest-xdist is the controller (workers only run tests and ship reports with their
``user_properties``). The farm tails ``--results-jsonl`` while pytest runs, so every event is
written and flushed as it happens. docs/CONTRACTS.md and docs/RESULTS_FORMAT.md give the format.
"""

from __future__ import annotations

import json
import math
import os
import platform
import socket
import time
from collections.abc import Generator
from pathlib import Path
from typing import IO, Any

import pytest

from devices.errors import Dflash2Error
from devices.identity import ENV_ARCH, DeviceIdentity, current_device
from dflash2.runtime_context import run_context
from suites.expectations import (
    CATEGORIES,
    Expectations,
    Verdict,
    classify,
    device_tags,
    load_expectations,
)

# ``measure`` is imported to be the plugin's fixture: pytest finds fixtures in a plugin's namespace
from suites.measure import MEASURE_KEY, PROPERTY, measure  # noqa: F401
from suites.outcome import (
    failure_message,
    failure_output,
    is_timeout,
    outcome_of,
    split_nodeid,
    unfinished_message,
)
from suites.session import suite_name

SCHEMA = 1
SUITES_DIR = Path(__file__).resolve().parent
DEFAULT_EXPECTATIONS = SUITES_DIR / "expectations.txt"
FAILING_OUTCOMES = ("failed", "error", "timeout", "crashed")  # those a result carries output for
SUMMARY_LIST = 10  # node ids listed per category in the terminal summary

_SESSION = pytest.StashKey["FarmSession"]()


class FarmHookspecs:
    """Hook specifications this plugin adds (registered by ``pytest_addhooks``)."""

    @pytest.hookspec
    def pytest_farm_event(self, config: pytest.Config, event: dict[str, Any]) -> None:
        """Called with each results-stream object (session_start, result, session_finish).

        Called in the main process only (the xdist controller), whether or not
        ``--results-jsonl`` is given. ``event`` is JSON-ready (no NaN) and shared by every
        implementation: do not mutate it.
        """


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(FarmHookspecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("dflash2", "dflash2 farm suites")
    group.addoption("--device-arch", metavar="ARCH", default=None,
                    help=f"emulate this device architecture, e.g. applegpu_g13s "
                         f"(default: ${ENV_ARCH}, else the real device)")
    group.addoption("--results-jsonl", metavar="PATH", default=None,
                    help="write the results stream (one JSON object per line, flushed per event)")
    group.addoption("--expectations", metavar="PATH", default=None,
                    help=f"per-device test expectations file (default: {DEFAULT_EXPECTATIONS})")
    group.addoption("--farm-suite", metavar="NAME", default=None,
                    help="suite name recorded in the results stream's session_start")


def pytest_configure(config: pytest.Config) -> None:
    session = FarmSession.from_config(config)
    config.stash[_SESSION] = session
    config.pluginmanager.register(session, "dflash2-farm-session")
    jsonl = config.getoption("results_jsonl")
    if jsonl and not session.is_worker:
        config.pluginmanager.register(JsonlWriter.open(Path(jsonl)), "dflash2-results-jsonl")


def pytest_unconfigure(config: pytest.Config) -> None:
    session = config.stash.get(_SESSION, None)
    if session is not None:
        session.restore_env()


# ---------------------------------------------------------------------------------------------
# The results stream


class JsonlWriter:
    """One ``pytest_farm_event`` implementation: the ``--results-jsonl`` file, line-buffered."""

    def __init__(self, fh: IO[str]) -> None:
        self._fh = fh

    @classmethod
    def open(cls, path: Path) -> JsonlWriter:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            return cls(path.open("w", encoding="utf-8", buffering=1))
        except OSError as e:
            raise pytest.UsageError(
                f"cannot write --results-jsonl {path}: {e.strerror or e}") from None

    def pytest_farm_event(self, config: pytest.Config, event: dict[str, Any]) -> None:
        self._fh.write(json.dumps(event, allow_nan=False) + "\n")
        self._fh.flush()

    @pytest.hookimpl(trylast=True)
    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self._fh.close()


class FarmSession:
    """Device, expectations and the per-test assembly of result events for one pytest config."""

    def __init__(self, config: pytest.Config, device: DeviceIdentity, expectations: Expectations,
                 expectations_label: str, saved_env: str | None) -> None:
        self.config = config
        self.device = device
        self.tags = device_tags(device)
        self.expectations = expectations
        self.expectations_label = expectations_label
        self.is_worker = hasattr(config, "workerinput")
        self._saved_env = saved_env
        self._asked = any(config.getoption(o) is not None for o in
                          ("device_arch", "results_jsonl", "expectations", "farm_suite"))
        self._pending: dict[str, list[pytest.TestReport]] = {}
        self._verdicts: dict[str, Verdict | None] = {}
        self.counts = dict.fromkeys(CATEGORIES, 0)
        self.listed: dict[str, list[str]] = {c: [] for c in CATEGORIES}
        self._relevant = False  # a suite test ran or an expectation matched: print a summary

    @classmethod
    def from_config(cls, config: pytest.Config) -> FarmSession:
        arch = config.getoption("device_arch")
        saved = os.environ.get(ENV_ARCH)
        if arch is not None:
            os.environ[ENV_ARCH] = arch  # so dflash2.current_device() in tests sees it too
        try:
            device = current_device()
            path = Path(config.getoption("expectations") or DEFAULT_EXPECTATIONS)
            expectations = load_expectations(path)
        except Dflash2Error as e:
            _restore(saved)
            raise pytest.UsageError(str(e)) from None
        return cls(config, device, expectations, _label(path, config.rootpath), saved)

    def restore_env(self) -> None:
        if self.config.getoption("device_arch") is not None:
            _restore(self._saved_env)

    def emit(self, event: dict[str, Any]) -> None:
        self.config.hook.pytest_farm_event(config=self.config, event=event)

    def verdict(self, nodeid: str) -> Verdict | None:
        """The expectation for a node id on this session's device (cached per node id)."""
        if nodeid not in self._verdicts:
            self._verdicts[nodeid] = self.expectations.lookup(nodeid, self.tags)
        return self._verdicts[nodeid]

    # -- hooks ------------------------------------------------------------------------------

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        if self.is_worker:
            return
        self.emit({
            "type": "session_start", "schema": SCHEMA, "time": time.time(),
            "device": self.device.to_json(), "host": socket.gethostname(),
            "os": f"{platform.system()} {platform.release()}",
            "suite": suite_name(self.config),
            "args": [str(a) for a in self.config.invocation_params.args],
            "expectations": self.expectations_label,
            # What changes dispatch (DFLASH2_* variables, table hash, MLX): the history names a
            # kernel-selection regression's cause from it.
            "context": run_context(),
        })

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        """A Skip expectation becomes a skip marker: the test is skipped at setup, with reason."""
        for item in items:
            verdict = self.verdict(item.nodeid)
            if verdict is not None and "Skip" in verdict.results:
                reason = f"expectation Skip ({verdict.where}): {_because(verdict)}"
                item.add_marker(pytest.mark.skip(reason=reason))

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_makereport(self, item: pytest.Item,
                                  call: pytest.CallInfo[None]
                                  ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        m = item.stash.get(MEASURE_KEY, None)
        if m is not None:
            m.sync()
        rep: pytest.TestReport = yield
        if call.excinfo is not None and is_timeout(call.excinfo.value):
            rep.dflash2_outcome = "timeout"  # a hung test is never the known wrong answer
            return rep
        if rep.when != "call" or hasattr(rep, "wasxfail"):
            return rep
        verdict = self.verdict(item.nodeid)
        if verdict is None:
            return rep
        category = classify(rep.outcome, verdict)
        if category == "expected_fail":
            # Not a red run: report it the way pytest reports an xfail, keep the truth apart.
            rep.outcome = "skipped"
            rep.wasxfail = f"expected Failure ({verdict.where}): {_because(verdict)}"
            rep.dflash2_outcome = "failed"
        elif category == "unexpected_pass":
            rep.wasxfail = f"stale expectation ({verdict.where}): {_because(verdict)}"
            rep.dflash2_outcome = "passed"
        return rep

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if self.is_worker:
            return
        phases = self._pending.setdefault(report.nodeid, [])
        phases.append(report)
        if report.when in ("teardown", "???"):  # "???": xdist's report for a crashed worker
            del self._pending[report.nodeid]
            self._result(report.nodeid, phases)

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.is_worker:
            return
        for nodeid, phases in list(self._pending.items()):  # interrupted before teardown
            self._result(nodeid, phases)
        self._pending.clear()
        self.emit({"type": "session_finish", "time": time.time(),
                   "exitstatus": int(exitstatus), "counts": dict(self.counts)})

    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int,
                                config: pytest.Config) -> None:
        if self.is_worker or not (self._asked or self._relevant):
            return
        tr = terminalreporter
        tr.write_sep("=", f"dflash2 expectations on {self.device.label} "
                          f"({self.expectations_label})")
        for category in CATEGORIES:
            n = self.counts[category]
            line = f"{category}: {n}"
            if category == "unexpected_pass" and n:
                line += " (stale expectations: the test passes now, update the file)"
            markup = {"red": True} if category == "unexpected_fail" and n else {}
            if category == "unexpected_pass" and n:
                markup = {"yellow": True}
            tr.write_line(line, **markup)
            if category != "skipped" and category != "expected_pass":
                for entry in self.listed[category][:SUMMARY_LIST]:
                    tr.write_line(f"    {entry}")
                if n > SUMMARY_LIST:
                    tr.write_line(f"    ... and {n - SUMMARY_LIST} more")

    # -- assembling one result ----------------------------------------------------------------

    def _result(self, nodeid: str, phases: list[pytest.TestReport]) -> None:
        outcome, decisive, native_xfail = outcome_of(phases)
        verdict = self.verdict(nodeid)
        if native_xfail is not None:  # pytest's own xfail marker: expected to fail
            category = "expected_fail" if outcome == "failed" else "unexpected_pass"
            expectation = {"expected": "fail", "link": None, "reason": native_xfail}
        else:
            category = classify(outcome, verdict)
            expectation = {
                "expected": verdict.expected if verdict else "pass",
                "link": verdict.link if verdict else None,
                "reason": verdict.reason if verdict else None,
            }
        expectation["category"] = category
        if verdict is not None or _in_suites(self.config.rootpath, phases[-1]):
            self._relevant = True
        self.counts[category] += 1
        where = f" ({verdict.link}, {verdict.where})" if verdict else ""
        self.listed[category].append(nodeid + where)
        test_id, params = split_nodeid(nodeid)
        payload = _payload(phases[-1])
        event = {
            "type": "result", "nodeid": nodeid, "test_id": test_id, "params": params,
            "outcome": outcome, "duration": sum(r.duration for r in phases),
            "message": failure_message(decisive, outcome) or unfinished_message(phases, outcome),
            "expectation": expectation,
            "measurements": [_json_measurement(m) for m in payload.get("measurements", [])],
            "selections": list(payload.get("selections", [])),
            "fingerprints": list(payload.get("fingerprints", [])),
            "time": time.time(),
        }
        if outcome in FAILING_OUTCOMES:
            event["output"] = failure_output(decisive) or event["message"]
        self.emit(event)


def _payload(report: pytest.TestReport) -> dict[str, Any]:
    for entry in report.user_properties:
        if len(entry) == 2 and entry[0] == PROPERTY and isinstance(entry[1], dict):
            return entry[1]
    return {}


def _json_measurement(m: dict[str, Any]) -> dict[str, Any]:
    return {**m, "value": _finite(m.get("value")), "bound": _finite(m.get("bound"))}


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def _because(verdict: Verdict) -> str:
    return " ".join(filter(None, (verdict.link, verdict.reason)))


def _in_suites(rootpath: Path, report: pytest.TestReport) -> bool:
    return (rootpath / report.location[0]).resolve().is_relative_to(SUITES_DIR)


def _label(path: Path, rootpath: Path) -> str:
    """The expectations path as recorded: relative to the rootdir when inside it."""
    resolved, root = path.resolve(), rootpath.resolve()
    return str(resolved.relative_to(root)) if resolved.is_relative_to(root) else str(resolved)


def _restore(saved: str | None) -> None:
    if saved is None:
        os.environ.pop(ENV_ARCH, None)
    else:
        os.environ[ENV_ARCH] = saved
