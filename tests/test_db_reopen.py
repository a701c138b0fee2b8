"""A second open of the history in the same process must not break the first (WAL locks)."""

import subprocess
import sys
from pathlib import Path

from db import open_history

DEVICE = {"arch": "applegpu_g13s", "generation": 13, "size": "s", "chip": "x",
          "backend": "cpu", "mlx_version": "1", "emulated": True}


def _result(node):
    return {"type": "result", "nodeid": node, "outcome": "passed", "duration": 0.1,
            "measurements": [], "selections": [], "fingerprints": []}


def test_second_open_and_another_process_keep_the_writer_working(tmp_path):
    path = tmp_path / "h.db"
    h = open_history(str(path))
    rid = h.start_run("s", "g13s", None)
    jid = h.add_job(rid, DEVICE, "host", "os", None)
    h.ingest_events(jid, [_result("t.py::a")])
    reader = open_history(str(path), write=False)
    farm = Path(sys.executable).with_name("farm")
    show = subprocess.run([str(farm), "show", "latest", "--db", str(path)], capture_output=True,
                          text=True, timeout=60, check=False)
    assert show.returncode == 0, show.stderr
    h.ingest_events(jid, [_result("t.py::b")])  # the writer still works
    h.finish_job(jid, "passed")
    h.finish_run(rid, "passed")
    reader.close()
    h.close()
    check = open_history(str(path), write=False)
    from db.queries import show_run

    shown = show_run(check, rid)
    assert "t.py::b" in str(shown)
