#!/usr/bin/env bash
# MLX's CUDA backend on the lent H200, which reaches no package registry and takes at most
# 64 MiB per call. Wheels are never committed: they live in the ignored .whl/ folder.
#
#   scripts/h200.sh fetch          here: download mlx + mlx-cuda-13 (cp312) and split the 86 MB
#                                  wheel into .whl/p1 and .whl/p2 (45 MB parts)
#   scripts/h200.sh stage          there: copy whatever parts this call carried to /tmp/wheels
#   scripts/h200.sh install        there: join the parts, install into /tmp/site (PYTHONPATH)
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
# One call carries .whl/p1 and runs `stage`; the next (while the machine is warm: it is given
# back after 30 s idle, so issue it at once) carries .whl/p2 and runs `stage && install && ...`.
# Run 3 (15:26 UTC, now bench/results/h200/previous_run3_*) came from, on a fresh clone:
#   here:  scripts/h200.sh fetch
#   run (carry .whl/p1):  bash scripts/h200.sh stage
#   run (carry .whl/p2):  bash scripts/h200.sh stage && bash scripts/h200.sh install &&
#                         { bash scripts/h200.sh devtests; bash scripts/h200.sh hostcost;
#                           BENCH_TIMEOUT=420 bash scripts/h200.sh bench --table-rows;
#                           bash scripts/h200.sh regen; }
#   run (at once, warm):  RECORD_GOLDENS=0 bash scripts/h200.sh suites
#   here:  copy cuda_verify.{json,md,log}, host_cost.json, devtests.log, h200_suites.jsonl and
#          suites.log into bench/results/h200/; candidate_table.json is the regenerated
#          kernels/selection_table.json (or run scripts/regen_sm90_table.py here on the JSON);
#          farm ingest bench/results/h200/h200_suites.jsonl puts the run in the history
# The first cold tiling sweep (bench/results/h200/previous_cuda_verify_cold_sweep*, previous_ncu_cold.*)
# came from (device time ~500 s in all, the machine's start and idle included):
#   run (carry .whl/p1):  bash scripts/h200.sh stage
#   run (carry .whl/p2):  bash scripts/h200.sh stage && bash scripts/h200.sh install &&
#                         BENCH_TIMEOUT=330 bash scripts/h200.sh coldsweep --points 2026-12-03 \
#                           --budget-s 190; NCU_TIMEOUT=110 bash scripts/h200.sh ncucold
#   run (at once, warm):  BENCH_TIMEOUT=150 bash scripts/h200.sh coldsweep --shapes gate_up \
#                           --dtypes float16 --no-ring --budget-s 60
#   here:  python3 bench/cuda_verify_ncu.py --summarize ncu_cold.csv > ncu_cold.md
# The current bench/results/h200/ files came from two runs on 2026-12-03 (device time 1355 s
# in all, the machines' start, idle and a first bench whose ncu sections timed out included).
# Run A (19:45-19:56 UTC; its bench and suites are superseded by run B's):
#   run (carry .whl/p1):  bash scripts/h200.sh stage
#   run (carry .whl/p2):  bash scripts/h200.sh stage && bash scripts/h200.sh install &&
#                         BENCH_TIMEOUT=200 bash scripts/h200.sh coldsweep --no-ring \
#                           --dtypes bfloat16,float16 --ms 8 --chain --budget-s 130;
#                         NCU_LIGHT=1 NCU_DTYPES=bfloat16,float16 NCU_TIMEOUT=110 \
#                           bash scripts/h200.sh ncucold --points; ...
#   -> cuda_verify_cold_sweep_down.*, ncu_cold.{csv,md} (every tile alone, 1 launch each),
#      choose_run_a.log; the sweep's budget ran out before any gate/up tile, so only down's
#      tiles were checked: here, python3 scripts/regen_sm90_table.py --choose-from-ncu
#      bench/results/h200/ncu_cold.csv --cold-sweep bench/results/h200/cuda_verify_cold_sweep_down.json
#      --choice-out bench/results/h200/tile_choice_down.json (the down M=8 tiles, committed; now
#      previous_tile_choice_down.json)
# Run B (19:58-20:08 UTC), from that commit:
#   run (carry .whl/p1):  bash scripts/h200.sh stage
#   run (carry .whl/p2):  bash scripts/h200.sh stage && bash scripts/h200.sh install &&
#                         BENCH_TIMEOUT=250 bash scripts/h200.sh coldsweep --no-ring \
#                           --shapes gate_up --dtypes bfloat16,float16 --ms 8 --chain --budget-s 190;
#                         NCU_LIGHT=1 NCU_DTYPES=bfloat16,float16 NCU_TIMEOUT=120 \
#                           bash scripts/h200.sh ncucold --points --shapes gate_up --reps 3;
#                         bash scripts/h200.sh choose
#   run (at once, warm):  BENCH_TIMEOUT=320 bash scripts/h200.sh bench --table-rows --ncu \
#                           --ncu-timeout 90; bash scripts/h200.sh regen;
#                         bash scripts/h200.sh suites
#   here:  cuda_verify.{json,md,log}, cuda_verify_ncu_{rows,limits}.csv, h200_suites.jsonl,
#          suites.log, goldens.log, regen_on_device.log, and the gate/up sweep, ncu and choice
#          (*_gate_up.*, tile_choice_gate_up.json, now previous_*) into bench/results/h200/; then
#          python3 scripts/regen_sm90_table.py --results bench/results/h200/cuda_verify.json
#            --table chosen_table.json (the run's, file names in its notes made repo paths)
#          > kernels/selection_table.json = candidate_table.json (regen.log);
#          python -m suites.expected_selections --write; suites/fingerprints.json from the run
#          (down fp16 M=8's golden from run A, the only run whose table selected that tile);
#          run B's h200_suites.jsonl and suites.log are now previous_runB_*
# Suites with the committed table and goldens (20:14 UTC, a fresh machine, ~350 s of device time
# with the start): h200_suites.jsonl and suites.log, 140 passed:
#   run (carry .whl/p1):  bash scripts/h200.sh stage
#   run (carry .whl/p2):  bash scripts/h200.sh stage && bash scripts/h200.sh install &&
#                         RECORD_GOLDENS=0 timeout 250 bash scripts/h200.sh suites
#   here:  farm ingest bench/results/h200/h200_suites.jsonl --db H.db; farm show latest --db H.db
# The current bench/results/h200/ files (2026-12-04; device time ~1330 s in all, three machines'
# starts included; a machine is given back after 30 s idle, so every call follows the last at
# once and anything a later call needs travels in the tree):
#   run (carry .whl/p1):  bash scripts/h200.sh stage
#   run (carry .whl/p2):  bash scripts/h200.sh stage && bash scripts/h200.sh install &&
#                         BENCH_TIMEOUT=230 bash scripts/h200.sh coldsweep --no-ring --point-m 16 \
#                           --ms 16 --chain --budget-s 170;
#                         NCU_LIGHT=1 NCU_DTYPES=bfloat16,float16 NCU_TIMEOUT=150 \
#                           bash scripts/h200.sh ncucold --points --ms 16 --reps 2;
#                         bash scripts/h200.sh choose; bash scripts/h200.sh hostcost
#   -> down's M=16 sweep, ncu and choice (*_m16_down.*), host_cost_first_machine.json; that
#      sweep's budget ran out before any gate/up tile (since fixed: the budget now starts after
#      the copies are made). Its chosen_table.json went back in the tree for the next machine:
#   run (carry .whl/p1), then (carry .whl/p2): stage, install, cp that chosen_table.json to
#      /tmp/h200res/, BENCH_TIMEOUT=250 coldsweep --no-ring --point-m 16 --ms 16 --chain \
#      --shapes gate_up --budget-s 180; ncucold as above with --shapes gate_up; then
#      python3 scripts/regen_sm90_table.py --choose-from-ncu $OUT/ncu_cold.csv --cold-sweep \
#        /tmp/h200res/cuda_verify_cold_sweep.json --table /tmp/h200res/chosen_table.json \
#        --out /tmp/h200res/chosen_table.json; bash scripts/h200.sh hostcost
#   run (at once, warm):  BENCH_TIMEOUT=540 bash scripts/h200.sh bench --table-rows --ncu \
#                           --ncu-timeout 110; bash scripts/h200.sh regen
#   run (at once, warm):  bash scripts/h200.sh suites   (goldens recorded: candidate_*)
#   here: cuda_verify.*, ncu CSVs, the sweeps, choices and logs into bench/results/h200/;
#         python3 scripts/regen_sm90_table.py --results bench/results/h200/cuda_verify.json
#           --table CHOSEN (file names in its notes made repo paths) --out kernels/selection_table.json
#         python -m suites.expected_selections --write; suites/fingerprints.json from the run
#   run (carry .whl/p1), then (carry .whl/p2): stage, install, RECORD_GOLDENS=0 suites on a fresh
#      machine with the committed table and goldens: h200_suites.jsonl, suites.log (140 passed)
# The row-split experiment (16:02 UTC, at commit 290262f, reverted after it; device ~230 s):
#   run (carry .whl/p1), then (carry .whl/p2): stage, install,
#      BENCH_TIMEOUT=200 coldsweep --no-ring --point-m 16 --ms 16 --chain --dtypes bfloat16
#        --budget-s 120; NCU_LIGHT=1 NCU_TIMEOUT=110 ncucold --points --no-ring --ms 16 --reps 2
#   -> bench/results/h200/row_split_experiment_* (docs/CUDA.md, "Over M")
# The levers runs (2026-12-04; device ~880 s in all, two machines' starts included):
#   at ebc2480 (l2_ahead, min_blocks): run (carry .whl/p1) stage; run (carry .whl/p2) stage,
#     install, BENCH_TIMEOUT=230 coldsweep --no-ring --ms 8 --budget-s 170 --reps 5 --batch 64;
#     SWEEP_OUT=/tmp/h200res/m16 BENCH_TIMEOUT=230 coldsweep --no-ring --point-m 16 --ms 16
#     --budget-s 170 --reps 5 --batch 64; then at once NCU_LIGHT=1 NCU_DTYPES=bfloat16,float16
#     NCU_TIMEOUT=420 ncucold --points --no-ring --ms 8,16 --reps 2; COLD_SWEEPS=<both sweeps'
#     JSON> choose  -> bench/results/h200/levers_*
#   at 8ed1b86 (ld_policy): the same with --budget-s 110 / 80 (the M=16 sweep bf16 only),
#     --reps 3 --batch 48 and ncucold --reps 1  -> bench/results/h200/ldpolicy_*
# The current bench/results/h200/ cuda_verify.*, host_cost.json, devtests.log, h200_suites.jsonl
# and suites.log (2026-12-04 17:41-18:02 UTC, the captured-weights launch; two machines, device
# ~780 s with their starts; the 15:25 run's files are previous_run4_*):
#   run (carry .whl/p1) stage; run (carry .whl/p2) stage, install, devtests, hostcost;
#   run (at once, warm) BENCH_TIMEOUT=540 bench --table-rows --ncu --ncu-timeout 110; regen
#   (its candidate table selects what the committed one does: only the notes' figures changed,
#   kernels/selection_table.json took them); then on a fresh machine: run (carry .whl/p1)
#   stage; run (carry .whl/p2) stage, install, RECORD_GOLDENS=0 suites: 140 passed
# The bulk-pipeline runs and the read sizes (2026-12-04 18:52-19:21 UTC; device ~1430 s in all,
# three machines' starts included; records bench/results/h200/bulk_*, read_sizes.*):
#   at 63b15b5: run (carry .whl/p1) stage; run (carry .whl/p2) stage, install,
#     BENCH_TIMEOUT=210 coldsweep --no-ring --ms 8 --budget-s 140 --reps 5 --batch 64;
#     SWEEP_OUT=/tmp/h200res/m16 BENCH_TIMEOUT=200 coldsweep --no-ring --point-m 16 --ms 16
#     --budget-s 130 --reps 5 --batch 64; tar of /tmp/h200res into $OUT  -> bulk_small_*
#   at 91d8058 (fresh machine): stage, then stage, install, BENCH_TIMEOUT=230 coldsweep --no-ring
#     --ms 8 --budget-s 160 --reps 5 --batch 64; NCU_LIGHT=1 NCU_DTYPES=bfloat16,float16
#     NCU_TIMEOUT=200 ncucold --points --no-ring --ms 8 --reps 2; choose  -> bulk_rows_*
#   at bf14742 (fresh machine): the same  -> bulk_packed_cold_sweep.*, bulk_packed_ncu_cold.*
#   at 7267c87 (fresh machine): stage, then stage, install, NCU_TIMEOUT=120 readsizes;
#     BENCH_TIMEOUT=200 coldsweep --no-ring --point-m 16 --ms 16 --budget-s 120 --reps 5
#     --batch 64; NCU_LIGHT=1 NCU_DTYPES=bfloat16,float16 NCU_TIMEOUT=160 ncucold --points
#     --no-ring --ms 16 --reps 1  -> read_sizes.*, bulk_packed_cold_sweep_m16.*,
#     bulk_packed_ncu_cold_m16.md; then at once (warm), cp
#     bench/results/h200/bulk_packed_cold_sweep.json /tmp/h200res/cuda_verify_cold_sweep.json;
#     NCU_DTYPES=bfloat16 NCU_TIMEOUT=240 ncucold --points --no-ring --ms 8 --shapes gate_up,down
#     --reps 1 (all sections)  -> bulk_packed_ncu_cold_sections.*
# The read-only params' host cost (19:28 UTC, tree 4ae69fe, a fresh machine; device ~130 s):
#   run (carry .whl/p1) stage; run (carry .whl/p2) stage, install, TEST_TIMEOUT=150 devtests
#     (now with tests/test_cuda_device_levers.py: prefetch's batches taking turns and fp16's
#     hi_in_place, each bit for bit the plain register pipeline; the sweep's own bit-exact
#     check keeps a failing point out of the table all the same; POINTS' order is the priority);
#   HOST_TIMEOUT=150 hostcost  -> devtests.log (12 passed), host_cost_readonly_params.json
# The one-LOP3 runs (2026-12-04 20:11-20:47 UTC; device ~1660 s in all, four machines' starts
# included; the calls of each machine follow each other at once):
#   at b469165: run (carry .whl/p1) stage; run (carry .whl/p2) stage, install, OUT=$OUT/r sass
#     (it profiled the old hot sweep's tile, since fixed: cuda_verify_ncu's default now launches
#     the table's tile at each M); hostcost  -> sass_before_lop3_k1u1p1.*,
#     host_cost_2026_12_04_2012.json
#   at the one-LOP3 commit (fresh machine): stage, then stage, install, OUT=$OUT/r sass;
#     OUT=$OUT/r NCU_LIGHT=1 NCU_DTYPES=bfloat16,float16 NCU_TIMEOUT=200 ncucold --tiles '[7
#     tiles]' --ms 8,16 --shapes gate_up,down --reps 2  -> sass_shipped_tiles.*, lop3_ncu_cold.*
#   (fresh machine): stage, then stage, install, BENCH_TIMEOUT=515 bench --table-rows --ncu
#     --ncu-timeout 150; regen; then at once rm /tmp/h200res/candidate_table.json;
#     RECORD_GOLDENS=0 timeout 280 suites (the committed table and goldens: 140 passed)
#     -> cuda_verify.*, cuda_verify_ncu_{rows,limits}.csv, regen_on_device.log,
#     candidate_table.json, h200_suites.jsonl, suites.log; here: regen_sm90_table.py on the
#     JSON into kernels/selection_table.json (draft_o dropped), expected_selections --write
#   (fresh machine, the regenerated table committed): stage, then stage, install, timeout 330
#     suites  -> goldens.log, suites/fingerprints.json (one digest added), and the suites cut
#     by the timeout after 101 of 140: h200_suites_new_table_partial.jsonl
# The group-sums run (2026-12-05 02:03-02:33 UTC, tree 055800e; device ~1,540 s with two
# machines' starts; each call followed the last at once, results tarred into one file a call):
#   run (carry .whl/p1) stage; run (carry .whl/p2) stage, install, BENCH_TIMEOUT=260 coldsweep
#     --check-only --ms 8 (247 s: every point bit-exact)  -> group_sums_check_cold_sweep.*
#   run: NCU_LIGHT=1 NCU_DTYPES=bfloat16,float16 NCU_TIMEOUT=380 ncucold --points --ms 8
#     --reps 1; choose (178 s)  -> group_sums_ncu_cold.*, group_sums_choose.log,
#     tile_choice_m8.json, group_sums_chosen_table.json (its notes' CSV name made a repo path)
#   run: BENCH_TIMEOUT=470 bench --table-rows --ncu --ncu-timeout 150; regen (448 s; the ncu
#     sections run was cut by its timeout)  -> cuda_verify.*, cuda_verify_ncu_*.csv,
#     regen_on_device.log, candidate_table_on_device.json
#   (the machine went back idle) run (carry .whl/p1) stage; run (carry .whl/p2) stage, install,
#     cp bench/results/h200/candidate_table.json /tmp/h200res/ (the tree carried it), timeout
#     440 suites (289 s with the install: 139 of 140, test_selection listing the 4 changed rows)
#     -> h200_suites.jsonl, suites.log, goldens.log, suites/fingerprints.json (3 digests added)
#   here: regen_sm90_table.py --results bench/results/h200/cuda_verify.json --table
#     bench/results/h200/group_sums_chosen_table.json --out kernels/selection_table.json
#     (= candidate_table.json); python -m suites.expected_selections --write
# The plan that run followed (the 30 min of device time a session gets; each call follows the
# last at once; ncu took ~1.4 s a profiled launch in the 20:11 runs: 144 in 200 s). First,
# here: python scripts/rehearse_h200_plan.py (the plan's Python with a stand-in kernel, 13 s;
# CI runs it: tests/test_h200_plan_rehearsal.py), and with --emulate (--point-m 8, then 16):
# every point's own kernel body on the CUDA emulator at the real K, checked as the device's
# check-only sweep checks it (~1 min each).
#   run (carry .whl/p1) stage; run (carry .whl/p2) stage, install, BENCH_TIMEOUT=200
#     coldsweep --check-only --ms 8 (every point of the next set, both variants, checked at M=8
#     against its register twin and within 2e-2 of stock, none timed; the emulator has checked
#     the same points' bodies bit for bit, so this is the tensor core's word: ~300 s in all)
#   run: NCU_LIGHT=1 NCU_DTYPES=bfloat16,float16 NCU_TIMEOUT=400 ncucold --points --ms 8
#     --reps 1 (~87 points' launches + stock + the table's tile, 2 dtypes, each alone; if it
#     is cut, run again with NCU_TAG=_down ... --shapes down and choose with
#     NCU_CSVS=/tmp/h200res/ncu_cold.csv,/tmp/h200res/ncu_cold_down.csv); choose (~350 s)
#   run: BENCH_TIMEOUT=515 bench --table-rows --ncu --ncu-timeout 150; regen (~530 s)
#   (fresh machine) stage, then stage, install, timeout 500 suites (goldens recorded where the
#     table's tile changed its sums: a new k_groups or mma_group_sums; ~560 s with the start)
#   That is ~1,740 s of the 1,800. Next in line, with more time: TEST_TIMEOUT=240 devtests
#     (tests/test_cuda_device_levers.py: the levers and mma_group_sums' bound on the tensor
#     core); HOST_TIMEOUT=150 hostcost; the M=16 set (SWEEP_OUT=/tmp/h200res/m16 coldsweep
#     --check-only --point-m 16 --ms 16, ncucold --points --ms 16).
#   here: python3 bench/sass_static.py if POINTS changed (the static counts beside ncu's times)
# The 2026-12-05 04:08-04:37 UTC run (tree 416ae84's code with its results uncommitted; ~1,600
# s of device time: five refused starts cost 91 + 4 x 15 s first). Every call followed the last:
#   run (carry .whl/p1) stage
#   run (carry .whl/p2) stage, install, diagnose (211 s with the install; now also the cluster
#     points: coldsweep --check-only --points cluster, then ncucold --tiles "$(tiles cluster)")
#     -> diagnose.log, diagnose_{hot,ablate,balanced,cluster}_ncu_cold.*, cluster_check_cold_sweep.*
#   run SWEEP_OUT=/tmp/h200res/m16 BENCH_TIMEOUT=340 coldsweep --check-only --point-m 16 --ms 16
#     (336 s) -> group_sums_check_cold_sweep_m16.*
#   run NCU_LIGHT=1 NCU_DTYPES=bfloat16,float16 NCU_TIMEOUT=260 ncucold --points --ms 16 --reps 1
#     --cold-sweep /tmp/h200res/m16/cuda_verify_cold_sweep.json; NCU_CSVS=$OUT/ncu_cold.csv
#     COLD_SWEEPS=/tmp/h200res/m16/cuda_verify_cold_sweep.json choose (161 s)
#     -> group_sums_ncu_cold_m16.*, group_sums_choose_m16.log, tile_choice_m16.json,
#        group_sums_chosen_table_m16.json
#   run cp /tmp/h200res/chosen_table.json /tmp/h200res/candidate_table.json; timeout 330 suites
#     (160 s) -> h200_suites.jsonl, suites.log, goldens.log, suites/fingerprints.json (1 digest
#     added: down fp16 M=16's group sums)
#   run BENCH_TIMEOUT=400 bench --table-rows; regen (218 s; no --ncu, for the time)
#     -> cuda_verify.{json,md,log}, regen_on_device.log, candidate_table_on_device.json
#   run timeout 250 suites with regen's table (vocab tuned; 113 s) -> vocab_candidate_suites.log,
#     vocab_candidate_h200_suites.jsonl: test_vocab_projection states the fallback and failed
#   here: the chosen table with a ``hold`` on the sm_90 vocab entries, then
#     python3 scripts/regen_sm90_table.py --results bench/results/h200/cuda_verify.json
#     (= candidate_table.json); python -m suites.expected_selections --write (1 row)
# The next session's plan (~1,300 s; 2026-12-05's second session got no machine):
#   first, here: python scripts/rehearse_h200_plan.py --points denorm --emulate (every denorm
#     point's body on the CUDA emulator, bit for bit its register twin: ok on 4c23925)
#   run (carry .whl/p1) stage
#   run (carry .whl/p2) stage, install, DENORM_PARTS="check gate_up" denorm (~350 s: the
#     bit-exact check at M=8 and 16, then gate/up's denorm tiles alone under ncu beside their
#     plain selves, both dtypes, M=8 and 16; 96 launches at ~1.4 s)
#   run DENORM_PARTS=down denorm (~170 s); DIAGNOSE_PARTS=sections diagnose (~160 s: the
#     shipped tiles' math alone and loads alone: each pipe's use, and the stall samples of each
#     instruction (sass, sass_stalls.py),
#     the question that decides the next lever; first, in case the machine is lost), then
#     CHOOSE_TABLE=bench/results/h200/candidate_table_on_device.json
#     NCU_CSVS=/tmp/h200res/ncu_cold_denorm_gate_up.csv,/tmp/h200res/ncu_cold_denorm_down.csv
#     COLD_SWEEPS=/tmp/h200res/denorm8/cuda_verify_cold_sweep.json,/tmp/h200res/denorm16/\
#     cuda_verify_cold_sweep.json choose (the denorm tiles against the entries' own; vocab tuned
#     as in the table below); cp /tmp/h200res/chosen_table.json /tmp/h200res/candidate_table.json
#   run timeout 400 suites (the chosen table, vocab tuned: goldens recorded where a tile's sums
#     changed; if they pass, the vocab hold comes out here and the chosen table is committed
#     with expected_selections --write and the goldens)
#   run BENCH_TIMEOUT=500 bench --table-rows --ncu --ncu-timeout 150; regen (the chosen table)
#   with what is left: DIAGNOSE_PARTS="hot ablate ablate16" diagnose; HOST_TIMEOUT=150
#   hostcost. If choose kept every gate/up and down tile (denorm no faster alone), the bench
#   would only repeat the 04:23 run's: run those before it.
# The plan before it (not run: no machine came):
#   the table to try: bench/results/h200/candidate_table_on_device.json (regen's table of the
#     04:23 run, vocab selecting mma_weights_a; it differs from the committed table only there
#     and in its notes); suites/test_parity.py's vocab test now holds a tuned vocab kernel to 2
#     ulps of stock at scale (tests/test_vocab_tuned.py). On the device it goes to
#     /tmp/h200res/candidate_table.json; here the vocab entries' ``hold`` comes out (then
#     regen_sm90_table.py, expected_selections --write, the goldens) only if the suites pass
#   run (carry .whl/p1) stage; run (carry .whl/p2) stage, install, mkdir -p /tmp/h200res, cp
#     bench/results/h200/candidate_table_on_device.json /tmp/h200res/candidate_table.json,
#     timeout 400 suites (vocab's goldens recorded, every suite with vocab tuned; ~300 s)
#   run BENCH_TIMEOUT=500 bench --table-rows --ncu --ncu-timeout 150; regen (~500 s: the
#     one-launch table and the bare reads for the table as it is)
#   run diagnose (~200 s: is the math alone issue-bound, what it waits on, and what M=16's
#     math costs)
#   with what is left: HOST_TIMEOUT=150 hostcost; TEST_TIMEOUT=240 devtests.
#   The 70% goal at M=8 needs a kernel whose math alone is well under 18.6 us (docs/CUDA.md,
#   "What limits M=8, measured"); no tile of the current kernels is expected to reach it.
set -euo pipefail
VERSION=0.32.4
cmd="${1:-}"
case "$cmd" in
  fetch)
    grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
    mkdir -p .whl/p1 .whl/p2
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
      --implementation cp --platform manylinux_2_35_x86_64 --platform manylinux_2_28_x86_64 \
      --platform manylinux_2_17_x86_64 -d .whl "mlx==$VERSION" "mlx-cuda-13==$VERSION"
    cuda_whl=$(ls .whl/mlx_cuda_13-*.whl)
    base=$(basename "$cuda_whl")
    split -b 45M "$cuda_whl" ".whl/$base.part-"
    mv ".whl/$base.part-aa" .whl/p1/
    mv ".whl/$base.part-ab" .whl/p2/
    mv .whl/mlx-"$VERSION"-*.whl .whl/p2/
    ls -la .whl/p1 .whl/p2
    ;;
  stage)
    mkdir -p /tmp/wheels
    for d in .whl/p1 .whl/p2; do [ -d "$d" ] && cp "$d"/* /tmp/wheels/ 2>/dev/null || true; done
    ls -la /tmp/wheels
    ;;
  install)
    cd /tmp/wheels
    part=$(ls mlx_cuda_13-*.whl.part-aa)
    whl="${part%.part-aa}"
    [ -f "$whl" ] || cat "$whl".part-* > "$whl"
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site /tmp/wheels/mlx-"$VERSION"-*.whl "/tmp/wheels/$whl"
    PYTHONPATH=/tmp/site python3 -c "import mlx.core as mx; print(mx.__version__, mx.default_device(), mx.device_info())"
    ;;
  bench)
    shift
    export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
    mkdir -p /tmp/h200res
    status=0
    table=()
    [ -f /tmp/h200res/chosen_table.json ] && table=(--table /tmp/h200res/chosen_table.json)
    timeout "${BENCH_TIMEOUT:-480}" python3 bench/cuda_verify.py --out /tmp/h200res \
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
  diagnose)
    # What limits gate/up and down (docs/CUDA.md, "What limits M=8, measured"), each launch
    # alone under ncu, whose light metrics now hold the issue slots' use and the instruction
    # count (~200 s): the table's gate/up tile with the weights its previous launch left in L2
    # beside its cold launch (hot); the table's M=8 and M=16 tiles with a part taken out
    # (ablate, ablate16: the M=16 tiles at M=16). One folder of $OUT each. DIAGNOSE_MORE=1 adds
    # the runs of 2026-12-05 04:08 UTC that refuted the SMs' balance: the balanced gate/up tiles
    # (bench/sweep_points.BALANCED), and the cluster lever's tiles (CLUSTERED), checked bit for
    # bit against their unclustered twins first in a sweep of their own.
    # DIAGNOSE_PARTS: which of hot, ablate, ablate16, sections (default all four)
    export PYTHONPATH=/tmp/site:$PWD
    tiles() { python3 bench/sweep_points.py tiles "$1"; }
    parts=" ${DIAGNOSE_PARTS:-hot ablate ablate16 sections} "
    for run in hot ablate ablate16; do mkdir -p "$OUT/$run"; done
    [[ $parts != *" hot "* ]] || NCU_LIGHT=1 NCU_CACHE=none NCU_TAG=_hot NCU_DTYPES=bfloat16 \
      OUT=$OUT/hot bash "$0" ncucold --shapes gate_up --ms 8 --reps 3 || echo "diagnose: hot rc $?"
    [[ $parts != *" ablate "* ]] || NCU_LIGHT=1 NCU_TAG=_ablate NCU_DTYPES=bfloat16 \
      OUT=$OUT/ablate bash "$0" ncucold --shapes gate_up,down --ms 8 --reps 2 \
      --tiles "$(tiles ablate)" || echo "diagnose: ablate rc $?"
    [[ $parts != *" ablate16 "* ]] || NCU_LIGHT=1 NCU_TAG=_ablate16 NCU_DTYPES=bfloat16 \
      OUT=$OUT/ablate16 bash "$0" ncucold --shapes gate_up,down --ms 16 --reps 2 \
      --tiles "$(tiles ablate16)" || echo "diagnose: ablate16 rc $?"
    # the same M=8 launches once more with ncu's sections (occupancy, each pipe's use; several
    # replays a launch), and with its source counters: the warp-stall samples of each
    # instruction (`sass`, as bench/results/h200/sass_shipped_tiles.md had them for the whole
    # kernel; the sections' CSV holds no stall breakdown), summed by opcode: what a warp of the
    # math alone waits on, and on which instruction
    mkdir -p "$OUT/ablate_sections" "$OUT/ablate_sass"
    if [[ $parts == *" sections "* ]]; then
      NCU_TIMEOUT=200 NCU_TAG=_ablate_sections NCU_DTYPES=bfloat16 OUT=$OUT/ablate_sections \
        bash "$0" ncucold --shapes gate_up,down --ms 8 --reps 1 --tiles "$(tiles ablate)" \
        || echo "diagnose: ablate sections rc $?"
      NCU_TIMEOUT=150 OUT=$OUT/ablate_sass bash "$0" sass --shapes gate_up,down \
        --dtypes bfloat16 --ms 8 --tiles "$(tiles ablate)" || echo "diagnose: ablate sass rc $?"
      python3 bench/sass_stalls.py "$OUT/ablate_sass/sass_source.csv" \
        > "$OUT/ablate_sass/sass.md" 2>&1 || echo "diagnose: sass_stalls rc $?"
    fi
    if [ "${DIAGNOSE_MORE:-0}" = 1 ]; then
      mkdir -p "$OUT/balanced" "$OUT/cluster"
      NCU_LIGHT=1 NCU_TAG=_balanced NCU_DTYPES=bfloat16,float16 OUT=$OUT/balanced \
        bash "$0" ncucold --shapes gate_up --ms 8 --reps 2 --tiles "$(tiles balanced)" \
        || echo "diagnose: balanced rc $?"
      SWEEP_OUT=/tmp/h200res/cluster BENCH_TIMEOUT=150 bash "$0" coldsweep --check-only \
        --points cluster --ms 8 --no-ring --no-bulk || echo "diagnose: cluster check rc $?"
      NCU_LIGHT=1 NCU_TAG=_cluster NCU_DTYPES=bfloat16,float16 OUT=$OUT/cluster \
        bash "$0" ncucold --shapes gate_up,down --ms 8 --reps 2 --tiles "$(tiles cluster)" \
        || echo "diagnose: cluster rc $?"
    fi
    ;;
  denorm)
    # mma_weights_a's denorm lever (bench/sweep_points.DENORMED): every point checked bit for
    # bit against its register twin at M=8 and 16 (the cold sweep's check, no timing), then
    # each shape's denormed tiles alone under ncu beside their plain selves and the committed
    # tile, bf16 and fp16, M=8 and 16 (light metrics; ~300 s in all). One folder of $OUT each.
    # DENORM_PARTS: which of check, gate_up, down (default all three; ~100 + 2 x ~170 s: give
    # a call "check gate_up" and the next "down" when the install shares the first call)
    export PYTHONPATH=/tmp/site:$PWD
    tiles() { python3 bench/sweep_points.py tiles "$1"; }
    parts=" ${DENORM_PARTS:-check gate_up down} "
    if [[ $parts == *" check "* ]]; then
      SWEEP_OUT=/tmp/h200res/denorm8 BENCH_TIMEOUT=120 bash "$0" coldsweep --check-only \
        --points denorm --ms 8 --no-ring --no-bulk || echo "denorm: check M=8 rc $?"
      SWEEP_OUT=/tmp/h200res/denorm16 BENCH_TIMEOUT=120 bash "$0" coldsweep --check-only \
        --points denorm --point-m 16 --ms 16 --no-ring --no-bulk || echo "denorm: check M=16 rc $?"
    fi
    for shape in gate_up down; do
      [[ $parts == *" $shape "* ]] || continue
      mkdir -p "$OUT/denorm_$shape"
      NCU_LIGHT=1 NCU_TIMEOUT=${NCU_TIMEOUT:-200} NCU_TAG=_denorm_$shape \
        NCU_DTYPES=bfloat16,float16 OUT=$OUT/denorm_$shape bash "$0" ncucold --shapes $shape \
        --ms 8,16 --reps 2 --tiles "$(tiles denorm_$shape)" || echo "denorm: ncu $shape rc $?"
    done
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
    echo "usage: scripts/h200.sh fetch|stage|install|bench|devtests|hostcost|regen|ncu|ncucold|diagnose|denorm|coldsweep|readsizes|sass|choose|sweep|suites" >&2
    exit 2
    ;;
esac
