"""JUnit XML for CI dashboards: the one writer behind `farm export --format junit`,
`farm run --junit` and `pytest --farm-junit`, built on junitparser.

Each device is a ``<testsuite>``, so a dashboard shows the device x test split `farm show` does.
Device facts are that suite's ``<properties>`` as plain strings (JSON for structured values,
nothing for an unknown one: a Python repr such as ``None`` would be read as data). Jenkins' schema
has no ``<properties>`` inside ``<testcase>``, so a test's expectation, measurements and kernel
selections are lines of its ``<system-out>``.

Results map the way the farm judges them, so a dashboard and the farm's exit code agree: an
expected failure is a passing case (its system-out names the tracking link); an unexpected
failure is a ``<failure>``, a stale expectation (an unexpected pass) too; a crash, a timeout or a
setup error is an ``<error>``; a skip is a ``<skipped>`` whose reason is its text (Jenkins types
``skipped`` as text only, without attributes). tests/data/junit-jenkins.xsd is the schema the
output is held to (tests/test_junit.py).
"""

from __future__ import annotations

import io
import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from db.events import category_of

FAILED_CATEGORIES = ("unexpected_fail", "unexpected_pass", "crashed")
# Device facts, in the order a reader looks for them; absent or null ones are left out.
DEVICE_PROPERTIES = ("arch", "emulated", "chip", "generation", "size", "backend", "host", "os",
                     "mlx_version", "variant_key")
# XML 1.0 refuses these characters even as references: a test's output may hold them (ANSI
# colour escapes, a NUL from a crashed kernel), so they are written as \xNN text instead.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def xml_text(value: Any) -> str:
    """A property value or text node: strings as given, booleans as true/false, numbers as
    written, lists and objects as JSON; never a Python repr."""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, str):
        text = value
    elif isinstance(value, (int, float)):
        text = repr(value)
    else:
        text = json.dumps(value, sort_keys=True, default=str)
    return _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


@dataclass
class Case:
    """One test result on one device, from the stream or from the history."""

    nodeid: str
    outcome: str
    category: str
    duration: float | None = None
    message: str = ""
    output: str = ""  # the whole failure text, when it was recorded
    expected: str | None = None
    link: str | None = None
    reason: str | None = None
    measurements: list[dict] = field(default_factory=list)
    selections: list[dict] = field(default_factory=list)

    @classmethod
    def from_event(cls, ev: dict) -> Case:
        """A results-stream ``result`` event (docs/RESULTS_FORMAT.md)."""
        exp = ev.get("expectation") if isinstance(ev.get("expectation"), dict) else {}
        outcome = str(ev.get("outcome") or "")
        return cls(str(ev.get("nodeid") or ""), outcome, category_of(outcome, exp),
                   ev.get("duration"), ev.get("message") or "", ev.get("output") or "",
                   exp.get("expected"), exp.get("link"), exp.get("reason"),
                   list(ev.get("measurements") or []), list(ev.get("selections") or []))

    @classmethod
    def from_row(cls, row: dict) -> Case:
        """A `db.queries.run_results` row."""
        return cls(row["nodeid"], row["outcome"], row["category"], row.get("duration"),
                   row.get("message") or "", row.get("output") or "", row.get("expected"),
                   row.get("link"), row.get("reason"), list(row.get("measurements") or []),
                   list(row.get("selections") or []))

    def notes(self) -> str:
        """The system-out lines: expectation, measurements, kernel selections."""
        lines = []
        if self.expected and self.expected != "pass" or self.link:
            because = ": ".join(filter(None, (self.link, self.reason)))
            lines.append(f"expectation: {self.expected or 'pass'} -> {self.category}"
                         + (f" ({because})" if because else ""))
        for x in self.measurements:
            value = "non-finite" if x.get("value") is None else xml_text(x["value"])
            lines.append(f"measurement {x.get('name')} = {value}"
                         + (f" {x['unit']}" if x.get("unit") else "")
                         + (f" (bound {xml_text(x['bound'])})"
                            if x.get("bound") is not None else ""))
        for s in self.selections:
            lines.append(f"kernel {s.get('op')} {s.get('dtype')} M={s.get('M')} K={s.get('K')} "
                         f"N={s.get('N')}: {s.get('variant')} ({s.get('reason') or '-'}, "
                         f"{s.get('impl') or 'unknown'})")
        return "\n".join(lines)


@dataclass
class Suite:
    """One device's results: a ``<testsuite>``."""

    name: str
    cases: list[Case]
    hostname: str = ""
    started: float | None = None
    properties: dict[str, Any] = field(default_factory=dict)
    system_err: str = ""  # what went wrong with the job itself (lost device, timeout)


def device_properties(device: dict, **extra: Any) -> dict[str, Any]:
    """Suite properties: the device facts it has, then ``extra`` (run id, suite, job status)."""
    props = {k: device[k] for k in DEVICE_PROPERTIES if device.get(k) is not None}
    props.update({k: v for k, v in extra.items() if v is not None})
    return props


def to_xml(suites: list[Suite], name: str) -> str:
    """The whole document, pretty-printed, with its XML declaration."""
    from junitparser import JUnitXml

    doc = JUnitXml(xml_text(name))
    for s in suites:
        doc.append(_suite(s))  # append, not add_testsuite: that merges look-alike suites
    doc.update_statistics()
    doc._elem.attrib.pop("skipped", None)  # Jenkins declares no `skipped` on <testsuites>
    buf = io.BytesIO()
    doc.write(buf, pretty=True)
    return buf.getvalue().decode("utf-8")


def write(path: Path, suites: list[Suite], name: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(to_xml(suites, name), encoding="utf-8")


def _suite(s: Suite):
    from junitparser import SystemErr, TestSuite

    suite = TestSuite(xml_text(s.name))
    if s.hostname:
        suite.hostname = xml_text(s.hostname)
    if s.started is not None:
        suite.timestamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(s.started))
    for k, v in s.properties.items():  # properties first: the schema orders the children
        suite.add_property(xml_text(k), xml_text(v))
    for c in s.cases:
        suite.append(_case(c))
    if s.system_err:
        suite.append(SystemErr(xml_text(s.system_err)))
    return suite


def _case(c: Case):
    from junitparser import Error, Failure, Skipped, TestCase

    path, sep, name = c.nodeid.partition("::")
    case = TestCase(xml_text(name if sep else c.nodeid),
                    xml_text(path.removesuffix(".py").replace("/", ".")))
    case._elem.set("time", f"{max(c.duration or 0.0, 0.0):.3f}")  # a decimal, never 1e-05
    text = xml_text(c.output or c.message)
    first = xml_text((c.message or c.output).strip().split("\n", 1)[0][:500])
    if c.category == "skipped":
        result = Skipped()
        result.text = xml_text(c.message) or None
        case.result = [result]
    elif c.category in FAILED_CATEGORIES:
        if c.category == "crashed" or c.outcome == "error":
            result = Error(first or c.outcome, c.outcome or "error")
        elif c.category == "unexpected_pass":
            result = Failure(f"passed, but expected to {c.expected or 'fail'}"
                             + (f" ({c.link})" if c.link else "")
                             + ": a stale expectation", "unexpected_pass")
        else:
            result = Failure(first or c.outcome, c.outcome or "failed")
        result.text = text or None
        case.result = [result]
    notes = c.notes()
    if c.category == "expected_fail" and (c.output or c.message):
        notes = "\n".join(filter(None, (notes, "expected failure:", c.output or c.message)))
    if notes:
        case.system_out = xml_text(notes)
    return case
