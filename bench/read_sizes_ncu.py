"""How fast a plain cold read runs at the sizes the verify kernels read, for ncu to time.

    ncu --clock-control none --cache-control all -k regex:dflash2_read --csv \\
        --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,\\
dram__bytes_read.sum python bench/read_sizes_ncu.py > read_sizes.csv
    python bench/read_sizes_ncu.py --summarize read_sizes.csv > read_sizes.md

The issue's ceiling is a read over >= 4 GiB; gate/up and down read 50 MB. Whether 50 MB can be
read at that ceiling's rate at all is a property of the device (the ramp up to full bandwidth,
the last SMs' tail), not of the verify kernel, so it is measured the same way the kernels are:
alone under ncu, caches flushed before each launch. Each size is read by the simplest kernel
that streams it: 16-byte loads, four in flight a thread, a grid of 16 blocks an SM, XOR-folded
into one word a thread so nothing is skipped. (The bench's 4 GiB ceiling is ``mx.sum``, timed
by the host clock; this kernel's 4 GiB row is the same figure under ncu.)
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import cuda_verify_ncu as cn
import mlx.core as mx

# MB: gate/up's and down's bytes (50.2), the vocab head's (716), and the ceiling's 4 GiB
SIZES_MB = (12.5, 25.0, 50.2, 100.0, 200.0, 400.0, 716.0, 4294.967296)
REPS = 2
THREADS = 256
BLOCKS_PER_SM, SMS = 16, 132  # the H200's 132 SMs: a grid of 16 blocks each

READ_SOURCE = r"""
  const uint4* p = reinterpret_cast<const uint4*>(a);
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  uint32_t acc = 0;
  for (; i + 3 * stride < N4; i += 4 * stride) {  // four loads in flight before any use
    const uint4 v0 = __ldcs(p + i), v1 = __ldcs(p + i + stride);
    const uint4 v2 = __ldcs(p + i + 2 * stride), v3 = __ldcs(p + i + 3 * stride);
    acc ^= v0.x ^ v0.y ^ v0.z ^ v0.w ^ v1.x ^ v1.y ^ v1.z ^ v1.w;
    acc ^= v2.x ^ v2.y ^ v2.z ^ v2.w ^ v3.x ^ v3.y ^ v3.z ^ v3.w;
  }
  for (; i < N4; i += stride) {
    const uint4 v = __ldcs(p + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  out[(size_t)blockIdx.x * blockDim.x + threadIdx.x] = acc;
"""


def read_kernel():
    return mx.fast.cuda_kernel(name="dflash2_read", input_names=["a"], output_names=["out"],
                               source=READ_SOURCE)


def launch_read(kernel, a: mx.array) -> mx.array:
    n4 = a.size // 4
    blocks = max(1, min(BLOCKS_PER_SM * SMS, -(-n4 // THREADS)))
    (out,) = kernel(inputs=[a], template=[("N4", n4)], grid=(blocks * THREADS, 1, 1),
                    threadgroup=(THREADS, 1, 1), output_shapes=[(blocks * THREADS,)],
                    output_dtypes=[mx.uint32])
    return out


def read_launches(kernel, nbytes: int, reps: int) -> None:
    """``reps`` launches of the bare read over ``nbytes`` (down to whole 16-byte chunks) of
    fresh data; the caller prints their NCU_ORDER label after them."""
    a = mx.random.randint(0, 1 << 30, (nbytes // 16 * 4,), dtype=mx.uint32)
    mx.eval(a)
    for _ in range(reps):
        mx.eval(launch_read(kernel, a))
    del a
    mx.clear_cache()


def run(sizes=SIZES_MB, reps: int = REPS) -> None:
    kernel = read_kernel()
    for mb in sizes:
        read_launches(kernel, int(mb * 1e6), reps)
        print(f"NCU_ORDER read {mb:g} MB x{reps}", flush=True)


def summarize(path: str) -> str:
    """Per size, the median time alone and the rate it implies: what a read of that size can
    reach, beside the 4 GiB figure the issue's ceiling uses."""
    recs = cn.parse(Path(path).read_text())
    times: dict[str, list[float]] = {}
    dram: dict[str, list[float]] = {}
    for k in recs:
        us = cn.duration_us(k)
        if us is not None:
            times.setdefault(k["label"], []).append(us)
        pct = cn.metric(k, "dram__throughput.avg.pct_of_peak_sustained_elapsed")
        if pct is not None:
            dram.setdefault(k["label"], []).append(pct)
    read4g = times.get(f"read {SIZES_MB[-1]:g} MB")
    rate4g = SIZES_MB[-1] / statistics.median(read4g) if read4g else None  # MB/us = TB/s
    out = ["| path | MB | us alone | TB/s | of the 4 GiB read's rate | DRAM % of peak |",
           "|---|---|---|---|---|---|"]
    for label, ts in times.items():
        path, mb = label.split()[0], float(label.split()[1])
        us = statistics.median(ts)
        rate = mb / us
        rel = f"{rate / rate4g:.0%}" if rate4g else "-"
        d = f"{statistics.median(dram[label]):.0f}" if label in dram else "-"
        out.append(f"| {path} | {mb:g} | {us:.1f} | {rate:.2f} | {rel} | {d} |")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--summarize", default=None, metavar="CSV")
    ap.add_argument("--reps", type=int, default=REPS)
    args = ap.parse_args(argv)
    if args.summarize:
        print(summarize(args.summarize))
        return 0
    run(reps=args.reps)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
