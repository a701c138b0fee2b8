"""The expectations grammar: good files parse, each malformed line names file:line and the fault,
and matching/classification give the categories the farm and the summary rely on."""

from __future__ import annotations

from pathlib import Path

import pytest

from devices.errors import Dflash2Error
from devices.identity import DeviceIdentity
from suites.expectations import (
    ExpectationsError,
    classify,
    device_tags,
    load_expectations,
    parse_expectations,
)

HEADER = """\
# tags: [ applegpu_g13s applegpu_g14g cpu sm_90 ]
# tags: [ g13 g14 ]
# tags: [ emulated real ]
# tags: [ metal cuda ]
"""

G13S_REAL = frozenset({"applegpu_g13s", "g13", "real", "metal"})
G13S_EMU = frozenset({"applegpu_g13s", "g13", "emulated"})
CPU = frozenset({"cpu", "real"})


def _dev(arch: str, gen: int | None, backend: str, emulated: bool) -> DeviceIdentity:
    size = arch[-1] if gen else None
    return DeviceIdentity(arch, gen, size, "chip", backend, "0.32.4", emulated)


def test_good_file_parses_entries_tags_and_reasons() -> None:
    text = HEADER + """
# The M=16 gate/up bound: one bf16 ulp.
# Second line of the reason.
issues/3 [ applegpu_g13s real ] suites/t.py::test_bound[m16-gate_up-bfloat16] [ Failure ]

crbug.com/7 suites/t.py::test_slow* [ Slow Flaky ]  # trailing reason
farm#9 [ G14 ] suites/*::test_x [ Skip ]
"""
    exp = parse_expectations(text, "x.txt")
    assert [e.lineno for e in exp.entries] == [8, 10, 11]
    first, second, third = exp.entries
    assert first.link == "issues/3"
    assert first.tags == {"applegpu_g13s", "real"}
    assert first.glob == "suites/t.py::test_bound[m16-gate_up-bfloat16]"
    assert first.results == {"Failure"}
    assert first.reason == "The M=16 gate/up bound: one bf16 ulp. Second line of the reason."
    assert second.tags == frozenset() and second.results == {"Slow", "Flaky"}
    assert second.reason == "trailing reason"
    assert third.link == "farm#9" and third.tags == {"g14"}  # '#' inside a token is no comment
    assert third.reason == ""  # a blank line separates it from any comment above
    assert len(exp.tag_sets) == 4 and "sm_90" in exp.tags


def test_tag_header_may_span_comment_lines() -> None:
    exp = parse_expectations("# tags: [ applegpu_g13s\n#         cpu ]\n"
                             "b/1 [ cpu ] a.py::t [ Failure ]\n", "m.txt")
    assert exp.tag_sets == (frozenset({"applegpu_g13s", "cpu"}),)
    assert exp.entries[0].tags == {"cpu"}


def test_shipped_file_parses_and_seeds_the_two_g13s_failures() -> None:
    exp = load_expectations(Path(__file__).parents[1] / "suites" / "expectations.txt")
    bound = exp.lookup("suites/test_numeric_bounds.py::test_bound[m16-gate_up-bfloat16]",
                       G13S_REAL)
    tail = exp.lookup("suites/test_greedy_e2e.py::test_greedy_exact[b13-partial-tail-off]",
                      G13S_REAL)
    assert bound is not None and bound.expected == "fail" and "0.0078125" in bound.reason
    assert tail is not None and tail.expected == "fail" and "verifier" in tail.reason
    assert exp.lookup("suites/test_numeric_bounds.py::test_bound[m16-gate_up-bfloat16]",
                      frozenset({"applegpu_g14g", "g14", "real", "metal"})) is None


@pytest.mark.parametrize(("body", "problem"), [
    ("b/1 [ cpu ] a.py::t", "missing results block"),
    ("b/1 a.py::t", "missing results block"),
    ("b/1 [ cpu ] a.py::t [ Failed ]", "unknown result 'Failed'"),
    ("b/1 [ g15 ] a.py::t [ Failure ]", "unknown tag 'g15'"),
    ("b/1 [ cpu a.py::t [ Failure ]", "unbalanced brackets in the tags block"),
    ("b/1 [ cpu ] a.py::t [ Failure", "unbalanced brackets in the results block"),
    ("b/1 [ cpu ] [ Failure ]", "empty test-id glob"),
    ("b/1 [ cpu ]", "empty test-id glob"),
    ("b/1 a.py::t [Failure]", "brackets with spaces"),
    ("b/1 a.py::t more [ Failure ]", "expected a results block after the glob, got 'more'"),
    ("b/1 a.py::t [ Failure ] extra", "unexpected text after the results block"),
    ("b/1 a.py::t [ ]", "empty results block"),
    ("[ cpu ] a.py::t [ Failure ]", "missing link"),
    ("b/1 [ cpu g13 applegpu_g13s ] a.py::t [ Failure ]", "same tag set"),
])
def test_malformed_line_names_file_line_and_problem(body: str, problem: str) -> None:
    text = HEADER + "\n# a reason\n" + body + "\n"
    with pytest.raises(ExpectationsError) as err:
        parse_expectations(text, "bad.txt")
    assert err.value.lineno == 7
    assert str(err.value).startswith("bad.txt:7: ")
    assert problem in str(err.value)
    assert isinstance(err.value, Dflash2Error)


@pytest.mark.parametrize(("text", "lineno", "problem"), [
    ("# tags: [ cpu\nb/1 a.py::t [ Failure ]\n", 1, "unbalanced '[' in tag header"),
    ("# tags: [ cpu\n# more\n", 1, "unbalanced '[' in tag header"),
    ("# tags: cpu ]\n", 1, "bad tag header"),
    ("# tags: [ ]\n", 1, "empty tag set"),
    ("# tags: [ Cpu ]\n", 1, "bad tag 'Cpu'"),
    ("# tags: [ cpu ]\n# tags: [ real cpu ]\n", 2, "declared twice"),
    ("# tags: [ cpu ]\nb/1 a.py::t [ Failure ]\n# tags: [ real ]\n", 3,
     "tag header after the first expectation"),
])
def test_bad_tag_header(text: str, lineno: int, problem: str) -> None:
    with pytest.raises(ExpectationsError) as err:
        parse_expectations(text, "h.txt")
    assert str(err.value).startswith(f"h.txt:{lineno}: ")
    assert problem in str(err.value)


def test_unreadable_file_is_a_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(Dflash2Error, match="cannot read expectations file"):
        load_expectations(tmp_path / "missing.txt")


def test_brackets_in_globs_match_literally() -> None:
    exp = parse_expectations(HEADER + "b/1 a.py::t[m16-gate_up-bfloat16] [ Failure ]\n"
                                      "b/2 a.py::u[a*] [ Failure ]\n", "g.txt")
    assert exp.lookup("a.py::t[m16-gate_up-bfloat16]", CPU) is not None
    # fnmatch would read [m16-...] as a character class and match "a.py::tm": we must not.
    assert exp.lookup("a.py::tm", CPU) is None
    assert exp.lookup("a.py::t[m16-gate_up-float16]", CPU) is None
    assert exp.lookup("a.py::u[a-partial-tail]", CPU) is not None
    assert exp.lookup("a.py::u[b]", CPU) is None
    assert exp.lookup("x/a.py::t[m16-gate_up-bfloat16]", CPU) is None  # whole node id


def test_tags_must_all_match_the_device() -> None:
    exp = parse_expectations(HEADER + "b/1 [ applegpu_g13s real ] a.py::t [ Failure ]\n"
                                      "b/2 [ g13 ] a.py::g [ Failure ]\n"
                                      "b/3 [ cpu ] a.py::c [ Failure ]\n", "t.txt")
    assert exp.lookup("a.py::t", G13S_REAL) is not None
    assert exp.lookup("a.py::t", G13S_EMU) is None
    assert exp.lookup("a.py::g", G13S_EMU) is not None
    assert exp.lookup("a.py::c", CPU) is not None
    assert exp.lookup("a.py::c", G13S_EMU) is None  # emulated g13s is not the cpu device


def test_device_tags() -> None:
    assert device_tags(_dev("applegpu_g13s", 13, "metal", False)) == G13S_REAL
    assert device_tags(_dev("applegpu_g13s", 13, "cpu", True)) == G13S_EMU
    assert device_tags(_dev("cpu", None, "cpu", False)) == CPU
    assert device_tags(_dev("sm_90", None, "cuda", False)) == {"sm_90", "real", "cuda"}


def test_several_lines_merge() -> None:
    exp = parse_expectations(HEADER + "# slow one\nb/1 a.py::t* [ Slow ]\n"
                                      "b/2 [ cpu ] a.py::t1 [ Failure ]\n", "m.txt")
    v = exp.lookup("a.py::t1", CPU)
    assert v is not None
    assert v.results == {"Slow", "Failure"} and v.expected == "fail"
    assert v.link == "b/1 b/2" and v.reason == "slow one"
    assert v.where == "m.txt:6, m.txt:7"


@pytest.mark.parametrize(("results", "outcome", "category"), [
    (None, "passed", "expected_pass"),
    (None, "failed", "unexpected_fail"),
    (None, "error", "unexpected_fail"),
    (None, "skipped", "skipped"),
    ("Failure", "failed", "expected_fail"),
    ("Failure", "passed", "unexpected_pass"),
    ("Failure", "error", "unexpected_fail"),
    ("Failure", "crashed", "unexpected_fail"),
    ("Flaky", "passed", "expected_pass"),
    ("Flaky", "failed", "expected_fail"),
    ("Failure Flaky", "passed", "expected_pass"),
    ("Slow", "passed", "expected_pass"),
    ("Slow", "failed", "unexpected_fail"),
    ("Skip", "skipped", "skipped"),
])
def test_classify(results: str | None, outcome: str, category: str) -> None:
    verdict = None
    if results:
        exp = parse_expectations(f"b/1 a.py::t [ {results} ]\n", "c.txt")
        verdict = exp.lookup("a.py::t", CPU)
        assert verdict is not None
    assert classify(outcome, verdict) == category
