#!/usr/bin/env bash
# The measurement recipes of scripts/h200.sh (there: `bash scripts/h200.sh diagnose|denorm`,
# which runs this): each composes h200.sh's own steps (coldsweep, ncucold) over the tiles
# bench/diagnostic_tiles.py names, one folder of $OUT a part. Kept apart from h200.sh, whose
# steps each do one thing, because they are most of its lines and change with each question
# asked of the kernels (docs/CUDA.md, "What limits ..."); what each part asks is said above it.
set -euo pipefail
H200="$(dirname "$0")/h200.sh"
# the tiles of a diagnose or denorm run by kind, as JSON (bench/diagnostic_tiles.py)
tiles() { python3 bench/diagnostic_tiles.py "$1"; }
case "${1:-}" in
  diagnose)
    # What limits gate/up and down (docs/CUDA.md, "What limits M=8, measured"), each launch
    # alone under ncu, whose light metrics now hold the issue slots' use and the instruction
    # count (~200 s): the table's gate/up tile with the weights its previous launch left in L2
    # beside its cold launch (hot); the table's M=8 and M=16 tiles with a part taken out
    # (ablate, ablate16: the M=16 tiles at M=16; an mma_weights_a tile's math alone also at
    # each denorm mode, fewer instructions for the same loads and mma, and its whole at each
    # mode: whether the math's cut reaches the whole). One folder of $OUT
    # each. DIAGNOSE_MORE=1 adds the runs of 2026-12-05 04:08 UTC that refuted the SMs'
    # balance: the balanced gate/up tiles (bench/sweep_points.BALANCED), and the cluster
    # lever's tiles (CLUSTERED), checked bit for bit against their unclustered twins first in
    # a sweep of their own.
    # DIAGNOSE_PARTS: which of hot, ablate, ablate16, loads, bulk, xcost, sections, sections16 (default
    # hot, ablate, ablate16 and sections)
    export PYTHONPATH=/tmp/site:$PWD
    parts=" ${DIAGNOSE_PARTS:-hot ablate ablate16 sections} "
    for run in hot ablate ablate16; do mkdir -p "$OUT/$run"; done
    [[ $parts != *" hot "* ]] || NCU_LIGHT=1 NCU_CACHE=none NCU_TAG=_hot NCU_DTYPES=bfloat16 \
      OUT=$OUT/hot bash "$H200" ncucold --shapes gate_up --ms 8 --reps 3 || echo "diagnose: hot rc $?"
    [[ $parts != *" ablate "* ]] || NCU_LIGHT=1 NCU_TAG=_ablate NCU_DTYPES=bfloat16 \
      OUT=$OUT/ablate bash "$H200" ncucold --shapes gate_up,down --ms 8 --reps 2 \
      --tiles "$(tiles ablate)" || echo "diagnose: ablate rc $?"
    [[ $parts != *" ablate16 "* ]] || NCU_LIGHT=1 NCU_TAG=_ablate16 NCU_DTYPES=bfloat16 \
      OUT=$OUT/ablate16 bash "$H200" ncucold --shapes gate_up,down --ms 16 --reps 2 \
      --tiles "$(tiles ablate16)" || echo "diagnose: ablate16 rc $?"
    # loads: the load leg alone of tiles with more weight bytes in flight than the shipped one
    # (bench/diagnostic_tiles.LOADS), beside a bare read of the same sizes in the same call
    if [[ $parts == *" loads "* ]]; then
      mkdir -p "$OUT/loads"
      NCU_LIGHT=1 NCU_TAG=_loads NCU_DTYPES=bfloat16 OUT=$OUT/loads bash "$H200" ncucold \
        --shapes gate_up,down --ms 8 --reps 2 --tiles "$(tiles loads)" \
        || echo "diagnose: loads rc $?"
      OUT=$OUT/loads bash "$H200" readsizes > /dev/null || echo "diagnose: loads read rc $?"
    fi
    # the same M=8 launches once more with ncu's sections (occupancy, each pipe's use; several
    # replays a launch), and with its source counters: the warp-stall samples of each
    # instruction (`sass`, as bench/results/h200/sass_shipped_tiles.md had them for the whole
    # kernel; the sections' CSV holds no stall breakdown), summed by opcode: what a warp of the
    # math alone waits on, and on which instruction
    mkdir -p "$OUT/ablate_sections" "$OUT/ablate_sass"
    if [[ $parts == *" sections "* ]]; then
      NCU_TIMEOUT=200 NCU_TAG=_ablate_sections NCU_DTYPES=bfloat16 OUT=$OUT/ablate_sections \
        bash "$H200" ncucold --shapes gate_up,down --ms 8 --reps 1 --tiles "$(tiles ablate)" \
        || echo "diagnose: ablate sections rc $?"
      NCU_TIMEOUT=150 OUT=$OUT/ablate_sass bash "$H200" sass --shapes gate_up,down \
        --dtypes bfloat16 --ms 8 --tiles "$(tiles ablate)" || echo "diagnose: ablate sass rc $?"
      python3 bench/sass_stalls.py "$OUT/ablate_sass/sass_source.csv" \
        > "$OUT/ablate_sass/sass.md" 2>&1 || echo "diagnose: sass_stalls rc $?"
    fi
    # sections16: the M=16 tiles' stall samples, ablated as ablate16 runs them (at M=16 the math
    # alone is the longer leg and denorm moves it 2%: what it waits on is not yet measured)
    if [[ $parts == *" sections16 "* ]]; then
      mkdir -p "$OUT/ablate16_sass"
      NCU_TIMEOUT=150 OUT=$OUT/ablate16_sass bash "$H200" sass --shapes gate_up,down \
        --dtypes bfloat16 --ms 16 --tiles "$(tiles ablate16)" || echo "diagnose: sass16 rc $?"
      python3 bench/sass_stalls.py "$OUT/ablate16_sass/sass_source.csv" \
        > "$OUT/ablate16_sass/sass.md" 2>&1 || echo "diagnose: sass_stalls16 rc $?"
    fi
    # bulk: the packed bulk pipeline's tiles (bench/sweep_points.BULK_TILES), checked bit for
    # bit at denorm 2 against their register twins at M=8 first (CHECK_TIMEOUT, default 200),
    # then each shape's tiles alone under ncu: whole plain and at denorm 2, loads alone (the
    # producer's copies), math alone at denorm 2. Run with ablate: the register tile's legs in
    # the same call are the baseline
    if [[ $parts == *" bulk "* ]]; then
      SWEEP_OUT=/tmp/h200res/bulk8 BENCH_TIMEOUT=${CHECK_TIMEOUT:-200} bash "$H200" coldsweep \
        --check-only --points bulk-denorm --ms 8 --no-ring || echo "diagnose: bulk check rc $?"
      for shape in gate_up down; do
        mkdir -p "$OUT/bulk_$shape"
        NCU_LIGHT=1 NCU_TAG=_bulk_$shape NCU_DTYPES=bfloat16 OUT=$OUT/bulk_$shape bash "$H200" \
          ncucold --shapes $shape --ms 8 --reps 2 --tiles "$(tiles bulk_$shape)" \
          || echo "diagnose: bulk $shape rc $?"
      done
    fi
    # xcost: what the activations' loads cost, each launch alone: the table's mma_weights_a
    # tiles of gate/up and down whose x loads ablate 3/4 take out (register pipeline, bulk
    # without x_early; bf16, M=8 and 16) at both Ms, whole, loads alone, math
    # alone, the whole without x's loads (ablate 3) and the math without them (4). M=16 reads
    # twice M=8's activations from L2 for the same weights: whether that is what it pays for
    if [[ $parts == *" xcost "* ]]; then
      for shape in gate_up down; do
        mkdir -p "$OUT/xcost_$shape"
        NCU_LIGHT=1 NCU_TAG=_xcost_$shape NCU_DTYPES=bfloat16 OUT=$OUT/xcost_$shape bash "$H200" \
          ncucold --shapes $shape --ms 8,16 --reps 2 --tiles "$(tiles xcost_$shape)" \
          || echo "diagnose: xcost $shape rc $?"
      done
    fi
    # each ablated tile's legs in one row: whole, loads alone, math alone at each denorm mode
    # (bench/ablate_legs.py), which is longer and how far the whole is over it
    legs=$(ls "$OUT"/ablate*/ncu_cold.csv "$OUT"/loads/ncu_cold.csv \
      "$OUT"/bulk_*/ncu_cold.csv "$OUT"/xcost_*/ncu_cold.csv 2> /dev/null || true)
    # shellcheck disable=SC2086
    [ -z "$legs" ] || python3 bench/ablate_legs.py $legs --out "$OUT/legs" > /dev/null \
      || echo "diagnose: legs rc $?"
    if [ "${DIAGNOSE_MORE:-0}" = 1 ]; then
      mkdir -p "$OUT/balanced" "$OUT/cluster"
      NCU_LIGHT=1 NCU_TAG=_balanced NCU_DTYPES=bfloat16,float16 OUT=$OUT/balanced \
        bash "$H200" ncucold --shapes gate_up --ms 8 --reps 2 --tiles "$(tiles balanced)" \
        || echo "diagnose: balanced rc $?"
      # clustered launches only with MLX's CUDA graphs off (kernels.cuda's
      # refuse_cluster_under_graphs; bench/results/h100/xshare_0830)
      MLX_USE_CUDA_GRAPHS=0 SWEEP_OUT=/tmp/h200res/cluster BENCH_TIMEOUT=150 bash "$H200" coldsweep \
        --check-only --points cluster --ms 8 --no-ring --no-bulk \
        || echo "diagnose: cluster check rc $?"
      MLX_USE_CUDA_GRAPHS=0 NCU_LIGHT=1 NCU_TAG=_cluster NCU_DTYPES=bfloat16,float16 OUT=$OUT/cluster \
        bash "$H200" ncucold --shapes gate_up,down --ms 8 --reps 2 --tiles "$(tiles cluster)" \
        || echo "diagnose: cluster rc $?"
    fi
    ;;
  denorm)
    # mma_weights_a's denorm lever (bench/sweep_points.DENORMED): every point checked bit for
    # bit against its register twin at M=8 and 16 (the cold sweep's check, no timing), then
    # each shape's denormed tiles alone under ncu beside their plain selves and the committed
    # tile, bf16 and fp16, M=8 and 16 (light metrics; ~300 s in all). One folder of $OUT each.
    # DENORM_PARTS: which of check, gate_up, down (default all three; ~200 + 2 x ~170 s: give
    # a call "check gate_up" and the next "down" when the install shares the first call).
    # CHECK_TIMEOUT: each M's check (the first on a fresh machine compiles every point: at
    # 120 s the H100 of 2026-12-05 10:05 UTC checked 18 of M=8's 30 rows; M=16 then took 66 s)
    export PYTHONPATH=/tmp/site:$PWD
    parts=" ${DENORM_PARTS:-check gate_up down} "
    if [[ $parts == *" check "* ]]; then
      SWEEP_OUT=/tmp/h200res/denorm8 BENCH_TIMEOUT=${CHECK_TIMEOUT:-300} bash "$H200" coldsweep --check-only \
        --points denorm --ms 8 --no-ring --no-bulk || echo "denorm: check M=8 rc $?"
      SWEEP_OUT=/tmp/h200res/denorm16 BENCH_TIMEOUT=${CHECK_TIMEOUT:-200} bash "$H200" coldsweep --check-only \
        --points denorm --point-m 16 --ms 16 --no-ring --no-bulk || echo "denorm: check M=16 rc $?"
    fi
    for shape in gate_up down; do
      [[ $parts == *" $shape "* ]] || continue
      mkdir -p "$OUT/denorm_$shape"
      NCU_LIGHT=1 NCU_TIMEOUT=${NCU_TIMEOUT:-200} NCU_TAG=_denorm_$shape \
        NCU_DTYPES=bfloat16,float16 OUT=$OUT/denorm_$shape bash "$H200" ncucold --shapes $shape \
        --ms 8,16 --reps 2 --tiles "$(tiles denorm_$shape)" || echo "denorm: ncu $shape rc $?"
    done
    ;;
  *)
    echo "usage: scripts/h200_recipes.sh diagnose|denorm (through scripts/h200.sh)" >&2
    exit 2
    ;;
esac
