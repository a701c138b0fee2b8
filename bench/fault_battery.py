"""Count (and with --run, run) the fault and bad-input battery: every case is a pytest test in
tests/, so this script only collects them, prints a table per file and writes JSON.

    python bench/fault_battery.py [--run] [--out bench/results/fault_battery.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BATTERY = {
    "tests/test_bad_inputs.py": "bad inputs: one line, its exit code, history untouched",
    "tests/test_fault_battery.py": "faults on a loopback cluster (driver SIGKILL, concurrency)",
    "tests/test_farm_abort.py": "SIGINT/SIGTERM at any moment: aborted, no Ray process left",
    "tests/test_undecodable_output.py": "undecodable bytes in test output: stored escaped",
    "tests/test_driver_lease.py": "a SIGKILLed driver's run aborted by the next command",
    "tests/test_tempdirs.py": "temp dirs of killed jobs removed",
    "tests/test_internal_error.py": "a bug in the farm: exit 70, one line",
}


def collect() -> list[str]:
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                          "-p", "no:randomly", *BATTERY], cwd=REPO, capture_output=True,
                         text=True, check=True, timeout=300)
    return [ln for ln in out.stdout.splitlines() if "::" in ln]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", action="store_true", help="also run the battery (minutes)")
    ap.add_argument("--out", type=Path, default=REPO / "bench/results/fault_battery.json")
    args = ap.parse_args()
    cases = collect()
    per_file = Counter(c.split("::")[0] for c in cases)
    print(f"{'file':36} {'cases':>5}  what")
    for f, what in BATTERY.items():
        print(f"{f:36} {per_file[f]:>5}  {what}")
    print(f"{'total':36} {len(cases):>5}")
    result: dict = {"cases": len(cases), "per_file": dict(per_file), "ids": cases}
    if args.run:
        t0 = time.monotonic()
        p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "-p",
                            "no:randomly", *BATTERY], cwd=REPO, capture_output=True, text=True,
                           check=False)
        result.update(run_exit=p.returncode, run_s=round(time.monotonic() - t0, 1),
                      run_summary=p.stdout.strip().splitlines()[-1])
        print(result["run_summary"])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
