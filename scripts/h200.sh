#!/usr/bin/env bash
# MLX's CUDA backend on the lent H200, which reaches no package registry and takes at most
# 64 MiB per call. Wheels are never committed: they live in the ignored .whl/ folder.
#
#   scripts/h200.sh fetch          here: download mlx + mlx-cuda-13 (cp312) and split the 86 MB
#                                  wheel into .whl/p1, p2, p3 (30 MiB parts: `split`), the small
#                                  mlx wheel into the last
#   scripts/h200.sh stage          there: copy whatever parts this call carried to /tmp/wheels
#   scripts/h200.sh install        there: check every part of the manifest is staged, join them
#                                  (sha256 checked), install into /tmp/site (PYTHONPATH)
#   scripts/h200.sh ready          there, on the call carrying the last part: stage, install
#                                  (its log: $OUT/install.log), /tmp/h200res with the bulk smoke
#                                  marked done (each plan's sweep checks its bulk tiles against
#                                  their register twins anyway), the card into $OUT/nvidia-smi.txt
#   scripts/h200.sh bench ARGS     there: bench/cuda_verify.py (the honest bench: read ceiling,
#                                  cold and hot weights, eager and compiled, host cost, a chain of
#                                  dependent launches, and with --ncu ncu's time of every row's
#                                  stock and custom launch alone, cold, and of a bare read of
#                                  the row's bytes: give --ncu-timeout 150 since those reads
#                                  came in, untried on a device yet) into /tmp/h200res, copied
#                                  to $OUT; commit $OUT's cuda_verify.{json,md} and
#                                  cuda_verify_ncu_rows.csv under bench/results/h200/. With
#                                  /tmp/h200res/chosen_table.json (the `choose` step) present,
#                                  that table's sm_90 tiles are the ones timed
#   scripts/h200.sh devtests       there: tests/test_cuda_launch_cache.py against the real CUDA
#                                  kernel factory (built once, traced once, nothing cast per
#                                  launch, one trace per weights, nested compile); log in $OUT
#   scripts/h200.sh hostcost       there: scripts/cuda_host_cost.py (where a launch's host time
#                                  goes: stock, kernel called per launch, launch, its replay,
#                                  and the shared replay it replaced)
#   scripts/h200.sh regen          there: scripts/regen_sm90_table.py on the bench's table rows
#                                  (bench --table-rows): the candidate table (sm_90 entries kept
#                                  only where custom beats stock beyond the noise) into $OUT and
#                                  /tmp/h200res, where `suites` picks it up
#   scripts/h200.sh ncu            there: ncu kernel times of stock and custom at M=8, cold
#                                  (bench/cuda_verify_ncu.py), CSV into $OUT/ncu.csv
#   scripts/h200.sh coldsweep ARGS there: bench/cuda_verify_cold_sweep.py, the COLD tiling sweep of
#                                  mma_weights_a (register pipeline and cp.async ring; ring tiles
#                                  checked bit for bit), best tiles at M=1/8/16 beside stock,
#                                  into /tmp/h200res and $OUT
#   scripts/h200.sh ncucold ARGS   there: ncu on stock, the committed tile and the cold sweep's
#                                  best tile at M=8 (duration, DRAM throughput, occupancy, warp
#                                  stall reasons, L2 bytes), CSV into $OUT/ncu_cold.csv and a
#                                  table into $OUT/ncu_cold.md; ARGS go to cuda_verify_ncu.py
#                                  (--points: every tile of the cold sweep, each launch ALONE:
#                                  the batched sweep lets independent launches overlap);
#                                  NCU_LIGHT=1: kernel time and a few metrics only (one pass a
#                                  kernel), NCU_DTYPES: the dtypes (default bfloat16)
#   scripts/h200.sh diagnose       there: what limits the M=8 and M=16 tiles, each launch alone
#                                  under ncu: hot (NCU_CACHE=none), ablated at M=8 and M=16, and
#                                  M=8's again with ncu's sections (stall reasons; ~200 s;
#                                  $OUT/{hot,ablate,ablate16,ablate_sections}/); with
#                                  DIAGNOSE_MORE=1 the balanced and clustered tiles too
#   scripts/h200.sh denorm         there: mma_weights_a's denorm lever: its points checked bit
#                                  for bit (M=8, 16), then timed alone under ncu beside their
#                                  plain selves ($OUT/denorm8, denorm16, denorm_{gate_up,down})
#   scripts/h200.sh readsizes      there: a plain cold read of 12.5 MB to 4 GiB alone under ncu
#                                  (bench/read_sizes_ncu.py): the rate a read of the kernels'
#                                  sizes reaches at all, into $OUT/read_sizes.{csv,md}
#   scripts/h200.sh choose         there: scripts/regen_sm90_table.py --choose-from-ncu: the M=8
#                                  gate_up/down tiles of the table chosen by ncu's time of each
#                                  tile ALONE (ncucold --points), bit-exact tiles only, into
#                                  /tmp/h200res/chosen_table.json (+ tile_choice.json), which
#                                  `bench` and `regen` then use
#   scripts/h200.sh sweep ARGS     there: bench/cuda_verify_sweep.py, the HOT-weight tiling sweep
#                                  and correctness check (ranks tiles; its times overstate speed)
#   scripts/h200.sh suites         there: numeric-bounds, fingerprint and parity suites under
#                                  plain pytest with the candidate sm_90 table the bench emitted:
#                                  fingerprint goldens recorded first, then every suite checked,
#                                  results as JSONL in $OUT (for `farm ingest`); with
#                                  RECORD_GOLDENS=0 the committed goldens and table are checked
#
# One call carries .whl/p1 and runs `stage`, the next .whl/p2 the same, and the last (while the
# machine is warm: it is given back after 30 s idle, so issue each at once) carries .whl/p3 and
# runs `stage && install && ...`.
# How each record in bench/results/h200/ was made (the calls, in order) and the next
# session's plan: bench/results/h200/RUNS.md.
set -euo pipefail
VERSION=0.32.4
WHEELS=${WHEELS:-/tmp/wheels}  # where `stage` puts the parts there and `install` joins them
cmd="${1:-}"
case "$cmd" in
  fetch)
    grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
    mkdir -p .whl
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
      --implementation cp --platform manylinux_2_35_x86_64 --platform manylinux_2_28_x86_64 \
      --platform manylinux_2_17_x86_64 -d .whl "mlx==$VERSION" "mlx-cuda-13==$VERSION"
    bash "$0" split .whl/mlx_cuda_13-*.whl
    mv .whl/mlx-"$VERSION"-*.whl "$(ls -d .whl/p* | tail -n 1)/"
    ls -la .whl/p*
    ;;
  split)
    # WHEEL into .whl/p1, p2, ... of PART_MIB (default 30) each: a call carries 64 MiB in all,
    # the repository's tracked files (~20 MiB and growing) included. Each folder also gets the
    # manifest (the parts' names and sizes, the wheel's sha256), so `install` knows whether all
    # were staged whichever call carried which.
    whl=$2
    base=$(basename "$whl")
    rm -rf .whl/p[0-9]*; mkdir -p .whl
    split -b "${PART_MIB:-30}M" "$whl" ".whl/$base.part-"
    i=0
    for part in .whl/"$base".part-*; do
      i=$((i + 1)); mkdir -p ".whl/p$i"; mv "$part" ".whl/p$i/"
    done
    { sha256sum "$whl" | cut -d' ' -f1
      for d in .whl/p[0-9]*; do stat -c '%n %s' "$d/$base".part-* | sed 's|.*/||'; done
    } > ".whl/$base.parts"
    for d in .whl/p[0-9]*; do cp ".whl/$base.parts" "$d/"; done
    ;;
  stage)
    mkdir -p "$WHEELS"
    for d in .whl/p[0-9]*; do [ -d "$d" ] && cp "$d"/* "$WHEELS"/ 2>/dev/null || true; done
    ls -la "$WHEELS"
    ;;
  install)
    cd "$WHEELS"
    manifest=$(ls mlx_cuda_13-*.whl.parts 2> /dev/null | head -n 1 || true)
    if [ -z "$manifest" ]; then
      echo "install: no CUDA wheel staged (its parts' manifest is missing); stage .whl/p1 first" >&2
      exit 2
    fi
    whl="${manifest%.parts}"
    # every part at its size, or nothing joined (a join of one part once sat there as an invalid
    # wheel and was taken as done by the next call); rejoined whenever the sha256 differs
    missing=$(tail -n +2 "$manifest" | while read -r name size; do
      [ -f "$name" ] && [ "$(stat -c %s "$name")" = "$size" ] || echo "${name##*.part-}"; done)
    if [ -n "$missing" ]; then
      echo "install: part(s) $(echo $missing) of the CUDA wheel not staged; stage every .whl/p* first" >&2
      exit 2
    fi
    want=$(head -n 1 "$manifest")
    if [ ! -f "$whl" ] || [ "$(sha256sum "$whl" | cut -d' ' -f1)" != "$want" ]; then
      tail -n +2 "$manifest" | while read -r name _; do cat "$name"; done > "$whl"
      if [ "$(sha256sum "$whl" | cut -d' ' -f1)" != "$want" ]; then
        echo "install: the joined CUDA wheel's sha256 is not the manifest's" >&2
        exit 2
      fi
    fi
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site "$WHEELS"/mlx-"$VERSION"-*.whl "$PWD/$whl"
    PYTHONPATH=/tmp/site python3 -c "import mlx.core as mx; print(mx.__version__, mx.default_device(), mx.device_info())"
    ;;
  ready)
    bash "$0" stage > /dev/null
    bash "$0" install > "$OUT/install.log" 2>&1 || { tail -5 "$OUT/install.log" >&2; exit 1; }
    mkdir -p /tmp/h200res && touch /tmp/h200res/bulk_ok
    nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv | tee "$OUT/nvidia-smi.txt"
    ;;
  bench)
    shift
    export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
    mkdir -p /tmp/h200res
    status=0
    table=()
    [ -f /tmp/h200res/chosen_table.json ] && table=(--table /tmp/h200res/chosen_table.json)
    # (520 s: on 2026-12-07 470 s ran out in ncu's limits pass, after the rows' times)
    timeout "${BENCH_TIMEOUT:-520}" python3 bench/cuda_verify.py --out /tmp/h200res \
      ${table[@]+"${table[@]}"} "$@" 2>&1 | tee /tmp/h200res/cuda_verify.log || status=$?
    cp -r /tmp/h200res/. "$OUT"/
    exit $status
    ;;
  devtests)
    export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
    timeout "${TEST_TIMEOUT:-180}" python3 -m pytest -p no:cacheprovider -o addopts= -q -rA -s \
      tests/test_cuda_launch_cache.py tests/test_cuda_device_levers.py 2>&1 |
      tee "$OUT/devtests.log" | tail -15
    ;;
  hostcost)
    export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
    timeout "${HOST_TIMEOUT:-120}" python3 scripts/cuda_host_cost.py --out "$OUT/host_cost.json"
    ;;
  regen)
    export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
    table=kernels/selection_table.json
    [ -f /tmp/h200res/chosen_table.json ] && table=/tmp/h200res/chosen_table.json
    python3 scripts/regen_sm90_table.py --results /tmp/h200res/cuda_verify.json \
      --table "$table" --out /tmp/h200res/candidate_table.json \
      2>&1 | tee "$OUT/regen.log"
    cp /tmp/h200res/candidate_table.json "$OUT/"
    ;;
  ncu)
    # Kernel time from the profiler (ncu is at /usr/local/cuda/bin there; nsys is absent):
    # clocks left as they run (--clock-control none), caches flushed before every kernel.
    export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
    NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
    timeout "${NCU_TIMEOUT:-240}" "$NCU" --clock-control none --cache-control all \
      -k 'regex:qmm|qmv|dflash2' --csv --metrics \
      gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,sm__warps_active.avg.pct_of_peak_sustained_active,launch__grid_size,launch__registers_per_thread \
      python3 bench/cuda_verify_ncu.py > "$OUT/ncu.csv" 2> "$OUT/ncu.err" || echo "ncu rc $?"
    grep -c dflash2 "$OUT/ncu.csv" || true
    ;;
  coldsweep)
    shift
    export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
    out="${SWEEP_OUT:-/tmp/h200res}"  # a sweep per M: each its own folder (choose reads all)
    mkdir -p "$out"
    status=0
    # The ring tiles, then the bulk pipeline's, first in processes of their own: if they fault,
    # hang or differ, sweep without them.
    ring=""
    case " $* " in *" --no-ring "*) ;; *)
      timeout 120 python3 bench/cuda_verify_cold_sweep.py --out /tmp/h200res --smoke 2>&1 \
        | tee /tmp/h200res/cuda_verify_cold_sweep_smoke.log \
        || { ring="--no-ring"; touch /tmp/h200res/no_ring; };;  # ncucold reads it too
    esac
    bulk=""  # the bulk smoke runs once a machine: its verdict is kept in /tmp/h200res
    case " $* " in *" --no-bulk "*) ;; *)
      if [ -f /tmp/h200res/no_bulk ]; then
        bulk="--no-bulk"
      elif [ ! -f /tmp/h200res/bulk_ok ]; then
        if timeout 90 python3 bench/cuda_verify_cold_sweep.py --out /tmp/h200res --smoke-bulk \
            2>&1 | tee /tmp/h200res/cuda_verify_cold_sweep_smoke_bulk.log; then
          touch /tmp/h200res/bulk_ok
        else
          bulk="--no-bulk"; touch /tmp/h200res/no_bulk
        fi
      fi;;
    esac
    timeout "${BENCH_TIMEOUT:-420}" python3 bench/cuda_verify_cold_sweep.py --out "$out" \
      $ring $bulk "$@" 2>&1 | tee "$out/cuda_verify_cold_sweep.log" || status=$?
    mkdir -p "$OUT/${out#/tmp/h200res}"
    cp "$out"/cuda_verify_cold_sweep.* "$OUT/${out#/tmp/h200res}"/
    exit $status
    ;;
  ncucold)
    shift
    export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
    NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
    # ComputeWorkloadAnalysis: each pipe's use (ALU against FMA/FP16 and the tensor pipe): by
    # the static counts a weight word's nibbles cost ~8.5 ALU instructions (half-rate LOP3, SHF,
    # PRMT) against 4-8 on the FP16 pipe (docs/CUDA.md, "denorm")
    sections="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section ComputeWorkloadAnalysis"
    metrics=dram__bytes_read.sum,lts__t_bytes.sum,sm__warps_active.avg.pct_of_peak_sustained_active
    if [ "${NCU_LIGHT:-0}" = 1 ]; then
      sections=""
      metrics=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,$metrics,launch__registers_per_thread,sm__cycles_active.max,sm__cycles_active.avg,smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum
    fi
    # NCU_CACHE=none: caches left as they are, so a tile's 2nd and later launches (--reps) read
    # weights the 1st left in L2 (hot alone; ncu's dram__bytes_read says how hot) beside the
    # cold 1st: whether memory or the warps' own chain limits a tile
    # shellcheck disable=SC2086
    timeout "${NCU_TIMEOUT:-150}" "$NCU" --clock-control none --cache-control "${NCU_CACHE:-all}" \
      -k 'regex:qmm|qmv|dflash2' --csv $sections --metrics "$metrics" \
      python3 bench/cuda_verify_ncu.py \
      $([ -f /tmp/h200res/cuda_verify_cold_sweep.json ] \
        && echo --cold-sweep /tmp/h200res/cuda_verify_cold_sweep.json) --dtypes "${NCU_DTYPES:-bfloat16}" --reps 1 \
      $([ -f /tmp/h200res/no_bulk ] && echo --no-bulk) \
      $([ -f /tmp/h200res/no_ring ] && echo --no-ring) "$@" > "$OUT/ncu_cold.csv" \
      2> "$OUT/ncu_cold.err" || echo "ncu rc $?"
    python3 bench/cuda_verify_ncu.py --summarize "$OUT/ncu_cold.csv" | tee "$OUT/ncu_cold.md"
    mkdir -p /tmp/h200res  # kept for `choose` in a later call (NCU_TAG: one run a shape)
    cp "$OUT/ncu_cold.csv" "/tmp/h200res/ncu_cold${NCU_TAG:-}.csv"
    ;;
  diagnose|denorm)
    # the measurement recipes, built of the steps here: scripts/h200_recipes.sh
    exec bash "$(dirname "$0")/h200_recipes.sh" "$@"
    ;;
  readsizes)
    # a plain cold read of 12.5 MB to 4 GiB, alone under ncu: the rate a read of the kernels'
    # sizes can reach at all (bench/read_sizes_ncu.py)
    export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
    NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
    timeout "${NCU_TIMEOUT:-150}" "$NCU" --clock-control none --cache-control all \
      -k regex:dflash2_read --csv --metrics \
      gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum \
      python3 bench/read_sizes_ncu.py > "$OUT/read_sizes.csv" 2> "$OUT/read_sizes.err" \
      || echo "ncu rc $?"
    python3 bench/read_sizes_ncu.py --summarize "$OUT/read_sizes.csv" | tee "$OUT/read_sizes.md"
    ;;
  sass)
    # Per-instruction warp-stall samples (ncu's SourceCounters) of the shipped tiles, cold:
    # where the warps of a kernel wait, instruction by instruction (SASS), not only in sum.
    # ARGS go to cuda_verify_ncu.py (default: gate/up bf16 at M=8 and 16); the source page
    # of every kernel profiled into $OUT/sass_source.csv, the sections into sass.csv.
    shift
    export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
    NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
    rm -f /tmp/h200res/sass.ncu-rep; mkdir -p /tmp/h200res
    args=("$@")  # quoted: a --tiles JSON is one argument
    [ ${#args[@]} -gt 0 ] || args=(--shapes gate_up --dtypes bfloat16 --ms 8,16)
    timeout "${NCU_TIMEOUT:-150}" "$NCU" --clock-control none --cache-control all \
      -k regex:dflash2 --section SourceCounters --section WarpStateStats \
      --section LaunchStats --section Occupancy --import-source no \
      -o /tmp/h200res/sass python3 bench/cuda_verify_ncu.py --reps 1 \
      "${args[@]}" > "$OUT/sass.log" 2>&1 || echo "ncu rc $?"
    "$NCU" --import /tmp/h200res/sass.ncu-rep --csv > "$OUT/sass.csv" 2>&1 || true
    "$NCU" --import /tmp/h200res/sass.ncu-rep --page source --print-source sass --csv \
      > "$OUT/sass_source.csv" 2> "$OUT/sass_source.err" || true
    command -v cuobjdump > /dev/null && echo "cuobjdump: $(command -v cuobjdump)" >> "$OUT/sass.log"
    ls -la "$OUT" | tail -20
    ;;
  choose)
    export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
    # COLD_SWEEPS: the sweeps' JSONs, comma-separated (one per M swept); NCU_CSVS: ncucold's
    # CSVs, comma-separated (one per call: /tmp/h200res/ncu_cold<NCU_TAG>.csv), default this
    # call's; CHOOSE_TABLE: the table whose gate/up and down tiles are chosen anew (default the
    # committed one)
    python3 scripts/regen_sm90_table.py --choose-from-ncu "${NCU_CSVS:-$OUT/ncu_cold.csv}" \
      --cold-sweep "${COLD_SWEEPS:-/tmp/h200res/cuda_verify_cold_sweep.json}" \
      --table "${CHOOSE_TABLE:-kernels/selection_table.json}" \
      --out /tmp/h200res/chosen_table.json --choice-out /tmp/h200res/tile_choice.json \
      2>&1 | tee "$OUT/choose.log"
    cp "$OUT/ncu_cold.csv" "$OUT/ncu_cold.md" /tmp/h200res/ 2>/dev/null || true
    cp /tmp/h200res/ncu_cold*.csv "$OUT/" 2>/dev/null || true
    ;;
  sweep)
    shift
    export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
    mkdir -p /tmp/h200res
    # A fresh machine continues from the committed sweep (a sweep spans calls and machines).
    [ -f /tmp/h200res/cuda_verify_sweep.json ] || \
      cp bench/results/h200/cuda_verify.json /tmp/h200res/cuda_verify_sweep.json
    status=0
    timeout "${BENCH_TIMEOUT:-480}" python3 bench/cuda_verify_sweep.py --out /tmp/h200res "$@" \
      || status=$?
    cp -r /tmp/h200res/. "$OUT"/
    exit $status
    ;;
  suites)
    export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
    table=/tmp/h200res/candidate_table.json
    [ -f "$table" ] && export DFLASH2_SELECTION_TABLE=$table
    run() { python3 -m pytest -p suites.plugin -p no:cacheprovider -o addopts= -q "$@"; }
    if [ "${RECORD_GOLDENS:-1}" = 1 ]; then  # RECORD_GOLDENS=0: check the committed goldens
      FARM_UPDATE_GOLDENS=1 run suites/test_fingerprint.py > "$OUT/goldens.log" 2>&1 || true
      cp suites/fingerprints.json "$OUT/fingerprints.json"
    fi
    # test_selection compares the committed table with the committed expectations; with a
    # candidate table loaded it is run here only for the record, and checked again in CI.
    run suites/test_numeric_bounds.py suites/test_fingerprint.py suites/test_parity.py \
      suites/test_selection.py --results-jsonl "$OUT/h200_suites.jsonl" 2>&1 | tee "$OUT/suites.log" | tail -40
    ;;
  *)
    echo "usage: scripts/h200.sh fetch|stage|install|ready|bench|devtests|hostcost|regen|ncu|ncucold|diagnose|denorm|coldsweep|readsizes|sass|choose|sweep|suites" >&2
    exit 2
    ;;
esac
