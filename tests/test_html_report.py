"""`farm report --html`: what the page says about a run, its charts, and how it is built.

Most tests build a small history through the db library (``db_fixtures``, no Ray) in their own
tmp_path, render it through the real CLI, and read the page back as a DOM: the status shown
beside regressions, one chart section per suite and kind of device over that suite's runs only,
hostile names shown as text, and the templates the package ships being what renders.

The Chromium test uses a history built from the real suites: three runs on two emulated devices, each run the JSONL of two real pytest
sessions (`suites/` gate/up bounds, accuracy and bench) recorded with `farm ingest`. The last run
uses an expectations file that makes one result stale and one skipped, and benchmarks with zero
iterations on g14g so the bench fails (one expected, one not): every category but `crashed`
appears, and `new_failure` flags come with evidence. Chromium's dumped DOM is then searched for
the matrix, the flags and the plots with their points, so the page is checked as a browser
builds it, not as a string.
"""

from __future__ import annotations

import fcntl
import importlib.resources
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from types import SimpleNamespace

import pytest
from db_fixtures import device, meas, record, result, sel
from typer.testing import CliRunner

from db import open_history
from db.queries import show_run
from db.regressions import analyse
from farm.cli import app as cli
from farm.report import html
from farm.report.svg_plot import Series, line_plot, nice_ticks

cli._register()

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


VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
        "track", "wbr"}


@dataclass
class El:
    """An element of the parsed page: enough of a DOM to ask what a browser would show."""

    tag: str
    attrs: dict[str, str | None]
    parent: El | None = None
    children: list = field(default_factory=list)  # El or text

    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def iter(self):
        yield self
        for c in self.children:
            if isinstance(c, El):
                yield from c.iter()

    def find(self, tag: str | None = None, class_: str | None = None, **attrs: str) -> list[El]:
        """Descendants by tag, a class among theirs, and exact ``data_x=...`` attributes."""
        want = {k.replace("_", "-"): v for k, v in attrs.items()}
        return [e for e in self.iter() if e is not self and (tag is None or e.tag == tag)
                and (class_ is None or class_ in (e.attrs.get("class") or "").split())
                and all(e.attrs.get(k) == v for k, v in want.items())]

    def by_id(self, ident: str) -> El:
        found = self.find(id=ident)
        assert len(found) == 1, (ident, len(found))
        return found[0]


class Tree(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = self.cur = El("#document", {})

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        el = El(tag, dict(attrs), self.cur)
        self.cur.children.append(el)
        if tag not in VOID:
            self.cur = el

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.cur.children.append(El(tag, dict(attrs), self.cur))

    def handle_endtag(self, tag: str) -> None:
        node = self.cur
        while node.parent is not None and node.tag != tag:
            node = node.parent
        if node.parent is not None:
            self.cur = node.parent

    def handle_data(self, data: str) -> None:
        self.cur.children.append(data)


def parse(text: str) -> El:
    tree = Tree()
    tree.feed(text)
    tree.close()
    return tree.root


def plots(page: El) -> dict[str, El]:
    return {p.attrs["id"]: p for p in page.find("svg", data_testid="plot")}


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
    dom = parse(dumped.stdout)
    ids = {e.attrs["id"] for e in dom.iter() if e.attrs.get("id")}
    assert {"matrix", "flags", "flag-table", "jobs", "run-status"} <= ids
    external = [e.tag for e in dom.iter() if e.tag in ("script", "link", "img", "iframe")
                or e.attrs.get("src") or (e.attrs.get("href") or "#")[0] != "#"]
    assert not external, external
    headers = " ".join(th.text() for th in dom.find("th"))
    for arch in DEVICES:
        assert f"{arch} (emulated) @" in headers
    cells = {td.attrs["data-category"] for td in dom.find("td") if td.attrs.get("data-category")}
    assert {"expected_pass", "unexpected_fail", "unexpected_pass", "skipped"} <= cells
    assert "new_failure" in {tr.attrs["data-kind"] for tr in dom.find("tr", class_="flag")}
    # The last run failed and regressed: the status says failed and links the regression.
    assert dom.by_id("run-status").attrs["data-status"] == "failed"
    assert "regression" in dom.by_id("run-flags").text()

    # One suite, emulated devices only: one section, every plot over its three runs.
    (section,) = dom.find("section", class_="suite-trends")
    assert (section.attrs["data-suite"], section.attrs["data-devices"]) == (
        "gate-up-report", "emulated")
    found = plots(dom)
    assert {p.attrs["data-kind"] for p in found.values()} == {"ulps", "headroom", "bench"}
    assert all(p.find(class_="point") for p in found.values())
    assert len({p.attrs["data-x-runs"] for p in found.values()}) == 1
    # M=8 bf16 selects scalar_kmajor on both devices: 3 runs x 2 devices on one plot.
    ulps = found["ulps-scalar_kmajor-bfloat16-m8-5120x17408--gate-up-report-emulated"]
    points = [(p.attrs["data-series"], p.attrs["data-x"], p.attrs["data-y"])
              for p in ulps.find(class_="point")]
    assert {(s.split(" ")[0], x) for s, x, _ in points} == {
        (a, f"#{k}") for a in DEVICES for k in (1, 2, 3)}
    assert all(float(y) >= 0 for _, _, y in points)
    assert "headroom-scalar_kmajor-bfloat16-m8-5120x17408--gate-up-report-emulated" in found
    # Bench: g14g's last run failed before measuring, so it has two points, g13s three.
    bench = found["bench-test_verify_microbench-bfloat16-gate_up--gate-up-report-emulated"]
    series = [p.attrs["data-series"] for p in bench.find(class_="point")]
    assert {a: sum(s.startswith(a) for s in series) for a in DEVICES} == {
        "applegpu_g13s": 3, "applegpu_g14g": 2}
    assert all(float(p.attrs["data-y"]) > 0 for p in bench.find(class_="point"))

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
    oldest = min(json.loads(runs.stdout), key=lambda r: r["started"])
    oldest = oldest.get("run_id") or oldest["id"]
    page = tmp_path / "first.html"
    res = _farm("report", oldest[:-2], "--html", str(page), "--db", str(history))
    assert res.returncode == 0, res.stderr
    dom = parse(page.read_text())
    assert dom.by_id("run-id").text() == oldest
    # The first run on each device has nothing to compare with: each says why, not a run.
    with open_history(history, write=False) as h:
        whys = {c.why for c in analyse(h, oldest).comparisons if c.against is None}
    items = dom.find("li", class_="comparison")
    assert whys and len(items) == 2 and all(li.attrs["data-against"] == "" for li in items)
    assert {li.find(class_="why")[0].text() for li in items} == whys


def test_plot_marks_non_finite_points() -> None:
    s = Series("dev", "#000", {0: 1.0, 1: None, 2: 2.5})
    svg = html.render_plot(line_plot("p", "t", ["#1", "#2", "#3"], [s], y_label="ulps",
                                     kind="ulps", x_runs=["r1", "r2", "r3"]))
    (plot,) = parse(svg).find("svg")
    assert len(plot.find("circle", class_="point")) == 2
    (cross,) = plot.find(class_="nonfinite")
    assert (cross.attrs["data-y"], cross.attrs["data-run"]) == ("nan", "r2")
    assert plot.attrs["data-x-runs"] == "r1 r2 r3"
    assert nice_ticks(0, 0.9)[-1] >= 0.9 and nice_ticks(0, 1373.6)[-1] >= 1373.6


# -- small histories through the db library, rendered by the real CLI --------------------------

T0 = 1764680000.0
NODE = "suites/test_parity.py::test_m8[gate_up-bfloat16]"
REAL = device()
EMULATED = device(emulated=True, backend="cpu", chip="emulated on x86_64")


def _ok(ulps: float = 0.5, variant: str = "scalar_kmajor", impl: str | None = None,
        nodeid: str = NODE, **kw) -> dict:
    """A passing result that measured a kernel, so it lands on a plot."""
    s = sel(variant) | ({"impl": impl} if impl else {})
    return result(nodeid, measurements=[meas("deviation_ulps", ulps, unit="ulp")],
                  selections=[s], **kw)


def _report(db: Path, out: Path, *args: str) -> El:
    res = CliRunner().invoke(cli.app, ["report", *args, "--html", str(out), "--db", str(db)],
                             catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return parse(out.read_text(encoding="utf-8"))


def _shown(page: El, run_id: str) -> str:
    """The status a run's row in the trends tables shows (the same in every section)."""
    shown = {tr.find(class_="run-status")[0].attrs["data-status"]
             for tr in page.find("tr", class_="run", data_run=run_id)}
    assert len(shown) == 1, shown
    return shown.pop()


def test_a_run_that_regressed_is_not_shown_as_passed(tmp_path: Path) -> None:
    db = tmp_path / "history.db"
    with open_history(db) as h:
        r1 = record(h, [(REAL, "mac-1", [_ok()])], started=T0)
        # The tests still pass, but the kernel fell back to stock: a regression.
        r2 = record(h, [(REAL, "mac-1", [_ok(variant="stock")])], started=T0 + 100)
        r3 = record(h, [(REAL, "mac-1", [_ok(variant="stock")])], started=T0 + 200)
        found = analyse(h, r2).regressions
        statuses = [show_run(h, r)["run"]["status"] for r in (r1, r2, r3)]
        assert not analyse(h, r3).regressions
    assert statuses == ["passed"] * 3 and found  # what the page must not hide

    page = _report(db, tmp_path / "r2.html", r2)
    status = page.by_id("run-status")
    assert (status.attrs["data-status"], status.text()) == ("regressed", "regressed")
    assert status.attrs["data-recorded"] == "passed"
    link = page.by_id("run-flags")
    n = len(found)
    assert link.attrs["href"] == "#flags"
    assert link.text().startswith(f"{n} regression{'s' if n > 1 else ''}")
    rows = page.by_id("flags").find("tr", class_="flag")
    assert len([r for r in rows if r.attrs["data-severity"] != "note"]) == n
    assert _shown(page, r2) == "regressed" and _shown(page, r1) == "passed"

    # A later clean run is passed, and still shows the earlier run as regressed.
    page = _report(db, tmp_path / "r3.html", r3)
    assert page.by_id("run-status").attrs["data-status"] == "passed"
    assert not page.find(id="run-flags")
    assert [_shown(page, r) for r in (r1, r2, r3)] == ["passed", "regressed", "passed"]


def test_a_run_with_only_notes_stays_passed(tmp_path: Path) -> None:
    db = tmp_path / "history.db"
    with open_history(db) as h:
        record(h, [(REAL, "mac-1", [_ok(impl="portable")])], started=T0)
        # Same kernel, another implementation: a note, not a regression.
        r2 = record(h, [(REAL, "mac-1", [_ok(impl="metal-emulated")])], started=T0 + 100)
        report = analyse(h, r2)
    assert report.flags and not report.regressions
    page = _report(db, tmp_path / "r2.html", r2)
    assert page.by_id("run-status").attrs["data-status"] == "passed"
    n = len(report.flags)
    assert page.by_id("run-flags").text() == f"{n} note{'s' if n > 1 else ''}"
    assert _shown(page, r2) == "passed"


def test_each_suite_gets_its_own_charts_over_its_own_runs(tmp_path: Path) -> None:
    """Two suites interleaved in time, one of them also on an emulated device: a section per
    suite and kind of device, whose every plot spans that suite's runs and nothing else."""
    db = tmp_path / "history.db"
    runs: dict[str, list[str]] = {"m8-parity": [], "numeric-bounds": []}
    with open_history(db) as h:
        for k in range(6):  # the last one starts after the run reported on
            suite = "m8-parity" if k % 2 == 0 else "numeric-bounds"
            jobs = [(REAL, "mac-1", [_ok(0.5 + k)])]
            if suite == "m8-parity":
                jobs.append((EMULATED, "vm-1", [_ok(2.0 + k)]))
            runs[suite].append(record(h, jobs, suite=suite, started=T0 + 10 * k))
    reported = runs["m8-parity"][-1]
    expected = {"m8-parity": runs["m8-parity"], "numeric-bounds": runs["numeric-bounds"][:2]}

    for limit, args in ((3, ()), (2, ("--runs", "2"))):
        page = _report(db, tmp_path / f"r{limit}.html", reported, *args)
        sections = page.find("section", class_="suite-trends")
        assert [(s.attrs["data-suite"], s.attrs["data-devices"]) for s in sections] == [
            ("m8-parity", "real"), ("m8-parity", "emulated"), ("numeric-bounds", "real")]
        for s in sections:
            suite, group = s.attrs["data-suite"], s.attrs["data-devices"]
            want = expected[suite][-limit:]
            assert [tr.attrs["data-run"] for tr in s.find("tr", class_="run")] == want
            current = s.find("tr", class_="current-run")
            assert [tr.attrs["data-run"] for tr in current] == (
                [reported] if suite == "m8-parity" else [])
            charts = s.find("svg", data_testid="plot")
            assert charts, (suite, group)
            for chart in charts:
                assert (chart.attrs["data-suite"], chart.attrs["data-devices"]) == (suite, group)
                assert chart.attrs["data-x-runs"].split() == want
                points = chart.find(class_="point")
                assert {p.attrs["data-run"] for p in points} == set(want)
                assert [p.attrs["data-x"] for p in points] == [f"#{i + 1}"
                                                               for i in range(len(want))]
                # Emulated and real devices never share a chart.
                assert {"(emulated)" in p.attrs["data-series"] for p in points} == {
                    group == "emulated"}


HOSTILE_ID = "suites/test_h.py::test_x<img src=x onerror=alert(1)>"
HOSTILE_NODE = 'suites/test_h.py::test_x[a<b]"><script>alert(1)</script>'
HOSTILE_SUITE = '<i>suite</i> & "quotes"'
HOSTILE_HOST = "mac<b>1</b>"


def test_hostile_names_are_shown_as_text_not_markup(tmp_path: Path) -> None:
    db = tmp_path / "history.db"
    passed = _ok(nodeid=HOSTILE_NODE) | {"test_id": HOSTILE_ID}
    failed = result(HOSTILE_NODE, outcome="failed",
                    message="boom </td><script>alert(2)</script>") | {"test_id": HOSTILE_ID}
    with open_history(db) as h:
        record(h, [(REAL, HOSTILE_HOST, [passed])], suite=HOSTILE_SUITE, started=T0)
        r2 = record(h, [(REAL, HOSTILE_HOST, [failed])], suite=HOSTILE_SUITE, started=T0 + 9)
    out = tmp_path / "r.html"
    page = _report(db, out, r2)
    assert "<script" not in out.read_text()
    assert not {e.tag for e in page.iter()} & {"script", "img", "i", "b"}
    assert page.by_id("run-suite").text() == HOSTILE_SUITE
    assert [td.text() for td in page.by_id("matrix").find("td", class_="test")] == [HOSTILE_ID]
    assert f"applegpu_g13s @{HOSTILE_HOST}" in [th.text() for th in page.find("th")]
    (flag,) = page.by_id("flag-table").find("tr", class_="flag")
    assert flag.find("td", class_="test")[0].text() == HOSTILE_NODE
    assert "boom </td><script>alert(2)</script>" in flag.find("td", class_="evidence")[0].text()
    (section,) = page.find("section", class_="suite-trends")
    assert section.attrs["data-suite"] == HOSTILE_SUITE
    tips = [t.text() for p in section.find(class_="point") for t in p.find("title")]
    assert any(HOSTILE_NODE.split("::")[-1] in tip for tip in tips), tips
    assert all(p.attrs["data-series"] == f"applegpu_g13s @{HOSTILE_HOST}"
               for p in section.find(class_="point"))


def test_the_package_ships_the_templates_that_render(tmp_path: Path) -> None:
    """The templates are package data: importlib.resources finds them where the renderer
    loads them from, a build of the package carries them, and the page comes from them."""
    shipped = importlib.resources.files("farm.report").joinpath("templates")
    names = sorted(p.name for p in shipped.iterdir() if p.name.endswith(".html.j2"))
    assert "report.html.j2" in names
    env = html.environment()
    assert sorted(env.list_templates()) == names
    with importlib.resources.as_file(shipped) as folder:
        for name in names:  # the renderer reads these very files
            assert Path(env.get_template(name).filename).samefile(folder / name)

    tree = tmp_path / "tree"
    tree.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, tree / name)
    shutil.copytree(ROOT / "farm", tree / "farm", ignore=shutil.ignore_patterns("__pycache__"))
    built = subprocess.run([sys.executable, "-c", "import setuptools; setuptools.setup()", "-q",
                            "build_py", "--build-lib", str(tmp_path / "lib")], cwd=tree,
                           capture_output=True, text=True, timeout=120, check=False)
    assert built.returncode == 0, built.stderr[-2000:]
    assert sorted(p.name for p in (tmp_path / "lib/farm/report/templates").iterdir()) == names

    db = tmp_path / "history.db"
    with open_history(db) as h:
        run = record(h, [(REAL, "mac-1", [_ok()])], started=T0)
    text = (tmp_path / "r.html")
    _report(db, text, run)
    generator = next(line for line in shipped.joinpath("report.html.j2").read_text().splitlines()
                     if 'name="generator"' in line)
    assert generator in text.read_text().splitlines()


def test_a_comparison_against_nothing_shows_why(tmp_path: Path, monkeypatch) -> None:
    """Only the fields ``analyse`` promises are read: a flag with no ``against`` and a
    comparison with no run still render, the comparison saying why."""
    db = tmp_path / "history.db"
    with open_history(db) as h:
        run = record(h, [(REAL, "mac-1", [_ok()])], started=T0)
    flag = SimpleNamespace(kind="numeric_drift", severity="medium", device="applegpu_g13s",
                           subject=NODE, evidence="ulps grew")
    why = "no comparable earlier run"
    fake = SimpleNamespace(flags=[flag], regressions=[flag], comparisons=[
        SimpleNamespace(device="applegpu_g13s @mac-1", against=None, why=why)])
    monkeypatch.setattr(html, "analyse", lambda h, run_id, *args, **kw: fake)
    page = _report(db, tmp_path / "r.html", run)
    (item,) = page.find("li", class_="comparison")
    assert item.attrs["data-against"] == "" and item.find(class_="why")[0].text() == why
    (row,) = page.find("tr", class_="flag")
    assert row.find("td")[-1].text() == "within the run"
    assert page.by_id("run-status").attrs["data-status"] == "regressed"
