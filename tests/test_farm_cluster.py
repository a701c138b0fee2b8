"""The farm on a real multi-node Ray cluster on loopback (tests/ray_cluster.py): placement,
faults, shipping. Every test drives the `farm` CLI in a subprocess, as a user would."""

from __future__ import annotations

import json
import secrets
import shutil
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest
from ray_cluster import ARCHES, FARM, REPO, FarmCluster, running_cluster, said

pytestmark = pytest.mark.xdist_group("farm_ray_cluster")

FIX = "tests/farm_fixtures"


@pytest.fixture(scope="session")
def farm_cluster():
    yield from running_cluster()


def _results(job: dict) -> dict[str, dict]:
    return {r["nodeid"].rpartition("::")[2]: r for r in job["results"]}


def test_devices_lists_every_agent_with_its_labels_and_health(farm_cluster: FarmCluster):
    out = farm_cluster.farm("devices", "--address", farm_cluster.address, "--json")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert sorted(r["arch"] for r in rows) == sorted(ARCHES)
    for r in rows:
        assert r["emulated"] is True and r["state"] == "idle"
        assert r["health"] == "ok", r["health_detail"]
        assert r["chip"].startswith("emulated on") and r["mlx_version"]


def test_jobs_run_on_the_device_their_selector_names(farm_cluster: FarmCluster, tmp_path):
    nodes = farm_cluster.node_ids()
    db = tmp_path / "h.db"
    code, run = farm_cluster.run_json("--suite", f"{FIX}/suite_basic.py",
                                      "--devices", "g13s,g15", "--db", str(db))
    assert code == 0, said(run)
    by_arch = {j["device"]["arch"]: j for j in run["jobs"]}
    assert set(by_arch) == {"applegpu_g13s", "applegpu_g15s"}  # g14g matched nothing
    for arch, job in by_arch.items():
        assert job["node_id"] == nodes[arch]
        assert job["status"] == "passed" and job["counts"] == {"expected_pass": 3}
        assert {r["farm_node"] for r in job["results"]} == {nodes[arch]}
    with sqlite3.connect(db) as c:
        assert c.execute("select count(*) from results").fetchone()[0] == 6
        assert c.execute("select status from runs").fetchone()[0] == "passed"


def test_a_test_that_aborts_is_crashed_and_the_rest_still_run(farm_cluster: FarmCluster,
                                                              tmp_path):
    code, run = farm_cluster.run_json("--suite", f"{FIX}/suite_abort.py", "--devices", "g14",
                                      "--db", str(tmp_path / "h.db"))
    assert code == 1, said(run)
    (job,) = run["jobs"]
    res = _results(job)
    assert res["test_aborts"]["outcome"] == "crashed"
    assert "SIGABRT" in res["test_aborts"]["message"]
    assert res["test_before"]["outcome"] == res["test_after"]["outcome"] == "passed"
    assert job["status"] == "failed" and job["counts"]["crashed"] == 1


def test_a_hanging_test_times_out_and_the_rest_still_run(farm_cluster: FarmCluster, tmp_path):
    # the hanging test sleeps far past run_json's subprocess timeout: only the farm's own
    # timeout lets this run end at all (no wall-clock assertion on a shared machine)
    code, run = farm_cluster.run_json("--suite", f"{FIX}/suite_hang.py", "--devices", "g13s",
                                      "--test-timeout", "1", "--db", str(tmp_path / "h.db"))
    assert code == 1, said(run)
    res = _results(run["jobs"][0])
    assert res["test_hangs"]["outcome"] == "timeout"
    assert res["test_after"]["outcome"] == "passed"


def test_a_selector_with_no_device_fails_fast_listing_the_live_ones(farm_cluster: FarmCluster,
                                                                    tmp_path):
    db = tmp_path / "h.db"
    out = farm_cluster.farm("run", "--address", farm_cluster.address, "--suite",
                            f"{FIX}/suite_basic.py", "--devices", "g13s,g16", "--db", str(db))
    assert out.returncode == 3
    # fast = refused before any run, health check or job: nothing was recorded
    with sqlite3.connect(db) as c:
        assert c.execute("select count(*) from runs").fetchone()[0] == 0
    err = out.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: no live device matches 'g16'")
    for arch in ARCHES:
        assert arch in err[0]


def _copy_checkout(dest: Path) -> Path:
    files = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z", "-co",
                            "--exclude-standard"], capture_output=True, text=True,
                           check=True).stdout.split("\0")
    for rel in filter(None, files):
        if (REPO / rel).is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, dest / rel)
    return dest


def test_the_device_runs_the_drivers_tree_not_its_own(farm_cluster: FarmCluster, tmp_path):
    tree = _copy_checkout(tmp_path / "checkout")
    marker = f"changed-{secrets.token_hex(4)}"
    (tree / FIX / "shipped_value.txt").write_text(marker + "\n")
    code, run = farm_cluster.run_json("--suite", f"{FIX}/suite_shipped.py", "--devices", "g15s",
                                      "--db", str(tmp_path / "h.db"), cwd=tree)
    # the copy's value differs from the one the test expects (a job error would be exit 3)
    assert code == 1, said(run)
    (res,) = run["jobs"][0]["results"]
    assert res["outcome"] == "failed" and marker in res["message"]
    assert run["revision"]["root"] == str(tree.resolve())
    code, run = farm_cluster.run_json("--suite", f"{FIX}/suite_shipped.py", "--devices", "g15s",
                                      "--db", str(tmp_path / "h.db"))
    assert code == 0 and run["jobs"][0]["results"][0]["outcome"] == "passed", said(run)


def test_each_node_of_a_host_unpacks_the_run_into_a_directory_of_its_own(
        farm_cluster: FarmCluster, tmp_path):
    """Nodes of one host share Ray's session dir; a node unpacking the run's tree (which Ray does
    by deleting and unzipping again) in a directory another node's jobs run in made them lose
    files mid-job (`farm.fleet.node_dirs`)."""
    code, run = farm_cluster.run_json("--suite", f"{FIX}/suite_shipped.py", "--devices",
                                      ",".join(ARCHES), "--db", str(tmp_path / "h.db"))
    assert code == 0, said(run)
    session = farm_cluster.temp_dir / "session_latest"
    pkgs = [p for p in session.glob("runtime_resources/**/working_dir_files/_ray_pkg_*")
            if p.is_dir()]
    newest = max(pkgs, key=lambda p: p.stat().st_mtime).name  # this run's
    homes = sorted(p.parent.parent.name for p in pkgs if p.name == newest)
    assert len(homes) >= len(ARCHES), homes  # one per device node that ran a job
    assert len(set(homes)) == len(homes) and all(h.startswith("node") for h in homes), homes


@pytest.fixture
def victim(farm_cluster: FarmCluster):
    """A function-scoped extra node whose kill-fixture test kills its own raylet. Torn down
    only once the head counts it dead (heartbeats missed): a dead node still counted alive
    is one more device of its arch for the next test's run, quarantined there."""
    started: list[tuple[str, set[str]]] = []

    def add(arch: str, kill: str = "1") -> str:
        name = f"victim-{arch}-{secrets.token_hex(2)}"
        before = farm_cluster.live_node_ids()
        farm_cluster.add_agent(name, arch, FARM_FIXTURE_KILL_NODE=kill)
        started.append((name, farm_cluster.live_node_ids() - before))
        return name

    yield add
    for name, ids in started:
        farm_cluster.kill(name)
        deadline = time.monotonic() + 90
        while ids & farm_cluster.live_node_ids() and time.monotonic() < deadline:
            time.sleep(1)


@pytest.mark.parametrize("kill", ["1", "crash"])
def test_a_node_dying_mid_job_moves_the_rest_to_another_same_arch_device(
        farm_cluster: FarmCluster, victim, tmp_path, kill):
    """kill=crash: the running test's interpreter is killed by the node's teardown while the
    Ray worker still lives, which then saw a SIGKILL in a test and streamed it as ``crashed``
    before the driver learnt of the node's death (seen once in a full run, 2026-12-05): the
    test must move with the rest, not stay crashed."""
    session_g13s = farm_cluster.node_ids()["applegpu_g13s"]
    victim("applegpu_g13s", kill)
    code, run = farm_cluster.run_json("--suite", f"{FIX}/suite_slow_kill.py", "--devices",
                                      "g13s", "--every", "--retries", "1",
                                      "--db", str(tmp_path / "h.db"))
    assert code == 0, said(run)
    moved = [j for j in run["jobs"] if j["attempts"] == 2]
    assert len(moved) == 1 and len(run["jobs"]) == 2
    job = moved[0]
    first, second = job["nodes"]
    assert second == session_g13s != first
    res = _results(job)
    assert sorted(res) == ["test_a", "test_b", "test_c_kills_node", "test_d", "test_e"]
    assert res["test_a"]["farm_node"] == res["test_b"]["farm_node"] == first  # kept
    assert res["test_c_kills_node"]["farm_node"] == second
    assert all(r["outcome"] == "passed" for r in res.values())
    with sqlite3.connect(tmp_path / "h.db") as c:
        rows = c.execute("select j.attempts, j.status, count(r.id) from jobs j join results r "
                         "on r.job_id = j.id group by j.id order by j.attempts").fetchall()
    assert rows == [(1, "passed", 5), (2, "passed", 5)]


def test_a_node_dying_with_no_same_arch_device_left_is_lost_keeping_its_results(
        farm_cluster: FarmCluster, victim, tmp_path):
    victim("applegpu_g16g")
    code, run = farm_cluster.run_json("--suite", f"{FIX}/suite_slow_kill.py", "--devices",
                                      "g16", "--db", str(tmp_path / "h.db"))
    assert code == 3, said(run)
    (job,) = run["jobs"]
    assert job["status"] == "lost" and "no other live applegpu_g16g" in job["error"], said(run)
    assert sorted(_results(job)) == ["test_a", "test_b"]
    with sqlite3.connect(tmp_path / "h.db") as c:
        assert c.execute("select status from jobs").fetchone()[0] == "lost"
        assert c.execute("select count(*) from results").fetchone()[0] == 2
        assert c.execute("select status from runs").fetchone()[0] == "incomplete"


def test_a_device_failing_its_health_check_is_quarantined(farm_cluster: FarmCluster,
                                                         tmp_path):
    from farm.fleet.devices import LABEL_ARCH, LABEL_EMULATED, LABEL_GENERATION, LABEL_SIZE

    name = "liar-g17g"
    farm_cluster.add_raw_node(name, {LABEL_ARCH: "applegpu_g17g", LABEL_GENERATION: "17",
                                     LABEL_SIZE: "g", LABEL_EMULATED: "false"})
    try:
        code, run = farm_cluster.run_json("--suite", f"{FIX}/suite_basic.py", "--devices",
                                          "g17,g13s", "--db", str(tmp_path / "h.db"))
    finally:
        farm_cluster.kill(name)
    assert code == 3, said(run)
    jobs = {j["device"]["arch"]: j for j in run["jobs"]}
    assert jobs["applegpu_g13s"]["status"] == "passed", said(run)  # the healthy one still ran
    bad = jobs["applegpu_g17g"]
    assert bad["status"] == "error" and bad["error"].startswith("quarantined: device reports"), \
        said(run)
    assert bad["results"] == []


def test_ctrl_c_aborts_the_run_and_keeps_what_arrived(farm_cluster: FarmCluster, tmp_path):
    db = tmp_path / "h.db"
    proc = subprocess.Popen([*FARM, "run", "--address", farm_cluster.address, "--suite",
                             f"{FIX}/suite_hang.py", "--devices", "g15s", "--test-timeout",
                             "120", "--db", str(db)], cwd=REPO, env=farm_cluster.env(),
                            text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120  # generous: CI shares two cores with other tests
        while time.monotonic() < deadline and not _count(db, "select count(*) from results"):
            time.sleep(0.2)  # test_before has arrived: test_hangs is running now
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert _count(db, "select count(*) from runs where status = 'aborted'") == 1
    assert _count(db, "select count(*) from results") == 1


def _count(db: Path, sql: str) -> int:
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(db) as c:
            return c.execute(sql).fetchone()[0]
    except sqlite3.Error:
        return 0


@pytest.mark.parametrize(("new", "expected"), [
    # an index off by one: the kernel reads past its row (or computes another sum)
    ("xv[m][j] = float(x[m * K + k + j + 1]);",
     ("metal-emulated differs from its portable form", "out-of-bounds read of buffer 'x'")),
    # a name MSL does not have: clang's message reaches the farm's result
    ("xv[m][j] = float(x[m * K + k + jj]);",
     ("does not compile", "use of undeclared identifier 'jj'")),
], ids=["index", "compile"])
def test_a_changed_metal_source_fails_the_farm_run_naming_the_kernel(
        farm_cluster: FarmCluster, tmp_path, new, expected):
    """The emulated g13s runs the Metal source that ships: one change in it (the portable form
    untouched) fails m8-parity, and the failure names the kernel and what went wrong."""
    tree = _copy_checkout(tmp_path / "checkout")
    src = tree / "kernels" / "variants" / "scalar_kmajor.py"
    text = src.read_text()
    old = "xv[m][j] = float(x[m * K + k + j]);"
    assert text.count(old) == 1
    src.write_text(text.replace(old, new))
    code, run = farm_cluster.run_json("--suite", "m8-parity", "--devices", "g13s",
                                      "--db", str(tmp_path / "h.db"), cwd=tree, timeout=600)
    assert code == 1, said(run)
    failed = [r for job in run["jobs"] for r in job["results"]
              if r["outcome"] in ("failed", "error")]
    assert failed, "the changed source passed m8-parity"
    assert any("scalar_kmajor" in r["message"] and any(e in r["message"] for e in expected)
               for r in failed), [r["message"][:300] for r in failed]


def test_the_runs_environment_travels_to_a_real_cluster_and_a_fallback_is_flagged(
        farm_cluster: FarmCluster, tmp_path):
    """The agents were started without DFLASH2_CUSTOM_VERIFIER; the driver's
    DFLASH2_CUSTOM_VERIFIER=0 reaches the device only through the run's runtime_env, is recorded
    with the run, and the wrapper's fall back to stock is a kernel_selection flag naming the
    tuned variant, stock and the cause, for bfloat16 too."""
    db = str(tmp_path / "h.db")
    suite = "suites/test_parity.py::test_wrapper_bit_exact_with_raw_dispatch"
    code, on = farm_cluster.run_json("--suite", suite, "--devices", "g13s", "--db", db)
    assert code == 0, [(r["nodeid"], r["message"][:1500]) for j in on["jobs"] for r in j["results"] if r["outcome"] != "passed"]
    code, off = farm_cluster.run_json("--suite", suite, "--devices", "g13s", "--db", db,
                                      env=farm_cluster.env(DFLASH2_CUSTOM_VERIFIER="0"))
    assert code == 1, said(off)
    (job,) = off["jobs"]
    wrapper = {s["reason"] for r in job["results"] for s in r["selections"]
               if s["role"] == "under_test"}
    assert wrapper == {"fallback:disabled"}, wrapper  # the device saw the variable
    with sqlite3.connect(db) as c:
        ctx = json.loads(c.execute("select context from runs where id = ?",
                                   (off["run_id"],)).fetchone()[0])
    assert ctx["env"] == {"DFLASH2_CUSTOM_VERIFIER": "0"} and ctx["table_hash"]
    out = farm_cluster.farm("regressions", off["run_id"], "--db", db, "--json")
    assert out.returncode == 1, out.stderr
    flags = [f for f in json.loads(out.stdout)["flags"] if f["kind"] == "kernel_selection"]
    bf16 = [f for f in flags if " bf16 " in f["subject"]]
    assert bf16 and all(f["severity"] == "high" and f["current"] == ["stock"]
                        and f["baseline"] != ["stock"] for f in flags), flags
    assert all("DFLASH2_CUSTOM_VERIFIER=0" in f["evidence"] for f in flags)


def test_every_node_of_the_loopback_cluster_listens_on_loopback_only(farm_cluster: FarmCluster):
    """`farm head`/`farm agent --node-ip 127.0.0.1`: Ray would rewrite 127.0.0.1 to the host's
    outward address; every port of the cluster's block must be bound to loopback."""
    lo, hi = farm_cluster.base, farm_cluster.base + 2000
    listening = {a for a in _listening() if lo <= a[1] < hi}
    assert len(listening) >= 10, listening  # the head's and three agents' services
    outside = {a for a in listening if a[0] not in ("127.0.0.1", "::ffff:127.0.0.1")}
    assert outside == set(), outside


def _listening() -> set[tuple[str, int]]:
    """(ip, port) of every listening TCP socket on this host, from /proc/net/tcp{,6}."""
    import ipaddress

    out = set()
    for name, width in (("tcp", 4), ("tcp6", 16)):
        for line in Path(f"/proc/net/{name}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A":  # TCP_LISTEN
                continue
            hexip, hexport = fields[1].split(":")
            raw = bytes.fromhex(hexip)
            # the kernel prints each 32-bit word in host (little-endian) order
            raw = b"".join(raw[i:i + 4][::-1] for i in range(0, width, 4))
            ip = ipaddress.ip_address(raw)
            mapped = getattr(ip, "ipv4_mapped", None)
            out.add((f"::ffff:{mapped}" if mapped else str(ip), int(hexport, 16)))
    return out
