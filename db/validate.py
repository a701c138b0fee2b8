"""A results file checked line by line against docs/RESULTS_FORMAT.md before it is ingested.

The live farm stream is tolerant (a malformed field is stored as unknown rather than lose a
device's results), but a file handed to `farm ingest` is the user's to fix: a wrong type would
otherwise be stored as a Python repr (``['a']``), an outcome ``7`` counted as a pass, and a
result without a node id dropped without a word. So every problem is reported with its line
number, and the file is refused whole before anything is written. Unknown keys and event types
are accepted (newer writers); a truncated last line (a writer that died mid-line) is skipped.
"""

from __future__ import annotations

from typing import Any

from kernels.recorder import IMPLEMENTATIONS, ROLES

OUTCOMES = ("passed", "failed", "skipped", "error", "timeout", "crashed")
SHOWN = 5  # problems named in the one-line refusal


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _opt(v: Any, kind: type | tuple) -> bool:
    return v is None or (isinstance(v, kind) and not isinstance(v, bool))


def _opt_num(v: Any) -> bool:
    return v is None or _is_num(v)


def _items(ev: dict, key: str, out: list[str]) -> list[dict]:
    v = ev.get(key, [])
    if not isinstance(v, list) or not all(isinstance(x, dict) for x in v):
        out.append(f"{key} must be a list of objects")
        return []
    return v


def result_problems(ev: dict) -> list[str]:
    """What in one ``result`` event breaks the documented schema."""
    out: list[str] = []
    nodeid = ev.get("nodeid")
    if not isinstance(nodeid, str) or not nodeid:
        out.append(f"nodeid must be a non-empty string, not {nodeid!r}")
    if ev.get("outcome") not in OUTCOMES:
        out.append(f"outcome {ev.get('outcome')!r} is not one of {', '.join(OUTCOMES)}")
    for key in ("test_id", "params", "message", "output", "farm_node", "farm_host"):
        if not _opt(ev.get(key), str):
            out.append(f"{key} must be a string, not {type(ev.get(key)).__name__}")
    for key in ("duration", "time"):
        if not _opt_num(ev.get(key)):
            out.append(f"{key} must be a number, not {ev.get(key)!r}")
    if not _opt(ev.get("expectation"), dict):
        out.append("expectation must be an object")
    for i, m in enumerate(_items(ev, "measurements", out)):
        if not isinstance(m.get("name"), str) or not m.get("name"):
            out.append(f"measurements[{i}].name must be a non-empty string")
        for key in ("value", "bound"):
            if not _opt_num(m.get(key)):
                out.append(f"measurements[{i}].{key} must be a number or null, not "
                           f"{m.get(key)!r}")
        if not _opt(m.get("unit"), str):
            out.append(f"measurements[{i}].unit must be a string or null")
    for i, s in enumerate(_items(ev, "selections", out)):
        for key in ("op", "dtype", "variant"):
            if not isinstance(s.get(key), str) or not s.get(key):
                out.append(f"selections[{i}].{key} must be a non-empty string")
        for key in ("M", "K", "N"):
            if not isinstance(s.get(key), int) or isinstance(s.get(key), bool):
                out.append(f"selections[{i}].{key} must be an integer, not {s.get(key)!r}")
        if not _opt(s.get("reason"), str):
            out.append(f"selections[{i}].reason must be a string or null")
        if s.get("impl") not in (None, "", *IMPLEMENTATIONS):
            out.append(f"selections[{i}] has impl {str(s.get('impl'))!r}, not one of "
                       f"{', '.join(IMPLEMENTATIONS)} (a file from a newer farm? upgrade "
                       f"dflash2-farm to ingest it)")
        if s.get("role") not in (None, *ROLES):
            out.append(f"selections[{i}].role {s.get('role')!r} is not one of "
                       f"{', '.join(ROLES)}")
    for i, f in enumerate(_items(ev, "fingerprints", out)):
        if not isinstance(f.get("key"), str) or not isinstance(f.get("digest"), str):
            out.append(f"fingerprints[{i}] needs string key and digest")
    return out


def line_problems(lineno: int, obj: Any, last: bool) -> list[str]:
    """Problems of one line (``obj``: its parsed JSON, or None when it did not parse)."""
    if obj is None:
        return [] if last else [f"line {lineno}: not JSON"]
    if not isinstance(obj, dict):
        return [f"line {lineno}: not a JSON object"]
    if obj.get("type") == "result":
        where = f"line {lineno}" + (f" ({obj['nodeid']})" if isinstance(obj.get("nodeid"), str)
                                    and obj.get("nodeid") else "")
        return [f"{where}: {p}" for p in result_problems(obj)]
    if obj.get("type") == "session_start" and not _opt(obj.get("device"), dict):
        return [f"line {lineno}: session_start device must be an object"]
    return []


def refusal(problems: list[str]) -> str:
    """One line naming the first problems and how many there are."""
    shown = "; ".join(problems[:SHOWN])
    more = len(problems) - SHOWN
    return shown + (f"; and {more} more problem(s)" if more > 0 else "")
