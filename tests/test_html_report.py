"""`farm report --html`: a history built from the real suites, rendered in headless Chromium.

The history is three runs on two emulated devices, each run the JSONL of two real pytest
sessions (`suites/` gate/up bounds, accuracy and bench) recorded with `farm ingest`. The last run
uses an expectations file that makes one result stale and one skipped, and benchmarks with zero
iterations on g14g so the bench fails (one expected, one not): every category but `crashed`
appears, and `new_failure` flags come with evidence. Chromium's dumped DOM is then searched for
the matrix, the flags and the plots with their points, so the page is checked as a browser
builds it, not as a string.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import pytest

from farm.report.svg_plot import Series, line_plot, nice_ticks

ROOT = Path(__file__).resolve().parents[1]
FARM = Path(sys.executable).with_name("farm")
CHROMIUM = Path("/usr/bin/chromium")
SUITE = ["suites/test_numeric_bounds.py", "suites/test_bench.py", "-k", "gate_up"]
DEVICES = ("applegpu_g13s", "applegpu_g14g")
EXPECTATIONS = """\
# tags: [ applegpu_g13s applegpu_g14g ]
# tags: [ emulated real ]

# Written for the report test: this one passes, so the expectation is stale.
issues/99 [ applegpu_g13s ] suites/test_numeric_bounds.py::test_accuracy[m8-gate_up-bfloat16] [ Failure ]

issues/98 [ applegpu_g13s ] suites/test_numeric_bounds.py::test_bound[m4-gate_up-float16] [ Skip ]

# Zero bench iterations fail the bench: this parametrization is expected to.
issues/97 [ applegpu_g14g ] suites/test_bench.py::test_verify_microbench[float16-gate_up] [ Failure ]
"""


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DFLASH2_DEVICE_ARCH", "FARM_DB")}
    env.update(extra)
    return env


def _session(arch: str, out: Path, iterations: int, expectations: Path | None
             ) -> subprocess.Popen:
    args = [sys.executable, "-m", "pytest", *SUITE, "-q", "-p", "no:cacheprovider",
            "--device-arch", arch, "--results-jsonl", str(out)]
    if expectations is not None:
        args += ["--expectations", str(expectations)]
    return subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env=_env(FARM_BENCH_ITERATIONS=str(iterations)))


def _farm(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(FARM), *args], capture_output=True, text=True, cwd=ROOT, check=False,
                          env=_env(), timeout=120)


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Built once per test session, even under pytest-xdist (its workers share the session's
    base directory and take turns on a lock): the six suite sessions are most of the time."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    tmp = shared / "html-report-history"
    with open(shared / "html-report-history.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (tmp / "done").exists():
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir()
            _build_history(tmp)
            (tmp / "done").touch()
    return tmp / "history.db"


def _build_history(tmp: Path) -> None:
    """Three runs, oldest first; the two devices of a run test side by side."""
    exp = tmp / "expectations.txt"
    exp.write_text(EXPECTATIONS)
    db = tmp / "history.db"
    for k in (1, 2, 3):
        last = k == 3
        parts = [tmp / f"run{k}-{arch}.jsonl" for arch in DEVICES]
        procs = [_session(DEVICES[0], parts[0], 2, exp if last else None),
                 _session(DEVICES[1], parts[1], 0 if last else 2, exp if last else None)]
        for p in procs:
            _, err = p.communicate(timeout=180)
            assert p.returncode in (0, 1), err.decode()[-2000:]
        run_file = tmp / f"run{k}.jsonl"  # one file, two sessions: one run, two jobs
        run_file.write_text("".join(p.read_text() for p in parts))
        res = _farm("ingest", str(run_file), "--suite", "gate-up-report", "--db", str(db))
        assert res.returncode == 0, res.stderr


class Dom(HTMLParser):
    """What the checks need from the rendered DOM: ids, test ids, plot points, flags."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.plots: dict[str, dict] = {}
        self.svg: str | None = None
        self.headers: list[str] = []
        self.cells: list[str] = []
        self.flags: list[str] = []
        self.external: list[str] = []
        self._th = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(a["id"])
        if tag == "svg" and a.get("data-testid") == "plot":
            self.svg = a["id"]
            self.plots[self.svg] = {"kind": a.get("data-kind"), "points": []}
        if self.svg and "point" in (a.get("class") or "").split():
            self.plots[self.svg]["points"].append((a["data-series"], a["data-x"], a["data-y"]))
        if tag == "td" and a.get("data-category"):
            self.cells.append(a["data-category"])
        if tag == "tr" and a.get("class") == "flag":
            self.flags.append(a["data-kind"])
        self._th = tag == "th"
        if tag in ("script", "link", "img", "iframe") or any(
                k in ("src", "href") for k in a):
            self.external.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag == "svg":
            self.svg = None

    def handle_data(self, data: str) -> None:
        if self._th:
            self.headers.append(data.strip())
            self._th = False


def _chromium(*args: str) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run(
            [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
             "--no-first-run", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", "--hide-scrollbars", f"--user-data-dir={profile}", *args],
            capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium"
                    " (install it with .ci/install-chromium.sh)")
def test_report_renders_in_chromium(history: Path, tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    res = _farm("report", "--html", str(page), "--db", str(history))
    assert res.returncode == 0, res.stderr
    text = page.read_text()
    assert "http://" not in text.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "https://" not in text and "<script" not in text

    dumped = _chromium("--dump-dom", page.as_uri())
    assert dumped.returncode == 0, dumped.stderr[-2000:]
    dom = Dom()
    dom.feed(dumped.stdout)
    assert {"matrix", "flags", "jobs", "runs"} <= dom.ids
    assert not dom.external, dom.external
    for arch in DEVICES:
        assert f"{arch} (emulated) @" in " ".join(dom.headers)
    assert {"expected_pass", "unexpected_fail", "unexpected_pass", "skipped"} <= set(dom.cells)
    assert "new_failure" in dom.flags

    kinds = {p["kind"] for p in dom.plots.values()}
    assert kinds == {"ulps", "headroom", "bench"}
    assert all(p["points"] for p in dom.plots.values())
    # M=8 bf16 selects scalar_kmajor on both devices: 3 runs x 2 devices on one plot.
    ulps = dom.plots["ulps-scalar_kmajor-bfloat16-m8-5120x17408"]["points"]
    assert {(s.split(" ")[0], x) for s, x, _ in ulps} == {
        (a, f"#{k}") for a in DEVICES for k in (1, 2, 3)}
    assert all(float(y) >= 0 for _, _, y in ulps)
    assert "headroom-scalar_kmajor-bfloat16-m8-5120x17408" in dom.plots
    # Bench: g14g's last run failed before measuring, so it has two points, g13s three.
    bench = dom.plots["bench-test_verify_microbench-bfloat16-gate_up"]["points"]
    per_device = {a: sum(s.startswith(a) for s, _, _ in bench) for a in DEVICES}
    assert per_device == {"applegpu_g13s": 3, "applegpu_g14g": 2}
    assert all(float(y) > 0 for _, _, y in bench)

    shot = tmp_path / "report.png"
    res = _chromium(f"--screenshot={shot}", "--window-size=1400,2000", page.as_uri())
    assert res.returncode == 0, res.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    if target := os.environ.get("FARM_REPORT_SCREENSHOT"):
        shutil.copyfile(shot, target)


def test_report_errors_are_one_line(history: Path, tmp_path: Path) -> None:
    for args, words in (
        (["report", "no-such-run", "--html", str(tmp_path / "x.html")], "unknown run"),
        (["report", "--html", str(tmp_path / "missing" / "x.html")], "cannot write"),
        (["report", "--html", str(tmp_path)], "cannot write"),
        (["report", "--html", str(tmp_path / "x.html"), "--runs", "0"], "--runs"),
    ):
        res = _farm(*args, "--db", str(history))
        assert res.returncode == 2, (args, res.stderr)
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], lines
    assert not (tmp_path / "x.html").exists()


def test_report_names_a_run_by_prefix(history: Path, tmp_path: Path) -> None:
    runs = _farm("runs", "--json", "--db", str(history))
    oldest = min(json.loads(runs.stdout), key=lambda r: r["started"])["id"]
    page = tmp_path / "first.html"
    res = _farm("report", oldest[:-2], "--html", str(page), "--db", str(history))
    assert res.returncode == 0, res.stderr
    text = page.read_text()
    assert f'<code id="run-id">{oldest}</code>' in text
    assert "nothing to compare" in text  # the first run on each device has no baseline


def test_plot_marks_non_finite_points() -> None:
    s = Series("dev", "#000", {0: 1.0, 1: None, 2: 2.5})
    svg = line_plot("p", "t", ["#1", "#2", "#3"], [s], y_label="ulps", kind="ulps")
    assert svg.count('class="point"') == 2 and svg.count('class="point nonfinite"') == 1
    assert 'data-y="nan"' in svg and svg.startswith("<svg") and svg.endswith("</svg>")
    assert nice_ticks(0, 0.9)[-1] >= 0.9 and nice_ticks(0, 1373.6)[-1] >= 1373.6
