"""The bulk pipeline of ``mma_weights_a``'s CUDA source (sm_90: BULK, PACKED, LEADER), a
fragment of its kernel body: the ring of STAGES stages in dynamic shared memory, filled with
bulk copies on mbarriers by a producer warp (or, with LEADER, by warp 0's lane 0), and the
computing warps that wait on it, read it back and compute in the register pipeline's order.
Kept apart from ``_mma_weights_a_cuda`` (which splices it in where the body picks its
pipeline) because it is the largest of the three pipelines; it uses that body's lambdas
(``scale_pair``, ``load_x``, ``mma_math``) and lane bases.
"""

from kernels.variants._cuda_common import ABLATE_WORD

BULK_PIPELINE = r"""  if constexpr (BULK) {
    // Warp K_GROUPS is a producer: it fills a ring of STAGES stages (SPS K steps of every K
    // group's rows each) with bulk copies, and the scales and biases of the block's rows once,
    // each completing on an mbarrier; warps 0..K_GROUPS-1 only wait, read shared memory and
    // compute, in the register pipeline's order (so its output bit for bit). A row's PITCH puts
    // two rows 64 bytes apart modulo 128, so a quarter warp's 16-byte reads hit 32 banks.
    constexpr int N_ST = GROUP_STEPS / SPS;
    // ABLATE 2 and 4: no weights copied, the words made up (4: x's words too, by load_x)
    constexpr bool NO_W = ABLATE == 2 || ABLATE == 4;
    constexpr unsigned PAYLOAD = K_GROUPS * COLS * SPS * 64;
    uint64_t* full = reinterpret_cast<uint64_t*>(dsmem);
    uint64_t* empty = full + STAGES;
    uint64_t* sb_full = empty + STAGES;
    uint16_t* sm_s = reinterpret_cast<uint16_t*>(dsmem + 128);
    uint16_t* sm_b = sm_s + COLS * ROW_GROUPS;
    unsigned char* ring = dsmem + 128 + 2 * SB_BYTES;
    // a block's rows of scales (and biases) are contiguous: one copy each
    auto copy_scales = [&]() {
      dflash2_mbar_expect_tx(sb_full, 2 * SB_BYTES);
      dflash2_bulk_g2s(sm_s, s16 + n_base * ROW_GROUPS, SB_BYTES, sb_full);
      dflash2_bulk_g2s(sm_b, b16 + n_base * ROW_GROUPS, SB_BYTES, sb_full);
    };
    // X_EARLY 2: the stage's activations come with it, a copy a K group and row
    constexpr unsigned X_PAYLOAD = X_EARLY == 2 ? K_GROUPS * M_ROWS * SPS * 256 : 0;
    // PACKED: w is [block][stage][K group][row][SPS * 64 B], so a stage is one copy
    auto copy_stage = [&](int st) {
      dflash2_mbar_expect_tx(full + st % STAGES, PAYLOAD + X_PAYLOAD);
      dflash2_bulk_g2s(ring + (st % STAGES) * STAGE_BYTES,
                       w32 + (blockIdx.x * N_ST + st) * (PAYLOAD / 4), PAYLOAD,
                       full + st % STAGES);
    };
    // X_EARLY 2: copies first, first + step, ... of the stage's K_GROUPS x M_ROWS rows of x
    // (row m of K group kg: its SPS K steps, contiguous in x), after its expect_tx
    auto copy_x = [&](int st, int first, int step) {
      unsigned char* xs = ring + (st % STAGES) * STAGE_BYTES + W_STAGE;
      for (int i = first; i < K_GROUPS * M_ROWS; i += step) {
        const int kg = i / M_ROWS, m = i % M_ROWS;
        dflash2_bulk_g2s(xs + i * XP, x + m * K + (kg * GROUP_STEPS + st * SPS) * 128,
                         SPS * 256, full + st % STAGES);
      }
    };
    if (threadIdx.x == 0) {
#pragma unroll
      for (int i = 0; i < STAGES; ++i) {
        dflash2_mbar_init(full + i, 1);
        dflash2_mbar_init(empty + i, K_GROUPS);
      }
      dflash2_mbar_init(sb_full, 1);
      dflash2_mbar_fence_init();
      if constexpr (LEADER) {  // no producer warp: this lane fills the ring's first stages
        copy_scales();
        if constexpr (!NO_W) {
          for (int st = 0; st < (STAGES < N_ST ? STAGES : N_ST); ++st) {
            copy_stage(st);
            if constexpr (X_EARLY == 2) copy_x(st, 0, 1);
          }
        }
      }
    }
    __syncthreads();
    if (!LEADER && warp == K_GROUPS) {
      if (lane == 0) copy_scales();
#pragma unroll 1
      for (int st = 0; st < (NO_W ? 0 : N_ST); ++st) {  // ABLATE 2, 4: no weights copied
        const int slot = st % STAGES;
        if (st >= STAGES) dflash2_mbar_wait(empty + slot, ((st / STAGES) - 1) & 1);
        if constexpr (PACKED) {
          if (lane == 0) copy_stage(st);
          continue;
        }
        if (lane == 0) dflash2_mbar_expect_tx(full + slot, PAYLOAD);
        __syncwarp();
        for (int i = lane; i < K_GROUPS * COLS; i += 32) {
          const int kg = i / COLS, r = i % COLS;
          const int n = n_base + r;
          dflash2_bulk_g2s(ring + slot * STAGE_BYTES + (kg * COLS + r) * PITCH,
                           w32 + n * WORDS + (kg * GROUP_STEPS + st * SPS) * 16, SPS * 64,
                           full + slot);
        }
      }
    } else {
      dflash2_mbar_wait(sb_full, 0);
      // A stage holds SPS steps (up to a K group's all): each is read back and computed in
      // turn, the next step's activations loaded first, and the slot released after the last.
      // ABLATE (as the register pipeline's, BATCH_DRIVER): 1, the ring's words are read back
      // and folded, no math (the producer's loads alone); 2, no ring (the producer copies only
      // the scales), the words made up from the step (the computing warps' math alone); 3, the
      // activations' words made up by load_x (the whole without x's loads: what the wait on x
      // costs); 4, both made up (the math without x).
      [[maybe_unused]] uint32_t sink = 0;
      // the lane's 16 bytes of row r (of the block's COLS) and step u of this warp's stage
      auto ring_word = [&](int slot, int r, int u) {
        return *reinterpret_cast<const uint4*>(
            ring + slot * STAGE_BYTES + (warp * COLS + r) * PITCH + u * 64 + 16 * t);
      };
      // X_EARLY 1: a K step's activations are copied (cp.async) into the lane's own slots of the
      // x ring X_DEPTH - 1 steps before their math, not loaded into registers inside the step
      // before: on the H100, 43% of bulk = 3's stall samples waited on those loads
      // (bench/results/h100/bulk3_stalls_1632). A lane reads back only what it copied, so
      // cp.async.wait_group alone orders the ring.
      uint4* x_ring = reinterpret_cast<uint4*>(ring + STAGES * STAGE_BYTES) +
                      warp * (X_DEPTH * XQ * 32) + lane;
      auto issue_x = [&](int ls) {  // the warp's K step ls (empty groups past the end)
        if (ls < GROUP_STEPS) {
#pragma unroll
          for (int mt = 0; mt < M_TILES; ++mt) {
            if (8 * mt + g < M_ROWS) {
              const T* xp = x_lane + 8 * mt * K + (warp * GROUP_STEPS + ls) * 128;
#pragma unroll
              for (int i = 0; i < 4; ++i)
                dflash2_cp_async16_ca(x_ring + ((ls % X_DEPTH) * XQ + 4 * mt + i) * 32,
                                      xp + 8 * i);
            }
          }
        }
        dflash2_cp_async_commit();
      };
      // X_AHEAD (x_early 0): the activations two K steps ahead in registers (xf), not one
      uint4 xa[M_TILES][4], xn[M_TILES][4], xf[M_TILES][4];
      if constexpr (X_EARLY == 1 && ABLATE != 1) {
#pragma unroll
        for (int ls = 0; ls < X_DEPTH - 1; ++ls) issue_x(ls);
      } else if constexpr (X_EARLY != 2 && ABLATE != 1) {
        load_x(xa, warp * GROUP_STEPS);
        if constexpr (X_AHEAD) {
          if (GROUP_STEPS > 1) load_x(xn, warp * GROUP_STEPS + 1);
        }
      }
#pragma unroll 1
      for (int st = 0; st < N_ST; ++st) {
        const int slot = st % STAGES;
        // the stage's first step's x copies go out before the wait on its weights
        if constexpr (X_EARLY == 1 && ABLATE != 1) issue_x(st * SPS + X_DEPTH - 1);
        if constexpr (!NO_W) dflash2_mbar_wait(full + slot, (st / STAGES) & 1);
#pragma unroll 1
        for (int u = 0; u < SPS; ++u) {
          const int step = warp * GROUP_STEPS + st * SPS + u;
          const int grp = (step * 128 + 32 * t) / GS;
          if constexpr (X_EARLY == 1 && ABLATE != 1) {
            if (u > 0) issue_x(st * SPS + u + X_DEPTH - 1);
          }
          if constexpr (ABLATE == 1) {
#pragma unroll
            for (int c = 0; c < COL_TILES; ++c)
#pragma unroll
              for (int h = 0; h < 2; ++h) {
                const uint4 v = ring_word(slot, 16 * c + g + 8 * h, u);
                sink ^= v.x ^ v.y ^ v.z ^ v.w;
              }
            continue;
          }
          uint4 wq[COL_TILES][2];
          uint32_t sc[COL_TILES][2], bi[COL_TILES][2];
#pragma unroll
          for (int c = 0; c < COL_TILES; ++c)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int r = 16 * c + g + 8 * h;
              if constexpr (NO_W) {
                const uint32_t v = """ + ABLATE_WORD + r""";
                wq[c][h] = make_uint4(v, v ^ 1u, v ^ 2u, v ^ 3u);
              } else {
                wq[c][h] = ring_word(slot, r, u);
              }
              const uint32_t sv = sm_s[r * ROW_GROUPS + grp], bv = sm_b[r * ROW_GROUPS + grp];
              sc[c][h] = scale_pair(sv);
              bi[c][h] = bv | (bv << 16);
            }
          if constexpr (X_EARLY == 2) {  // this step's activations, landed with the stage
            const unsigned char* xs =
                ring + slot * STAGE_BYTES + W_STAGE + warp * M_ROWS * XP + u * 256 + 64 * t;
#pragma unroll
            for (int mt = 0; mt < M_TILES; ++mt)
#pragma unroll
              for (int i = 0; i < 4; ++i)
                xa[mt][i] = 8 * mt + g < M_ROWS
                                ? *reinterpret_cast<const uint4*>(xs + (8 * mt + g) * XP + 16 * i)
                                : make_uint4(0, 0, 0, 0);
            mma_math(wq, sc, bi, xa);
            continue;
          }
          if constexpr (X_EARLY == 1) {
            dflash2_cp_async_wait<X_DEPTH - 1>();  // this step's copies have landed
            const int xs = ((st * SPS + u) % X_DEPTH) * XQ;
#pragma unroll
            for (int mt = 0; mt < M_TILES; ++mt)
#pragma unroll
              for (int i = 0; i < 4; ++i)
                xa[mt][i] = 8 * mt + g < M_ROWS ? x_ring[(xs + 4 * mt + i) * 32]
                                                : make_uint4(0, 0, 0, 0);
            mma_math(wq, sc, bi, xa);
            continue;
          }
          const bool more = st * SPS + u + 1 < GROUP_STEPS;
          if constexpr (X_ROT) {  // the next step's word i where this step's word i was
            mma_math_then(wq, sc, bi, xa, [&](int i) {
              if (more) load_x_word(xa, step + 1, i);
            });
            continue;
          }
          if constexpr (X_AHEAD) {
            const bool more2 = st * SPS + u + 2 < GROUP_STEPS;
            if (more2) load_x(xf, step + 2);
            mma_math(wq, sc, bi, xa);
            if (more) {
#pragma unroll
              for (int mt = 0; mt < M_TILES; ++mt)
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                  xa[mt][i] = xn[mt][i];
                  if (more2) xn[mt][i] = xf[mt][i];
                }
            }
            continue;
          }
          if (more) load_x(xn, step + 1);
          mma_math(wq, sc, bi, xa);
          if (more) {
#pragma unroll
            for (int mt = 0; mt < M_TILES; ++mt)
#pragma unroll
              for (int i = 0; i < 4; ++i) xa[mt][i] = xn[mt][i];
          }
        }
        __syncwarp();
        if (!NO_W && lane == 0) dflash2_mbar_arrive(empty + slot);  // read: refill it
        // LEADER: warp 0's lane 0 refills the slot of the stage LAG stages before this one.
        // LAG 1 (the default from 3 stages): that slot was released by every warp by now, all
        // but always, so it rarely waits, and the ring runs STAGES - 2 stages ahead of the
        // one being read. LAG 0 (the default at 2 stages, where LAG 1's refill would come only
        // as its stage is needed): this stage's slot once every warp has released it, STAGES -
        // 1 stages ahead, warp 0 waiting on the slowest warp's stage. (kernels.cuda_config
        // gives LAG: the tile key ``lag``.)
        if constexpr (LEADER && !NO_W) {
          const int next = st - LAG + STAGES;
          if (warp == 0 && lane == 0 && st >= LAG && next < N_ST) {
            dflash2_mbar_wait(empty + (st - LAG) % STAGES, ((st - LAG) / STAGES) & 1);
            copy_stage(next);
          }
          // X_EARLY 2: warp 0's lanes copy the stage's rows of x, once lane 0 has found the
          // slot free and set the bytes it expects (a copy a lane, not 32 from one lane)
          if constexpr (X_EARLY == 2) {
            if (warp == 0 && st >= LAG && next < N_ST) {
              __syncwarp();
              copy_x(next, lane, 32);
            }
          }
        }
      }
      if constexpr (ABLATE == 1) {
        if (sink == 0x9E3779B9u) acc[0][0][0] = 1.f;  // keeps the reads, and so the waits
      }
      if constexpr (X_EARLY == 1) dflash2_cp_async_wait<0>();
    }
    __syncthreads();  // the partial sums below reuse the ring's memory"""
