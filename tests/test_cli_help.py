"""Every command's --help ends with an example of itself; the root app has --version, -q, -v."""

from __future__ import annotations

import json
from importlib.metadata import version

import typer
from test_history_cli import farm, run_main, run_script

from farm.cli import app as cli


def commands(group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = []
    for name, cmd in group.commands.items():
        if hasattr(cmd, "commands"):  # a group (typer may vendor its own click)
            out += commands(cmd, (*prefix, name))
        else:
            out.append((*prefix, name))
    return out


def test_every_command_help_has_an_example_of_that_command():
    cli._register()
    found = commands(typer.main.get_command(cli.app))
    assert {"run", "show", "logs", "suites", ("baseline", "set")} <= {
        c[0] if len(c) == 1 else c for c in found}
    for path in found:
        res = farm(*path, "--help")
        assert res.exit_code == 0, (path, res.output)
        lines = [" ".join(line.split()) for line in res.output.splitlines()]
        examples = [line for line in lines if line.startswith("Example: ")]
        assert examples and examples[0].startswith(f"Example: farm {' '.join(path)}"), (
            path, res.output)
    logs_help = " ".join(farm("logs", "--help").output.split())
    assert "test_m8_vs_stock[gate_up-bfloat16]" in logs_help  # brackets are not markup here


def test_version_quiet_and_verbose(tmp_path, capsys):
    p = run_script("--version")
    assert p.returncode == 0 and p.stdout.strip() == f"farm (dflash2-farm) {version('dflash2-farm')}"
    p = run_main(capsys, "-v", "suites", "--json")
    assert p.returncode == 0 and "collecting: -m pytest --collect-only" in p.stderr, p.stderr
    assert json.loads(p.stdout)[0]["tests"] > 0
    p = run_main(capsys, "-q", "-v", "suites", "--json")  # quiet wins
    assert p.returncode == 0 and p.stderr == "" and json.loads(p.stdout)[0]["tests"] > 0
    p = run_main(capsys, "--verbose", "--verbose", "runs", "--db", str(tmp_path / "no.db"))
    assert p.returncode == 2 and p.stderr.startswith("error: no history at")
