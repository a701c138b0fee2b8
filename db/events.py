"""From the JSONL results stream (docs/CONTRACTS.md) to table rows, tolerantly.

Consumers must ignore unknown keys and types, so every field is read with a default and a wrong
type degrades to ``None`` rather than failing a whole batch: losing one malformed measurement is
better than losing a device's results.

A selection's ``impl`` (the implementation that executed, `kernels.recorder.IMPLEMENTATIONS`) is
stored as given when it is one of the known names and as ``NULL`` (unknown) otherwise: results
written before the field existed carry none. A *file* naming an implementation this farm does
not know is refused before it is recorded (`unknown_impl`, called by `db.ingest`): a name the
regression analysis cannot compare is better reported than silently recorded as unknown.

A result's measurements, selections and fingerprints become JSON columns of its row
(`db.details`), built here from the values as read: a non-finite number is already ``None``
(JSON ``null``), a string already `clean_text`-ed, an integer one the database can hold.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from db.details import COLUMNS as DETAIL_COLUMNS
from db.details import encode
from kernels.recorder import IMPLEMENTATIONS, ROLE_UNDER_TEST, ROLES

CATEGORIES = (
    "expected_pass",
    "expected_fail",
    "unexpected_fail",
    "unexpected_pass",
    "crashed",
    "skipped",
)
FAILING_OUTCOMES = ("failed", "error", "crashed", "timeout")

_IMPLS, _ROLES = frozenset(IMPLEMENTATIONS), frozenset(ROLES)
_isfinite = math.isfinite
_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1

DEVICE_FIELDS = ("arch", "generation", "size", "chip", "host", "os", "mlx_version", "emulated")


def clean_text(s: str) -> str:
    """``s`` storable and printable: lone surrogates (bytes a test wrote that no codec decoded,
    carried by JSON as ``\\udcff``) become backslash escapes; SQLite's driver and a strict
    stdout would raise on them, losing the whole batch or the run's summary."""
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        return s.encode("utf-8", "backslashreplace").decode("utf-8")


def scrub(obj: Any) -> Any:
    """``obj`` (a results-stream event) with every string `clean_text`-ed, keys included."""
    if isinstance(obj, str):
        return clean_text(obj)
    if isinstance(obj, dict):
        return {scrub(k): scrub(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [scrub(v) for v in obj]
    return obj


def _str(v: Any, default: str | None = None) -> str | None:
    if v.__class__ is str and v.isascii():  # the common case, and nothing to clean
        return v
    if v is None:
        return default
    return clean_text(v if isinstance(v, str) else str(v))


def _float(v: Any) -> float | None:
    if v.__class__ is float:
        return v if _isfinite(v) else None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        f = float(v)
    except OverflowError:  # an int beyond a double's range
        return None
    return f if _isfinite(f) else None


def _int(v: Any) -> int | None:
    """An integer the database (and JSON readers) can hold: 64-bit signed, else None."""
    if v.__class__ is int:
        return v if _I64_MIN <= v <= _I64_MAX else None
    if isinstance(v, bool):
        return None
    if isinstance(v, int) or isinstance(v, float) and v.is_integer():
        i = int(v)
    elif isinstance(v, str):
        try:  # not isdigit(): it takes "²", and "--5", which int() refuses
            i = int(v)
        except ValueError:
            return None
    else:
        return None
    return i if _I64_MIN <= i <= _I64_MAX else None


def _dicts(v: Any) -> list[dict]:
    return [x for x in v if isinstance(x, dict)] if isinstance(v, list) else []


def impl_of(selection: dict) -> str | None:
    """The selection's implementation when it is a known name; ``None`` (unknown) otherwise."""
    v = selection.get("impl")
    return v if isinstance(v, str) and v in _IMPLS else None


def role_of(selection: dict) -> str:
    """The selection's role; absent or unknown (an older writer) reads as the path under test,
    which is how every selection was compared before roles existed."""
    v = selection.get("role")
    return v if isinstance(v, str) and v in _ROLES else ROLE_UNDER_TEST


def unknown_impl(ev: dict) -> str | None:
    """The first implementation name in a result event that is not a known one, if any.

    Absent, ``null`` and ``""`` mean "not reported" (older writers) and are accepted.
    """
    if ev.get("type") != "result":
        return None
    for s in _dicts(ev.get("selections")):
        v = s.get("impl")
        if v is not None and v != "" and impl_of(s) is None:
            return v if isinstance(v, str) else json.dumps(v)
    return None


def device_row(device: dict, host: str | None, os_name: str | None) -> dict:
    """A devices-table row; its keys are stable hashes of what can change a device's results."""
    d = device if isinstance(device, dict) else {}
    row = {
        "arch": _str(d.get("arch"), "unknown"),
        "generation": _int(d.get("generation")),
        "size": _str(d.get("size")),
        "chip": _str(d.get("chip"), ""),
        "backend": _str(d.get("backend"), ""),
        "host": _str(host, ""),
        "os": _str(os_name, ""),
        "mlx_version": _str(d.get("mlx_version"), ""),
        "emulated": bool(d.get("emulated", False)),
    }
    row["variant_key"] = _key(row, DEVICE_FIELDS)
    row["lineage_key"] = _key(row, tuple(f for f in DEVICE_FIELDS if f != "mlx_version"))
    return row


def _key(row: dict, fields: tuple[str, ...]) -> str:
    blob = json.dumps([row[f] for f in fields], separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def category_of(outcome: str, expectation: dict) -> str:
    """The reported category, or one derived from the outcome when the stream carries none."""
    given = expectation.get("category")
    if isinstance(given, str) and given in CATEGORIES:
        return given
    if outcome in ("crashed", "timeout"):
        return "crashed"
    if outcome == "skipped":
        return "skipped"
    expected = expectation.get("expected")
    failed = outcome in FAILING_OUTCOMES
    if expected == "fail":
        return "expected_fail" if failed else "unexpected_pass"
    return "unexpected_fail" if failed else "expected_pass"


# Column order of the row tuples `batch_rows` builds (``results.id`` is the database's). The
# last three hold the result's measurements, selections and fingerprints as JSON
# (`db.details`: one array per detail, its fields in `db.details.LAYOUTS` order).
RESULT_COLUMNS = ("job_id", "nodeid", "test_id", "params", "outcome", "category", "expected",
                  "link", "reason", "duration", "message", "output", "time", "node", "host",
                  *DETAIL_COLUMNS.values())


@dataclass
class BatchRows:
    """A batch of result events as row tuples in `RESULT_COLUMNS` order. Tuples, not dicts:
    they go to the driver's executemany as they are."""

    results: list[tuple] = field(default_factory=list)


def batch_rows(job_id: int, events: Iterable[Any], into: BatchRows | None = None) -> BatchRows:
    """The rows of every ``result`` event in ``events`` (other types, non-objects and results
    without a node id are skipped), read as tolerantly as the module docstring says.

    With ``into``, they are appended to it, so several jobs' batches go to the database as
    one."""
    out = BatchRows() if into is None else into
    results = out.results
    for ev in events:
        if not isinstance(ev, dict) or ev.get("type") != "result":
            continue
        nodeid = _str(ev.get("nodeid"))
        if not nodeid:
            continue
        outcome = _str(ev.get("outcome"), "error")
        exp = ev.get("expectation")
        if not isinstance(exp, dict):
            exp = {}
        test_id = _str(ev.get("test_id")) or nodeid.split("[", 1)[0]
        params = _str(ev.get("params"))
        if params is None:
            params = nodeid[len(test_id) + 1 : -1] if nodeid.startswith(test_id + "[") else ""
        meas = sels = fps = None
        xs = ev.get("measurements")
        if isinstance(xs, list) and xs:
            meas = encode([(name, _float(x.get("value")), _str(x.get("unit")),
                            _float(x.get("bound")))
                           for x in xs if isinstance(x, dict) and (name := _str(x.get("name")))])
        xs = ev.get("selections")
        if isinstance(xs, list) and xs:
            kept = []
            for s in xs:
                if not isinstance(s, dict):
                    continue
                shape = (_int(s.get("M")), _int(s.get("K")), _int(s.get("N")))
                op, variant = _str(s.get("op")), _str(s.get("variant"))
                if op and variant and None not in shape:
                    kept.append((op, _str(s.get("dtype"), ""), *shape, variant,
                                 _str(s.get("reason")), impl_of(s), role_of(s)))
            sels = encode(kept)
        xs = ev.get("fingerprints")
        if isinstance(xs, list) and xs:
            kept = []
            for f in xs:
                if isinstance(f, dict):
                    key, digest = _str(f.get("key")), _str(f.get("digest"))
                    if key and digest:
                        kept.append((key, digest))
            fps = encode(kept)
        results.append((
            job_id, nodeid, test_id, params, outcome, category_of(outcome, exp),
            _str(exp.get("expected")), _str(exp.get("link")), _str(exp.get("reason")),
            _float(ev.get("duration")), _str(ev.get("message"), ""), _str(ev.get("output")),
            _float(ev.get("time")),
            # the node that ran it and its host, added by the farm's driver (RESULTS_FORMAT.md)
            _str(ev.get("farm_node")), _str(ev.get("farm_host")),
            meas, sels, fps,
        ))
    return out
