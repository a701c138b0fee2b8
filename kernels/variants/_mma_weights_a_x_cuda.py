"""Where ``mma_weights_a``'s register pipeline gets each K step's activations, a fragment of its
CUDA kernel body: ``load_x`` from global memory (L1/L2; with X_PREFETCH its lines brought into
L1 steps ahead), from the block's shared slot (X_SHARE), from the warp's cp.async ring
(X_EARLY 3), to the warpgroup's slot in wgmma's layout (WGMMA), made up (ABLATE 3 and 4) or
always those of the K group's first step (ABLATE 5: L1 hits after it, the same instructions).
Kept apart from ``_mma_weights_a_cuda`` (which splices it in before the math) because the ways
to bring x are the levers the M=16 runs of 2026-12-07 turned (bench/results/h100/xcost_1037 and
after); it uses that body's lane bases (``x_lane``, ``g``, ``t``, ``warp``, ``lane``,
``kgroup``) and its shared memory layout.
"""

# ABLATE 3 and 4: the activation words a load would bring, made up from the step and the lane's
# place as _cuda_common.ABLATE_WORD makes the weights'; the mask keeps every half a finite
# number of either half type.
ABLATE_X_WORD = ("((uint32_t(step) * 0x9E3779B9u) ^ uint32_t(threadIdx.x * 16 + mt * 4 + i))"
                 " & 0x3DFF3DFFu")

LOAD_X = r"""  // X_SHARE (one K group a block): the block's threads load a K step's activations together,
  // 16 bytes a thread (XS_PER chunks), one step ahead, into registers ``xr``; at the step they
  // go to shared memory, a barrier, and each lane reads its own from there, so x is read once a
  // block from L2 and its latency lies under the step before's math. Two slots: a slot is
  // written again two steps on, after every warp has passed the barrier between.
  constexpr int XS_CHUNKS = M_ROWS * 16;
  constexpr int XS_PER = X_SHARE ? (XS_CHUNKS + 32 * COL_WARPS - 1) / (32 * COL_WARPS) : 1;
  [[maybe_unused]] uint4 xr[XS_PER];
  [[maybe_unused]] auto xs_issue = [&](int step) {
#pragma unroll
    for (int j = 0; j < XS_PER; ++j) {
      const int c = int(threadIdx.x) + j * 32 * COL_WARPS;
      if (c < XS_CHUNKS)
        xr[j] = reinterpret_cast<const uint4*>(x + (c / 16) * K + step * 128)[c % 16];
    }
  };
  // X_EARLY 3: the lane's 16-byte slots of its warp's x ring, and the copies of K step ls
  // (none past the warp's K group: an empty group keeps wait_group's count); a lane reads back
  // only what it copied, so cp.async.wait_group alone orders the ring.
  // (Off, the pointer is smem's start: past a 16-byte BULK buffer it would be undefined.)
  constexpr int XR_OFF = X_EARLY == 3 ? PARTIAL_BYTES + XS_BYTES : 0;
  [[maybe_unused]] uint4* x_ring3 = reinterpret_cast<uint4*>(smem + XR_OFF) +
                                    (X_EARLY == 3 ? warp * (X_DEPTH * XQ * 32) + lane : 0);
  [[maybe_unused]] auto issue_x3 = [&](int ls) {
    if (ls < (kgroup + 1) * GROUP_STEPS) {
#pragma unroll
      for (int mt = 0; mt < M_TILES; ++mt) {
        if (8 * mt + g < M_ROWS) {
          const T* xp = x_lane + 8 * mt * K + ls * 128;
#pragma unroll
          for (int i = 0; i < 4; ++i)
            dflash2_cp_async16_ca(x_ring3 + ((ls % X_DEPTH) * XQ + 4 * mt + i) * 32, xp + 8 * i);
        }
      }
    }
    dflash2_cp_async_commit();
  };
  // WGMMA: the warpgroup's 128 threads load a K step's activations together, 16 bytes (a lane
  // t's word i of a row: chunk 4 t + i) a thread, one step ahead (X_AHEAD: WG_DEPTH steps, so
  // that a load's latency is not each step's), into registers ``wr[0]``... ``wr[WG_DEPTH - 1]``;
  // at the step, each chunk of wr[0] gives its four activation pairs to where wgmma's B takes
  // the k-slots that the A fragments of lane t's word i give them (pair 2 h + j of k16 block
  // (i, h) at k = 8 j + 2 t), then a fence for the async proxy and the block's barrier, and the
  // later steps' registers move down by one. Rows M_ROWS to NW stay the zeros written at the
  // start (wg_start).
  constexpr int WG_CHUNKS = M_ROWS * 16;
  constexpr int WG_PER = WGMMA ? (WG_CHUNKS + 127) / 128 : 1;
  constexpr int WG_DEPTH = WGMMA && X_AHEAD ? 3 : 1;
  const int wg_thread = int(threadIdx.x) & 127;
  // (Off, smem's start: past a 16-byte BULK buffer the pointer would be undefined.)
  [[maybe_unused]] unsigned char* wg_base =
      smem + (WGMMA ? WG_OFF + (warp / COL_WARPS) * WG_SLOTS * WG_SLOT : 0);
  [[maybe_unused]] uint4 wr[WG_DEPTH][WG_PER];
  [[maybe_unused]] auto wg_issue = [&](int step, uint4 (&to)[WG_PER]) {
#pragma unroll
    for (int j = 0; j < WG_PER; ++j) {
      const int c = wg_thread + j * 128;
      if (c < WG_CHUNKS)
        to[j] = reinterpret_cast<const uint4*>(x + (c / 16) * K + step * 128)[c % 16];
    }
  };
  [[maybe_unused]] auto wg_start = [&](int step) {
    for (int c = wg_thread; c < WG_SLOTS * WG_SLOT / 16; c += 128)
      reinterpret_cast<uint4*>(wg_base)[c] = make_uint4(0, 0, 0, 0);
    __syncthreads();  // the zeros before any step's activations
    wg_issue(step, wr[0]);
#pragma unroll
    for (int d = 1; d < WG_DEPTH; ++d)
      if (step + d < (kgroup + 1) * GROUP_STEPS) wg_issue(step + d, wr[d]);
  };
  [[maybe_unused]] auto wg_stage = [&](int step) {
    unsigned char* slot = wg_base + wg_slot(step) * WG_SLOT;
#pragma unroll
    for (int j = 0; j < WG_PER; ++j) {
      const int c = wg_thread + j * 128;
      if (c < WG_CHUNKS) {
        const int n = c / 16, tq = (c % 16) / 4, i = c % 4;
        uint32_t b[4];
        dflash2_activation_pairs(wr[0][j], b);
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int jj = 0; jj < 2; ++jj)
            *reinterpret_cast<uint32_t*>(slot + (2 * i + h) * WG_KBLOCK +
                                         dflash2_wgmma_b_offset(8 * jj + 2 * tq, n)) = b[2 * h + jj];
      }
    }
    dflash2_fence_proxy_async();
    __syncthreads();
#pragma unroll
    for (int d = 0; d + 1 < WG_DEPTH; ++d)
#pragma unroll
      for (int j = 0; j < WG_PER; ++j) wr[d][j] = wr[d + 1][j];
    if (step + WG_DEPTH < (kgroup + 1) * GROUP_STEPS) wg_issue(step + WG_DEPTH, wr[WG_DEPTH - 1]);
  };
  // X_ROT (the bulk pipeline's plain path): word i of every row tile of the lane's activations
  // of K step ``step``, load_x's plain loads a word at a time, so that the next step's word can
  // go into the registers that this step's word has just left (mma_math_then's ``taken``):
  // a step's x in registers once, not twice
  [[maybe_unused]] auto load_x_word = [&](uint4 (&xa)[M_TILES][4], int step, int i) {
#pragma unroll
    for (int mt = 0; mt < M_TILES; ++mt) {
      const uint4* xp = reinterpret_cast<const uint4*>(x_lane + 8 * mt * K + step * 128);
      xa[mt][i] = 8 * mt + g < M_ROWS ? xp[i] : make_uint4(0, 0, 0, 0);
    }
  };
  // The lane's activations of one K step (row g, + 8; zeros past M): from global memory (read by
  // every warp: L1/L2 hits), with X_SHARE from the step's slot, or with X_EARLY 3 from the
  // warp's ring, the copies of X_DEPTH - 1 steps on issued first.
  auto load_x = [&](uint4 (&xa)[M_TILES][4], int step) {
    if constexpr (WGMMA) {  // x to the step's slot for wg_math (xa is not read)
      if constexpr (ABLATE < 3) wg_stage(step);  // ABLATE 3, 4: unstaged (B stays zeros)
    } else if constexpr (X_SHARE) {
      unsigned char* slot = smem + PARTIAL_BYTES + (step & 1) * XS_SLOT;
#pragma unroll
      for (int j = 0; j < XS_PER; ++j) {
        const int c = int(threadIdx.x) + j * 32 * COL_WARPS;
        if (c < XS_CHUNKS)
          *reinterpret_cast<uint4*>(slot + (c / 16) * XS_PITCH + (c % 16) * 16) = xr[j];
      }
      __syncthreads();
      if (step + 1 < (kgroup + 1) * GROUP_STEPS) xs_issue(step + 1);
#pragma unroll
      for (int mt = 0; mt < M_TILES; ++mt) {
        const int row = 8 * mt + g;
        const uint4* xp = reinterpret_cast<const uint4*>(slot + row * XS_PITCH + 64 * t);
#pragma unroll
        for (int i = 0; i < 4; ++i) xa[mt][i] = row < M_ROWS ? xp[i] : make_uint4(0, 0, 0, 0);
      }
    } else if constexpr (ABLATE == 3 || ABLATE == 4) {  // no activation loads: made up
#pragma unroll
      for (int mt = 0; mt < M_TILES; ++mt) {
        const int row = 8 * mt + g;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const uint32_t v = """ + ABLATE_X_WORD + r""";
          xa[mt][i] = row < M_ROWS ? make_uint4(v, v ^ 0x10001u, v ^ 0x20002u, v ^ 0x30003u)
                                   : make_uint4(0, 0, 0, 0);
        }
      }
    } else if constexpr (X_EARLY == 3) {
      issue_x3(step + X_DEPTH - 1);
      dflash2_cp_async_wait<X_DEPTH - 1>();  // this step's copies have landed
      const int xs = (step % X_DEPTH) * XQ;
#pragma unroll
      for (int mt = 0; mt < M_TILES; ++mt) {
        const int row = 8 * mt + g;
#pragma unroll
        for (int i = 0; i < 4; ++i)
          xa[mt][i] = row < M_ROWS ? x_ring3[(xs + 4 * mt + i) * 32] : make_uint4(0, 0, 0, 0);
      }
    } else {
      if constexpr (X_PREFETCH > 0) {
        // X_PREFETCH: the warp's lines of x X_PREFETCH steps on brought into L1 now (a row's
        // 256 B of a step are two lines: a line a lane), at its first step those of the steps
        // between too, so each step's loads find L1 rather than wait on L2 one step ahead
        const int end = (kgroup + 1) * GROUP_STEPS;
        if ((lane >> 1) < M_ROWS) {
          const T* line = x + (8 * rw + (lane >> 1)) * K + 64 * (lane & 1);
          if (step == kgroup * GROUP_STEPS) {
#pragma unroll
            for (int d = 1; d < X_PREFETCH; ++d)
              if (step + d < end) dflash2_prefetch_l1(line + (step + d) * 128);
          }
          if (step + X_PREFETCH < end) dflash2_prefetch_l1(line + (step + X_PREFETCH) * 128);
        }
      }
      // ABLATE 5: every step loads the K group's first step's activations, the same loads
      // from lines L1 holds after that step: what x costs when its loads do not wait on L2
      // (plus the step less itself, opaque, so that each step keeps its own loads)
      const int x_step = ABLATE == 5 ? kgroup * GROUP_STEPS + (dflash2_opaque(step) - step) : step;
#pragma unroll
      for (int mt = 0; mt < M_TILES; ++mt) {
        const int row = 8 * mt + g;
        const uint4* xp = reinterpret_cast<const uint4*>(x_lane + 8 * mt * K + x_step * 128);
#pragma unroll
        for (int i = 0; i < 4; ++i) xa[mt][i] = row < M_ROWS ? xp[i] : make_uint4(0, 0, 0, 0);
      }
    }
  };
"""
