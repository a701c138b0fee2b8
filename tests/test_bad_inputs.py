"""The bad-input battery (issue 6): every input a user can get wrong, through the real command
line in a subprocess, answered with ONE line on stderr, the documented exit code (README: 2 a
usage error, 3 infrastructure; pytest's own 4 for a usage error of the suites), no traceback,
and no change to the history (the files' bytes compared before and after; a history that does
not exist yet must not be created).

`farm run` cases must fail before any fleet starts: their stderr is the error line alone (an
embedded fleet would print its "embedded fleet ..." line first) and they return in seconds.

Covered elsewhere, not repeated here: a selector no live device matches on a real cluster
(tests/test_farm_cluster.py::test_a_selector_with_no_device_fails_fast_listing_the_live_ones,
plus its history check in tests/test_fault_battery.py); a bad quantization spec at the library
level (tests/test_quant_and_selection.py::test_bad_quant_spec): no command takes one, so the
command-line case here is the kernel benchmark's bad --dtype.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from db_fixtures import device, record, result, session_finish, session_start, write_jsonl

from db import open_history

REPO = Path(__file__).resolve().parent.parent
FARM = str(Path(sys.executable).with_name("farm"))
PY = sys.executable
FIX = "tests/farm_fixtures"
BASIC = f"{FIX}/suite_basic.py"
TIMEOUT_S = 60


def _damaged(path: Path) -> None:
    """A history whose header and schema are intact and one page of results is garbage."""
    h = open_history(path)
    record(h, [(device(), "mac-1", [result(f"suites/t.py::test_{i}") for i in range(400)])])
    h.close()
    with sqlite3.connect(path) as c:
        c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page_size = c.execute("PRAGMA page_size").fetchone()[0]
        pages = [r[0] for r in c.execute("SELECT pageno FROM dbstat WHERE name = 'results' "
                                         "ORDER BY pageno")]
    c.close()
    with open(path, "r+b") as f:
        f.seek((pages[len(pages) // 2] - 1) * page_size + 100)
        f.write(bytes(range(256)) * ((page_size - 200) // 256))


@pytest.fixture(scope="module")
def seeds(tmp_path_factory) -> dict[str, Path]:
    """Files built once, copied into each case's own directory."""
    d = tmp_path_factory.mktemp("bad-input-seeds")
    good = d / "good.db"
    h = open_history(good)
    record(h, [(device(), "mac-1", [result()])])
    h.close()
    future = d / "future.db"
    shutil.copy(good, future)
    with sqlite3.connect(future) as c:  # a schema from a newer farm
        c.execute("UPDATE alembic_version SET version_num = 'f00d_from_the_future'")
    c.close()
    _damaged(d / "damaged.db")
    write_jsonl(d / "valid.jsonl", [session_start(), result(), session_finish()])
    bad_lines = {  # one documented-schema breakage each, on line 2 of a results file
        "outcome_7": {**result(), "outcome": 7},
        "null_nodeid": {**result(), "nodeid": None},
        "list_message": {**result(), "message": ["a"]},
        "string_value": result(measurements=[{"name": "x", "value": "1.5"}]),
        "float_shape": result(selections=[{"op": "o", "dtype": "bfloat16", "M": 8.5, "K": 1,
                                           "N": 1, "variant": "stock", "reason": None}]),
    }
    for name, ev in bad_lines.items():
        write_jsonl(d / f"{name}.jsonl", [session_start(), ev, session_finish()])
    (d / "middle_garbage.jsonl").write_text(
        json.dumps(session_start()) + "\nnot json\n" + json.dumps(session_finish()) + "\n")
    (d / "junk.db").write_bytes(os.urandom(4096))
    (d / "garbage.jsonl").write_text("garbage\n{not json\n\x00\x01\n")
    (d / "malformed.txt").write_text("this is not an expectations line\n")
    (d / "unknown_tag.txt").write_text("# tags: [ g13 g14 ]\n"
                                       "crbug/1 [ nosuchtag ] suites/test_selection.py::* "
                                       "[ Failure ]\n")
    return {p.name: p for p in d.iterdir()}


@pytest.fixture
def place(seeds, tmp_path) -> dict[str, str]:
    for p in seeds.values():
        shutil.copy(p, tmp_path / p.name)
    with sqlite3.connect(f"file:{tmp_path / 'good.db'}?mode=ro", uri=True) as c:
        run = c.execute("SELECT id FROM runs").fetchone()[0]
    c.close()
    names = {p.rsplit(".", 1)[0]: str(tmp_path / p) for p in seeds}
    return {**names, "fresh": str(tmp_path / "fresh.db"), "run": run, "dir": str(tmp_path)}


def snapshot(d: Path) -> dict[str, str]:
    """sha256 of every file, SQLite's shared-memory index and an empty write-ahead log aside
    (they hold no data; a read-only reader may leave one, the next one remove it)."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(d.iterdir()) if p.is_file() and not p.name.endswith("-shm")
            and not (p.name.endswith("-wal") and p.stat().st_size == 0)}


def counts(db: str) -> tuple[int, ...]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as c:
        out = tuple(c.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                    for t in ("runs", "jobs", "results", "baselines"))
    c.close()
    return out


RUN = [FARM, "run", "--suite", BASIC]
# (id, argv with {placeholders}, extra env, exit code, text in the line, the line's prefix)
CASES = [
    # farm run: validation before any cluster work, the history untouched
    ("unknown-suite", [FARM, "run", "--suite", "nope", "--db", "{good}"], {}, 2,
     "unknown suite 'nope'", "error: "),
    ("unknown-selector", [*RUN, "--devices", "g99", "--db", "{good}"], {}, 2,
     "unknown device selector 'g99'", "error: "),
    ("empty-selector", [*RUN, "--devices", "", "--db", "{good}"], {}, 2,
     "empty device selector", "error: "),
    ("blank-selector-list", [*RUN, "--devices", " , ", "--db", "{fresh}"], {}, 2,
     "selector", "error: "),
    ("bad-twin-count", [*RUN, "--devices", "g14*x", "--db", "{good}"], {}, 2,
     "bad twin count in device selector 'g14*x'", "error: "),
    ("twins-with-every", [*RUN, "--devices", "g14*2", "--every", "--db", "{fresh}"], {}, 2,
     "'g14*2' splits one run of it across twins", "error: "),
    ("suite-outside-tree", [FARM, "run", "--suite", "/tmp/x.py", "--db", "{good}"], {}, 2,
     "outside the shipped tree", "error: "),
    ("suite-collects-nothing", [FARM, "run", "--suite", f"{FIX}/suite_empty.py",
                                "--db", "{good}"], {}, 2, "collects no tests", "error: "),
    ("unreachable-address", [*RUN, "--address", "127.0.0.1:1", "--db", "{fresh}"], {}, 3,
     "unreachable", "error: "),
    ("unreachable-address-existing-db", [*RUN, "--address", "127.0.0.1:1", "--db", "{good}"],
     {}, 3, "unreachable", "error: "),
    ("malformed-address", [*RUN, "--address", "nonsense", "--db", "{good}"], {}, 2,
     "bad cluster address", "error: "),
    ("test-timeout-zero", [*RUN, "--test-timeout", "0", "--db", "{good}"], {}, 2,
     "--test-timeout must be > 0", "error: "),
    ("test-timeout-negative", [*RUN, "--test-timeout", "-1", "--db", "{fresh}"], {}, 2,
     "--test-timeout must be > 0", "error: "),
    ("test-timeout-not-a-number", [*RUN, "--test-timeout", "soon", "--db", "{good}"], {}, 2,
     "--test-timeout", "error: "),
    ("job-timeout-zero", [*RUN, "--job-timeout", "0", "--db", "{good}"], {}, 2,
     "--job-timeout must be > 0", "error: "),
    ("test-timeout-nan", [*RUN, "--test-timeout", "nan", "--db", "{good}"], {}, 2,
     "--test-timeout must be > 0 seconds and finite", "error: "),
    ("job-timeout-nan", [*RUN, "--job-timeout", "nan", "--db", "{good}"], {}, 2,
     "--job-timeout must be > 0 seconds and finite", "error: "),
    ("job-timeout-inf", [*RUN, "--job-timeout", "inf", "--db", "{good}"], {}, 2,
     "--job-timeout must be > 0 seconds and finite", "error: "),
    ("retries-negative", [*RUN, "--retries", "-1", "--db", "{good}"], {}, 2,
     "--retries must be >= 0", "error: "),
    ("tree-over-upload-cap", [*RUN, "--db", "{fresh}"], {"RAY_max_grpc_message_size": "100000"},
     2, "over Ray's upload cap of 98 KiB; largest: ", "error: "),
    ("bad-device-arch-env", [*RUN, "--db", "{good}"], {"DFLASH2_DEVICE_ARCH": "garbage"}, 2,
     "DFLASH2_DEVICE_ARCH='garbage'", "error: "),
    ("history-unwritable", [*RUN, "--db", "/proc/x/h.db"], {}, 2,
     "cannot create the history at /proc/x/h.db", "error: "),
    ("history-random-bytes", [*RUN, "--db", "{junk}"], {}, 2,
     "is not a SQLite database", "error: "),
    ("history-damaged-run", [*RUN, "--db", "{damaged}"], {}, 2,
     "is damaged (quick_check:", "error: "),
    ("history-damaged-ingest", [FARM, "ingest", "{valid}", "--db", "{damaged}"], {}, 2,
     "is damaged (quick_check:", "error: "),
    ("history-newer-schema-run", [*RUN, "--db", "{future}"], {}, 2,
     "f00d_from_the_future", "error: "),
    # history commands
    ("show-unknown-run", [FARM, "show", "nope", "--db", "{good}"], {}, 2,
     "unknown run 'nope'", "error: "),
    ("show-newer-schema", [FARM, "show", "latest", "--db", "{future}"], {}, 2,
     "newer", "error: "),
    ("runs-random-bytes", [FARM, "runs", "--db", "{junk}"], {}, 2,
     "is not a SQLite database", "error: "),
    ("runs-no-history-yet", [FARM, "runs", "--db", "{fresh}"], {}, 2,
     "no history at", "error: "),
    ("history-db-is-a-directory", [FARM, "runs", "--db", "{dir}"], {}, 2,
     "is a directory", "error: "),
    ("export-bad-format", [FARM, "export", "{run}", "--format", "xml", "--db", "{good}"], {}, 2,
     "unknown export format 'xml'", "error: "),
    ("query-invalid-sql", [FARM, "query", "SELEC nonsense", "--db", "{good}"], {}, 2,
     "invalid SQL", "error: "),
    ("query-writes", [FARM, "query", "DELETE FROM results", "--db", "{good}"], {}, 2,
     "read-only", "error: "),
    ("query-attach", [FARM, "query", "ATTACH DATABASE '{dir}/attached.db' AS x", "--db",
                      "{good}"], {}, 2, "ATTACH and DETACH are not allowed", "error: "),
    ("query-two-statements", [FARM, "query", "SELECT 1; DROP TABLE runs", "--db", "{good}"],
     {}, 2, "one statement", "error: "),
    ("regressions-against-unknown", [FARM, "regressions", "--against", "nope", "--db",
                                     "{good}"], {}, 2, "unknown run 'nope'", "error: "),
    ("baseline-set-unknown", [FARM, "baseline", "set", "nope", "--db", "{good}"], {}, 2,
     "unknown run 'nope'", "error: "),
    ("ingest-missing-file", [FARM, "ingest", "/nonexistent.jsonl", "--db", "{good}"], {}, 2,
     "cannot read /nonexistent.jsonl", "error: "),
    ("ingest-garbage-lines", [FARM, "ingest", "{garbage}", "--db", "{good}"], {}, 2,
     "garbage.jsonl", "error: "),
    ("ingest-garbage-into-no-history", [FARM, "ingest", "{garbage}", "--db", "{fresh}"], {}, 2,
     "garbage.jsonl", "error: "),
    ("ingest-outcome-not-a-word", [FARM, "ingest", "{outcome_7}", "--db", "{good}"], {}, 2,
     "line 2 (suites/test_parity.py::test_m8[gate_up-bfloat16]): outcome 7 is not one of",
     "error: "),
    ("ingest-null-nodeid", [FARM, "ingest", "{null_nodeid}", "--db", "{good}"], {}, 2,
     "line 2: nodeid must be a non-empty string, not None", "error: "),
    ("ingest-list-message", [FARM, "ingest", "{list_message}", "--db", "{good}"], {}, 2,
     "message must be a string, not list", "error: "),
    ("ingest-string-value", [FARM, "ingest", "{string_value}", "--db", "{good}"], {}, 2,
     "measurements[0].value must be a number or null, not '1.5'", "error: "),
    ("ingest-float-shape", [FARM, "ingest", "{float_shape}", "--db", "{good}"], {}, 2,
     "selections[0].M must be an integer, not 8.5", "error: "),
    ("ingest-garbage-mid-file", [FARM, "ingest", "{middle_garbage}", "--db", "{good}"], {}, 2,
     "line 2: not JSON", "error: "),
    # the suites under plain pytest: pytest's usage error, one ERROR line
    ("pytest-malformed-expectations", [PY, "-m", "pytest", "suites/test_selection.py",
                                       "--expectations", "{malformed}", "--farm-db",
                                       "{good}"], {}, 4, "malformed.txt:1", "ERROR: "),
    ("pytest-unknown-tag-expectations", [PY, "-m", "pytest", "suites/test_selection.py",
                                         "--expectations", "{unknown_tag}", "--farm-db",
                                         "{good}"], {}, 4, "nosuchtag", "ERROR: "),
    ("pytest-bad-device-arch-env", [PY, "-m", "pytest", "suites/test_selection.py",
                                    "--farm-db", "{good}"],
     {"DFLASH2_DEVICE_ARCH": "garbage"}, 4, "bad device architecture 'garbage'", "ERROR: "),
    ("pytest-bad-device-arch-option", [PY, "-m", "pytest", "suites/test_selection.py",
                                       "--device-arch", "applegpu_g99s", "--farm-db",
                                       "{fresh}"], {}, 4, "bad device architecture",
     "ERROR: "),
    # the kernel benchmark: no command takes a quantization spec; its dtype is the nearest
    ("bench-bad-dtype", [PY, "-m", "kernels.bench.verify_m8", "--dtype", "nope"], {}, 2,
     "unknown dtype 'nope'", "error: "),
]


@pytest.mark.parametrize(("argv", "env", "code", "text", "prefix"),
                         [pytest.param(*c[1:], id=c[0]) for c in CASES])
def test_bad_input_is_one_line_its_exit_code_and_no_history_change(place, argv, env, code,
                                                                   text, prefix):
    d = Path(place["dir"])
    argv = [a.format(**place) for a in argv]
    before, rows = snapshot(d), counts(place["good"])
    full_env = {k: v for k, v in os.environ.items()
                if k not in ("RAY_ADDRESS", "FARM_DB", "DFLASH2_DEVICE_ARCH")}
    full_env.update(env)
    p = subprocess.run(argv, cwd=REPO, env=full_env, capture_output=True, text=True,
                       timeout=TIMEOUT_S, stdin=subprocess.DEVNULL, check=False)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == code, (argv, p.returncode, p.stdout[-2000:], p.stderr[-2000:])
    assert len(lines) == 1, (argv, p.stderr)
    assert lines[0].startswith(prefix) and text in lines[0], (argv, lines[0])
    assert "Traceback" not in p.stdout + p.stderr
    assert "embedded fleet" not in p.stdout + p.stderr  # failed before starting any Ray
    assert snapshot(d) == before, "a bad input changed or created a history file"
    assert counts(place["good"]) == rows
    assert not Path(place["fresh"]).exists(), "a bad input created a history"


def test_the_battery_covers_at_least_twenty_bad_inputs():
    assert len(CASES) >= 20 and len({c[0] for c in CASES}) == len(CASES)


def test_a_damaged_history_still_answers_reads_with_a_warning(place):
    """What is readable is answered, under a warning; a read that meets the damaged page is one
    error line, exit 2, never a traceback."""
    def farm(*argv):
        return subprocess.run([FARM, *argv, "--db", place["damaged"]], cwd=REPO,
                              capture_output=True, text=True, timeout=TIMEOUT_S, check=False)

    ok = farm("query", "SELECT id AS run_id FROM runs")
    assert ok.returncode == 0 and "run_id" in ok.stdout
    (line,) = ok.stderr.strip().splitlines()
    assert line.startswith("warning: the history at") and "is damaged" in line
    bad = farm("runs")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr, bad.stderr[-2000:]
    warning, error = bad.stderr.strip().splitlines()
    assert warning.startswith("warning: ") and error.startswith(
        "error: the history could not be read (database disk image is malformed)")
    good = subprocess.run([FARM, "runs", "--db", place["good"]], cwd=REPO, capture_output=True,
                          text=True, timeout=TIMEOUT_S, check=False)
    assert good.returncode == 0 and good.stderr == ""
