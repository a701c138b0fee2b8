"""One test's outcome from its phase reports, and the text a failure keeps.

pytest reports setup, call and teardown apart, and xfail, pytest-timeout and an interrupted
session each leave their own trace in them; the results stream wants one outcome per test.
"""

from __future__ import annotations

import pytest

MESSAGE_LINES = 5
MESSAGE_CHARS = 500
OUTPUT_CHARS = 200_000  # a failure's whole text, cut in the middle past this


def split_nodeid(nodeid: str) -> tuple[str, str]:
    """(test id, params): ``a.py::t[x-y]`` -> (``a.py::t``, ``x-y``); no params -> ``""``."""
    head, sep, tail = nodeid.rpartition("::")
    if tail.endswith("]") and "[" in tail:
        i = tail.index("[")
        return head + sep + tail[:i], tail[i + 1:-1]
    return nodeid, ""


def outcome_of(phases: list[pytest.TestReport]) -> tuple[str, pytest.TestReport, str | None]:
    """(outcome of the test as a whole, the report that decided it, pytest-xfail reason)."""
    by_when = {r.when: r for r in phases}
    if "???" in by_when:
        return "crashed", by_when["???"], None
    for rep in phases:
        if getattr(rep, "dflash2_outcome", None) == "timeout":
            return "timeout", rep, None
    setup, call, teardown = by_when.get("setup"), by_when.get("call"), by_when.get("teardown")
    for rep in (setup, call):
        if rep is not None and hasattr(rep, "wasxfail") and not hasattr(rep, "dflash2_outcome"):
            return ("failed" if rep.skipped else "passed"), rep, str(rep.wasxfail)
    if setup is not None and setup.failed:
        return "error", setup, None
    if setup is not None and setup.skipped:
        return "skipped", setup, None
    if call is not None:
        outcome = getattr(call, "dflash2_outcome", call.outcome)
        if outcome != "passed" or teardown is None or not teardown.failed:
            return outcome, call, None
    if teardown is not None and teardown.failed:
        return "error", teardown, None
    if call is None:
        return "error", phases[-1], None  # interrupted before the call phase finished
    return call.outcome, call, None


def is_timeout(exc: BaseException) -> bool:
    """pytest-timeout's signal method fails the test with this message (PYTEST_FAILURE_MESSAGE)."""
    text = str(exc)
    return (isinstance(exc, pytest.fail.Exception) and text.startswith("Timeout (>")
            and text.endswith("from pytest-timeout."))


def failure_message(report: pytest.TestReport, outcome: str) -> str:
    """Short text for a failure (the crash message) or a skip (its reason); "" for a pass."""
    if outcome == "passed":
        return ""
    longrepr = report.longrepr
    if isinstance(longrepr, tuple | list) and len(longrepr) == 3:  # a skip: (path, line, reason)
        text = str(longrepr[2]).removeprefix("Skipped: ")
    else:
        crash = getattr(longrepr, "reprcrash", None)
        text = crash.message if crash is not None else str(longrepr or "")
    lines = text.strip().splitlines()[:MESSAGE_LINES]
    text = "\n".join(lines)
    return text if len(text) <= MESSAGE_CHARS else text[: MESSAGE_CHARS - 3] + "..."


def failure_output(report: pytest.TestReport) -> str:
    """The whole text of a failure, for `farm logs`: pytest's full report (traceback, assertion
    introspection) and every captured section (stdout, stderr, log), as pytest prints them.
    ``message`` keeps only the crash line, which is rarely enough to debug a device's failure."""
    parts = [report.longreprtext.rstrip()] if report.longreprtext.strip() else []
    for title, content in report.sections:
        if content.strip():
            parts.append(f"{f' {title} ':-^78}\n{content.rstrip()}")
    text = "\n".join(parts)
    if len(text) <= OUTPUT_CHARS:
        return text
    cut = len(text) - OUTPUT_CHARS
    return text[: OUTPUT_CHARS // 2] + f"\n... ({cut} characters cut) ...\n" + text[-OUTPUT_CHARS // 2:]


def unfinished_message(phases: list[pytest.TestReport], outcome: str) -> str:
    """The message of a test that ended without a teardown report (pytest was interrupted)."""
    if outcome in ("passed", "skipped") or phases[-1].when in ("teardown", "???"):
        return ""
    return f"interrupted: no report after the {phases[-1].when} phase"
