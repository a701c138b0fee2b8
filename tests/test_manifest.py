"""The suite manifest: the shipped file names the issue's suites, `all` covers every path, and a
name or a path inside the shipped tree resolves while anything else is one clear error."""

from __future__ import annotations

from pathlib import Path

import pytest

from devices.errors import Dflash2Error
from suites.manifest import ROOT, Suite, load_manifest, resolve_suite

NAMES = ["m8-parity", "numeric-bounds", "fingerprint", "greedy-e2e", "selection", "bench", "all"]


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "manifest.toml"
    path.write_text(text)
    return path


def test_shipped_manifest_names_every_suite() -> None:
    suites = load_manifest()
    assert list(suites) == NAMES
    for suite in suites.values():
        assert suite.description and suite.timeout > 0
        assert all(p.startswith("suites/test_") for p in suite.paths)
        assert all((ROOT / p).is_file() for p in suite.paths), suite.paths
    named = {p for s in suites.values() if s.name != "all" for p in s.paths}
    assert set(suites["all"].paths) == named
    assert suites["m8-parity"].paths == ["suites/test_parity.py"]


def test_pytest_args_apply_paths_markers_and_timeout() -> None:
    assert load_manifest()["m8-parity"].pytest_args() == [
        "suites/test_parity.py", "--timeout", "300"]
    suite = Suite("s", "d", ["a.py", "b.py"], markers="not slow", timeout=2.5)
    assert suite.pytest_args() == ["a.py", "b.py", "-m", "not slow", "--timeout", "2.5"]
    assert suite.to_json() == {"name": "s", "description": "d", "paths": ["a.py", "b.py"],
                               "markers": "not slow", "timeout": 2.5}


def test_resolve_by_name_and_by_path(tmp_path: Path) -> None:
    (tmp_path / "suites").mkdir()
    (tmp_path / "suites" / "test_parity.py").write_text("")
    (tmp_path / "suites" / "test_extra.py").write_text("")
    manifest = load_manifest()
    assert resolve_suite("numeric-bounds", tmp_path, manifest=manifest).name == "numeric-bounds"
    by_path = resolve_suite("suites/test_parity.py::test_x[a]", tmp_path, manifest=manifest)
    assert by_path.paths == ["suites/test_parity.py::test_x[a]"]
    assert by_path.timeout == manifest["m8-parity"].timeout  # the suite that ships the file
    absolute = resolve_suite(str(tmp_path / "suites" / "test_extra.py"), tmp_path,
                             manifest=manifest)
    assert absolute.paths == ["suites/test_extra.py"]
    assert absolute.timeout == manifest["all"].timeout
    assert resolve_suite("suites", tmp_path, manifest=manifest).paths == ["suites"]


@pytest.mark.parametrize(("text", "problem"), [
    ("m8-parityy", "unknown suite 'm8-parityy'"),
    ("suites/test_missing.py", "no such suite or path"),
    ("../outside.py", "outside the shipped tree"),
    ("/etc/hostname", "outside the shipped tree"),
    ("::test_x", "unknown suite"),
])
def test_unknown_suite_is_one_line_naming_known_suites(tmp_path: Path, text: str,
                                                       problem: str) -> None:
    (tmp_path / "outside.py").write_text("")
    root = tmp_path / "root"
    root.mkdir()
    with pytest.raises(Dflash2Error) as err:
        resolve_suite(text, root, manifest=load_manifest())
    message = str(err.value)
    assert problem in message and "\n" not in message
    assert "m8-parity" in message and "greedy-e2e" in message


def test_default_root_is_the_shipped_tree() -> None:
    assert (ROOT / "suites" / "manifest.toml").is_file()
    assert resolve_suite("suites/plugin.py").paths == ["suites/plugin.py"]


@pytest.mark.parametrize(("body", "problem"), [
    ("[suites.x]\npaths = ['a.py']\ntimeout = 1\n", "description must be one non-empty line"),
    ("[suites.x]\ndescription = 'd'\npaths = []\ntimeout = 1\n", "non-empty list"),
    ("[suites.x]\ndescription = 'd'\npaths = ['/abs.py']\ntimeout = 1\n", "must be relative"),
    ("[suites.x]\ndescription = 'd'\npaths = ['../a.py']\ntimeout = 1\n", "must be relative"),
    ("[suites.x]\ndescription = 'd'\npaths = ['a.py']\ntimeout = 0\n", "positive number"),
    ("[suites.x]\ndescription = 'd'\npaths = ['a.py']\n", "positive number"),
    ("[suites.x]\ndescription = 'd'\npaths = ['a.py']\ntimeout = 1\nmarkers = 3\n", "markers"),
    ("[suites.x]\ndescription = 'd'\npaths = ['a.py']\ntimeout = 1\nnope = 1\n", "unknown keys"),
    ("[suites.X_Y]\ndescription = 'd'\npaths = ['a.py']\ntimeout = 1\n", "suite names"),
    ("[other]\n", "no [suites.NAME] tables"),
    ("[suites.x\n", "bad TOML"),
])
def test_malformed_manifest(tmp_path: Path, body: str, problem: str) -> None:
    path = _write(tmp_path, body)
    with pytest.raises(Dflash2Error) as err:
        load_manifest(path)
    assert problem in str(err.value) and str(path) in str(err.value)


def test_minimal_manifest_defaults(tmp_path: Path) -> None:
    suites = load_manifest(_write(tmp_path, "[suites.x]\ndescription = ' one line '\n"
                                            "paths = ['t.py']\ntimeout = 5\n"))
    assert suites == {"x": Suite("x", "one line", ["t.py"], "", 5.0)}
