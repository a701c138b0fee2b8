"""A result's details -- measurements, kernel selections, fingerprints -- as JSON on its row.

Why JSON on ``results`` and not child tables (migration 0006): a result carries ~4.4 details,
and as rows of their own each cost a b-tree entry, an index entry and a foreign-key check, so
ingestion could not pass ~30k results/s whatever wrote them. As three JSON columns they are one
row write per result. Nothing queries a single detail across the history without its result
(``bench/bench_history.py`` checks every command's statements), and the views ``measurements``,
``selections`` and ``fingerprints`` (same names and columns as the old tables, over
``json_each`` / ``json_array_elements``) keep user SQL working.

Each column holds a compact JSON array of arrays, one per detail in the order the test made
them, their fields in `LAYOUTS` order (``[["deviation",0.0003,"abs",0.001]]``), or NULL when the
result has none: positional arrays are half the size of objects and twice as fast to write.
Values are JSON's own: a non-finite float is ``null`` (`db.events` makes it so before encoding).
"""

from __future__ import annotations

from typing import Any

import orjson

# Column of ``results`` -> the fields of one detail, in array order. The views name them so.
LAYOUTS: dict[str, tuple[str, ...]] = {
    "measurements": ("name", "value", "unit", "bound"),
    "selections": ("op", "dtype", "M", "K", "N", "variant", "reason", "impl", "role"),
    "fingerprints": ("key", "digest"),
}
COLUMNS = {kind: f"{kind}_json" for kind in LAYOUTS}  # measurements -> measurements_json

_dumps, _loads, _DecodeError = orjson.dumps, orjson.loads, orjson.JSONDecodeError


def encode(details: list[tuple]) -> str | None:
    """``details`` (tuples in `LAYOUTS` order, of str / int / float / None) as the column's
    text; None when there are none. orjson, not ``json.dumps``: 0.2 us against 2.5 us for a
    result's three measurements (float formatting), a tenth of the whole per-result budget."""
    return _dumps(details).decode() if details else None


def decode(kind: str, text: str | bytes | None) -> list[dict[str, Any]]:
    """The column's details as dicts keyed by `LAYOUTS`, read as `decode_rows` reads them."""
    names = LAYOUTS[kind]
    return [dict(zip(names, x)) for x in decode_rows(kind, text)]


def decode_rows(kind: str, text: str | bytes | None) -> list[list]:
    """The column's details as arrays of exactly `LAYOUTS`'s length (missing fields None), for
    readers that take fields by position. Tolerant, as every reader of the history must be:
    text that is not a JSON array of arrays (written by hand, not by the farm) reads as no
    details, an element that is not an array is skipped, rather than failing the command."""
    if not text:
        return []
    try:
        items = _loads(text)
    except _DecodeError:
        return []
    if not isinstance(items, list):
        return []
    n = len(LAYOUTS[kind])
    return [x if len(x) == n else [*x[:n], *(None,) * (n - len(x))]
            for x in items if isinstance(x, list)]
