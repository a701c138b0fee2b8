"""docs/FLEET.md's commands, exactly as written, on a loopback cluster: the head, two agents
(emulated here: no Mac), `farm devices` listing both, and a `farm run` of m8-parity on them.
The blocks marked ``<!-- tested: fleet -->`` run in order in one shell environment."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

from ray_cluster import _port_block

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "FLEET.md"


def doc_commands() -> list[str]:
    text = DOC.read_text()
    blocks = re.findall(r"<!-- tested: fleet -->\n```sh\n(.*?)```", text, flags=re.DOTALL)
    return [ln for b in blocks for ln in b.splitlines() if ln.strip()]


def test_the_fleet_doc_commands_build_a_working_fleet(tmp_path):
    head, agent, *rest = doc_commands()
    assert head.startswith("farm head") and agent.startswith("farm agent")
    port = _port_block() + 1000  # clear of the session cluster's block
    env = {k: v for k, v in os.environ.items()
           if k not in ("RAY_ADDRESS", "RAY_AUTH_TOKEN", "FARM_DB")}
    # HOME is a temp dir (the head writes its token there); the emulator's caches stay shared.
    env.setdefault("XDG_CACHE_HOME", str(Path.home() / ".cache"))
    env.update(HOME=str(tmp_path), HEAD_IP="127.0.0.1", MAC_IP="127.0.0.1", PORT=str(port),
               PATH=f"{Path(os.sys.executable).parent}:{env['PATH']}")
    groups: list[int] = []

    def sh(line: str, timeout: float = 180, cwd: Path = tmp_path,
           **extra: str) -> subprocess.CompletedProcess:
        p = subprocess.Popen(["bash", "-c", line], cwd=cwd, env={**env, **extra},
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             start_new_session=True)
        groups.append(p.pid)
        out, _ = p.communicate(timeout=timeout)
        return subprocess.CompletedProcess(line, p.returncode, out, "")

    try:
        r = sh(head)
        assert r.returncode == 0, r.stdout[-3000:]
        # "Copy that file to each Mac": here, beside the agents' working directory.
        shutil.copy(tmp_path / ".ray" / "auth_token", tmp_path / "auth_token")
        env["TOKEN"] = str(tmp_path / "auth_token")
        for i, arch in enumerate(("applegpu_g13s", "applegpu_g14g")):
            r = sh(agent, BASE=str(port + 300 * (i + 1)), EMULATE=f"--emulate {arch}")
            assert r.returncode == 0, r.stdout[-3000:]
        script = "\n".join(rest)
        r = sh(script, timeout=400, cwd=REPO)  # "in the checkout under test"
        assert r.returncode == 0, r.stdout[-4000:]
        assert "applegpu_g13s" in r.stdout and "applegpu_g14g" in r.stdout
        assert (tmp_path / "farm-history.db").exists()  # ~ is HOME, a temp dir here
    finally:
        for g in groups:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(g, signal.SIGKILL)
