import json
import subprocess
import sys


def _bench(*args):
    return subprocess.run([sys.executable, "-m", "kernels.bench.verify_m8", *args],
                          capture_output=True, text=True, timeout=120, check=False)


def test_microbench_prints_table_and_writes_json(tmp_path):
    out = tmp_path / "b.json"
    r = _bench("--k", "5120", "--n", "17408", "--n-slice", "64", "--warmup", "1",
               "--iterations", "3", "--device-arch", "applegpu_g13s", "--json", str(out))
    assert r.returncode == 0, r.stderr
    assert "N-slice: full K over 64 of 17408" in r.stdout
    assert "M=8/M=4 rows/s" in r.stdout
    res = json.loads(out.read_text())
    assert res["paths"]["m8"]["variant"] == "scalar_kmajor"
    assert res["paths"]["m4"]["variant"] == "verify_m4"
    assert res["paths"]["stock"]["rows_per_s"] > 0


def test_microbench_single_variant_and_bad_input():
    r = _bench("--k", "512", "--n", "256", "--variant", "verify_m16", "--warmup", "0",
               "--iterations", "1", "--device-arch", "applegpu_g14g")
    assert r.returncode == 0 and "verify_m16" in r.stdout
    # verify_m16's two K groups cannot tile K=256: one line, no traceback, exit 2.
    untiled = _bench("--k", "256", "--n", "256", "--variant", "verify_m16", "--warmup", "0",
                     "--iterations", "1", "--device-arch", "applegpu_g14g")
    assert untiled.returncode == 2 and "K=256 is not a multiple of 256*k_groups=512" in \
        untiled.stderr and "Traceback" not in untiled.stderr
    bad = _bench("--variant", "nope", "--iterations", "1")
    assert bad.returncode == 2 and bad.stderr.startswith("error: unknown variant")
    assert "Traceback" not in bad.stderr
