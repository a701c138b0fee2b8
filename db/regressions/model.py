"""The data the regression checks share: a run's jobs as loaded, and the flags they raise."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any

SEVERITIES = ("high", "medium", "low", "note")
STOCK = "stock"

# (op, dtype, M, K, N, variant) -> the known implementations that executed it
Impls = dict[tuple, set[str]]
# (op, dtype, M, K, N) -> variant -> reason, for the selections of the path under test
UnderTest = dict[tuple, dict[str, str | None]]


@dataclass
class Flag:
    kind: str
    severity: str
    device: str
    variant_key: str
    subject: str  # the test, or the kernel shape, the flag is about
    evidence: str  # one line a person reads
    run_id: str
    against: str | None = None  # the run compared with (None: within the run)
    baseline: Any = None
    current: Any = None
    details: dict = field(default_factory=dict)

    @property
    def is_regression(self) -> bool:
        return self.severity != "note"

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class ResultData:
    nodeid: str
    outcome: str
    category: str
    message: str
    expected: str | None
    link: str | None
    measurements: dict[str, list[dict]] = field(default_factory=lambda: defaultdict(list))
    fingerprints: dict[str, str] = field(default_factory=dict)
    impls: Impls = field(default_factory=lambda: defaultdict(set))
    under_test: UnderTest = field(default_factory=lambda: defaultdict(dict))


@dataclass
class RunInfo:
    """The run-level facts a comparison needs: its suite, start and dispatch context."""

    id: str
    suite: str
    started: float
    context: dict | None  # None: recorded before runs carried one


@dataclass
class JobData:
    run: RunInfo
    device: dict
    results: dict[str, ResultData] = field(default_factory=dict)
    # (op, dtype, M, K, N) -> variant -> (reason, nodeids), every role
    selections: dict[tuple, dict[str, tuple[str | None, set[str]]]] = field(
        default_factory=lambda: defaultdict(dict))
    # (op, dtype, M, K, N, variant) -> known implementation -> nodeids that ran it
    impls: dict[tuple, dict[str, set[str]]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(set)))

    @property
    def run_id(self) -> str:
        return self.run.id

    def impls_of(self, key: tuple, variant: str) -> set[str]:
        return set(self.impls.get((*key, variant), {}))


@dataclass
class Comparison:
    device: str
    variant_key: str
    against: str | None
    why: str  # baseline | previous run | --against; or why nothing was compared


@dataclass
class Report:
    run_id: str
    suite: str
    flags: list[Flag]
    comparisons: list[Comparison]

    @property
    def regressions(self) -> list[Flag]:
        return [f for f in self.flags if f.is_regression]

    @property
    def compared(self) -> bool:
        """Whether any device had a comparable earlier run: "no regressions" means something
        only then."""
        return any(c.against is not None for c in self.comparisons)

    def to_json(self) -> dict:
        return {"run_id": self.run_id, "suite": self.suite, "compared": self.compared,
                "flags": [f.to_json() for f in self.flags],
                "comparisons": [asdict(c) for c in self.comparisons]}


def make_flag(kind: str, severity: str, job: JobData, base: JobData | None, subject: str,
              evidence: str, baseline: Any = None, current: Any = None, **details: Any) -> Flag:
    return Flag(kind, severity, job.device["label"], job.device["variant_key"], subject,
                evidence, job.run_id, base.run_id if base else None, baseline, current, details)


def same_impls(now: Impls, before: Impls) -> bool:
    """Whether two results' selections ran the same implementations: every (shape, variant)
    both made, with an implementation known on both sides, ran the same ones."""
    return all(now[k] == before[k] for k in set(now) & set(before) if now[k] and before[k])
