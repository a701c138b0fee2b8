"""Per-device test expectations: which known failures a device is allowed to have.

A failing test on one GPU generation is a fact to track, not a test to delete or a bound to
loosen. The file records it (with a tracking link and a reason) for the devices it applies to,
so a run can tell *expected* from *unexpected* results and can report an expected failure that
started passing as stale. The grammar follows Chromium's GPU test expectations
(docs/EXPECTATIONS.md)::

    # tags: [ applegpu_g13s applegpu_g14g cpu sm_90 ]
    # tags: [ g13 g14 ]
    # tags: [ emulated real ]
    issues/3 [ applegpu_g13s real ] suites/test_x.py::test_y[m16-*] [ Failure ]

Only ``*`` is special in a test-id glob; ``[`` and ``]`` match themselves, because pytest node
ids carry their parameters in brackets.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from devices.errors import Dflash2Error
from devices.identity import DeviceIdentity

RESULTS = ("Failure", "Skip", "Slow", "Flaky")
CATEGORIES = ("expected_pass", "expected_fail", "unexpected_fail", "unexpected_pass", "skipped")

_TAG = re.compile(r"^[a-z0-9_]+$")
_TAGS_HEADER = re.compile(r"^#\s*tags:\s*(?P<rest>.*)$", re.IGNORECASE)
# "#" starts a comment at the start of a line or after whitespace ("issues#3" is one token).
_COMMENT = re.compile(r"(^|\s)#")


class ExpectationsError(Dflash2Error):
    """A malformed expectations file; the message is ``file:line: what is wrong``."""

    def __init__(self, path: str, lineno: int, problem: str) -> None:
        super().__init__(f"{path}:{lineno}: {problem}")
        self.path = path
        self.lineno = lineno
        self.problem = problem


@dataclass(frozen=True)
class Expectation:
    """One line of the file: on devices carrying every tag, tests matching glob have results."""

    link: str
    tags: frozenset[str]
    glob: str
    results: frozenset[str]
    reason: str
    path: str
    lineno: int

    def applies_to(self, device_tags: Iterable[str]) -> bool:
        return self.tags <= frozenset(device_tags)

    def matches(self, nodeid: str) -> bool:
        return _glob_regex(self.glob).fullmatch(nodeid) is not None

    @property
    def where(self) -> str:
        return f"{self.path}:{self.lineno}"


@dataclass(frozen=True)
class Verdict:
    """Every expectation line that applies to one test on one device, merged (a union)."""

    lines: tuple[Expectation, ...]

    @property
    def results(self) -> frozenset[str]:
        return frozenset().union(*(e.results for e in self.lines))

    @property
    def expected(self) -> str:
        """One word for the JSONL ``expected`` field: skip > flaky > fail > slow > pass."""
        r = self.results
        for result, word in (("Skip", "skip"), ("Flaky", "flaky"), ("Failure", "fail"),
                             ("Slow", "slow")):
            if result in r:
                return word
        return "pass"

    @property
    def link(self) -> str | None:
        return " ".join(dict.fromkeys(e.link for e in self.lines)) or None

    @property
    def reason(self) -> str | None:
        return " | ".join(e.reason for e in self.lines if e.reason) or None

    @property
    def where(self) -> str:
        return ", ".join(e.where for e in self.lines)


@dataclass(frozen=True)
class Expectations:
    """A parsed file: its declared tag sets and its lines, in file order."""

    path: str
    tag_sets: tuple[frozenset[str], ...]
    entries: tuple[Expectation, ...]

    @property
    def tags(self) -> frozenset[str]:
        return frozenset().union(*self.tag_sets)

    def lookup(self, nodeid: str, device_tags: Iterable[str]) -> Verdict | None:
        """The merged expectation for ``nodeid`` on a device with these tags, or None."""
        dt = frozenset(device_tags)
        lines = tuple(e for e in self.entries if e.applies_to(dt) and e.matches(nodeid))
        return Verdict(lines) if lines else None


def device_tags(device: DeviceIdentity) -> frozenset[str]:
    """The tags a device carries: its arch, its generation, emulated|real, and (real only) backend.

    The backend tag (metal, cuda, cpu) is given to real devices only, as the device selectors do:
    an emulated applegpu_g13s runs on the host's CPU but is not the plain ``cpu`` device.
    """
    tags = {device.arch, "emulated" if device.emulated else "real"}
    if device.generation is not None:
        tags.add(f"g{device.generation}")
    if not device.emulated:
        tags.add(device.backend)
    return frozenset(tags)


def classify(outcome: str, verdict: Verdict | None) -> str:
    """The category of one result given its expectation (None: expected to pass).

    ``error`` (setup/teardown broke), ``crashed`` and ``timeout`` are never expected: a Failure
    expectation records a known wrong answer, not a broken fixture or a hung kernel.
    """
    results = verdict.results if verdict else frozenset()
    if outcome == "skipped":
        return "skipped"
    if outcome == "passed":
        stale = "Failure" in results and "Flaky" not in results
        return "unexpected_pass" if stale else "expected_pass"
    if outcome == "failed" and results & {"Failure", "Flaky"}:
        return "expected_fail"
    return "unexpected_fail"


def load_expectations(path: str | Path) -> Expectations:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise Dflash2Error(f"cannot read expectations file {p}: {e.strerror or e}") from None
    return parse_expectations(text, str(path))


def parse_expectations(text: str, path: str = "<expectations>") -> Expectations:
    """Parse the whole file; the first malformed line raises ExpectationsError."""
    tag_sets: list[frozenset[str]] = []
    entries: list[Expectation] = []
    comments: list[str] = []  # the comment block directly above the next entry: its reason
    pending: tuple[int, str] | None = None  # an open "# tags: [" header spanning lines

    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if pending is not None:
            if not line.startswith("#"):
                raise ExpectationsError(path, pending[0], "unbalanced '[' in tag header")
            pending = (pending[0], pending[1] + " " + line[1:])
            if "]" in line:
                tag_sets.append(_tag_set(pending[1], path, pending[0], tag_sets))
                pending = None
            continue
        if not line:
            comments = []
            continue
        if line.startswith("#"):
            m = _TAGS_HEADER.match(line)
            if m is None:
                comments.append(line[1:].strip())
                continue
            if entries:
                raise ExpectationsError(path, lineno,
                                        "tag header after the first expectation line")
            comments = []
            if "]" in m["rest"]:
                tag_sets.append(_tag_set(m["rest"], path, lineno, tag_sets))
            else:
                pending = (lineno, m["rest"])
            continue
        body, trailing = _split_comment(line)
        reason = " ".join([*comments, trailing]).strip()
        entries.append(_entry(body, reason, path, lineno, tag_sets))
        comments = []
    if pending is not None:
        raise ExpectationsError(path, pending[0], "unbalanced '[' in tag header")
    return Expectations(path, tuple(tag_sets), tuple(entries))


def _split_comment(line: str) -> tuple[str, str]:
    m = _COMMENT.search(line)
    if m is None:
        return line, ""
    return line[: m.start()].strip(), line[m.end():].strip()


def _tag_set(rest: str, path: str, lineno: int,
             earlier: list[frozenset[str]]) -> frozenset[str]:
    tokens = rest.split()
    if len(tokens) < 2 or tokens[0] != "[" or tokens[-1] != "]":
        raise ExpectationsError(path, lineno,
                                "bad tag header: write '# tags: [ tag1 tag2 ... ]'")
    tags = tokens[1:-1]
    if "[" in tags or "]" in tags:
        raise ExpectationsError(path, lineno, "unbalanced brackets in tag header")
    if not tags:
        raise ExpectationsError(path, lineno, "empty tag set in tag header")
    seen: set[str] = set()
    for tag in tags:
        if not _TAG.match(tag):
            raise ExpectationsError(path, lineno,
                                    f"bad tag {tag!r}: tags are lowercase letters, digits, _")
        if tag in seen or any(tag in s for s in earlier):
            raise ExpectationsError(path, lineno, f"tag {tag!r} is declared twice")
        seen.add(tag)
    return frozenset(tags)


def _entry(body: str, reason: str, path: str, lineno: int,
           tag_sets: list[frozenset[str]]) -> Expectation:
    tokens = body.split()
    link = tokens[0]
    if link.startswith(("[", "]")):
        raise ExpectationsError(path, lineno, "missing link: a line starts with a tracking link")
    i = 1
    tags: list[str] = []
    if i < len(tokens) and tokens[i] == "[":
        close = _closing(tokens, i, path, lineno, "tags")
        tags = [t.lower() for t in tokens[i + 1:close]]
        i = close + 1
    if i >= len(tokens) or tokens[i] in ("[", "]"):
        raise ExpectationsError(path, lineno, "empty test-id glob: name the tests after the tags")
    glob = tokens[i]
    i += 1
    if i >= len(tokens):
        raise ExpectationsError(path, lineno,
                                "missing results block: end the line with [ Failure | Skip | "
                                "Slow | Flaky ]")
    if tokens[i] != "[":
        hint = (" (write brackets with spaces: [ Failure ])" if tokens[i].startswith("[")
                else "")
        raise ExpectationsError(path, lineno,
                                f"expected a results block after the glob, got {tokens[i]!r}"
                                f"{hint}; a glob is one token without spaces")
    close = _closing(tokens, i, path, lineno, "results")
    if close != len(tokens) - 1:
        raise ExpectationsError(path, lineno,
                                f"unexpected text after the results block: "
                                f"{' '.join(tokens[close + 1:])!r}")
    results = tokens[i + 1:close]
    if not results:
        raise ExpectationsError(path, lineno, "empty results block: name at least one result")
    for r in results:
        if r not in RESULTS:
            raise ExpectationsError(path, lineno,
                                    f"unknown result {r!r}: use {', '.join(RESULTS)}")
    _check_tags(tags, tag_sets, path, lineno)
    return Expectation(link, frozenset(tags), glob, frozenset(results), reason, path, lineno)


def _closing(tokens: list[str], start: int, path: str, lineno: int, what: str) -> int:
    for j in range(start + 1, len(tokens)):
        if tokens[j] == "]":
            return j
        if tokens[j] == "[":
            break
    raise ExpectationsError(path, lineno, f"unbalanced brackets in the {what} block")


def _check_tags(tags: list[str], tag_sets: list[frozenset[str]], path: str, lineno: int) -> None:
    declared = frozenset().union(*tag_sets)
    used_set: dict[int, str] = {}
    for tag in tags:
        if tag not in declared:
            raise ExpectationsError(path, lineno,
                                    f"unknown tag {tag!r}: declare it in a '# tags: [ ... ]' "
                                    f"header line")
        k = next(n for n, s in enumerate(tag_sets) if tag in s)
        if k in used_set:
            raise ExpectationsError(path, lineno,
                                    f"tags {used_set[k]!r} and {tag!r} are from the same tag set: "
                                    f"one line matches one value per set (write two lines)")
        used_set[k] = tag


@functools.lru_cache(maxsize=1024)
def _glob_regex(glob: str) -> re.Pattern[str]:
    """Regex for a glob where only ``*`` is special (fnmatch would read ``[...]`` as a class)."""
    return re.compile(".*".join(re.escape(part) for part in glob.split("*")), re.DOTALL)
