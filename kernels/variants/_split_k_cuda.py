"""The split-K variants' CUDA body (scalar_kmajor, narrow_output and the variants built on them).

Kept apart from the mma variants' helpers (_cuda_common.py): these variants reduce each K
group with a warp's butterfly of float32 sums, no tensor core, in the order
``kernels/arith.butterfly_sum`` gives their portable forms.
"""

from kernels.tiling import Tiling

# The split-K body shared by both K layouts. LAYOUT_CONTIGUOUS selects which words a lane owns.
# Constants: M_ROWS, N_TILE, K_GROUPS, VEC, K, N, GS, LAYOUT_CONTIGUOUS; type T (activation).
# One block per N_TILE output columns, K_GROUPS warps each reducing a contiguous K group.
SPLIT_K_BODY = r"""
  constexpr int WORDS = K / 8;
  constexpr int GROUP_WORDS = WORDS / K_GROUPS;
  constexpr int LANE_WORDS = GROUP_WORDS / 32;
  constexpr int ROW_GROUPS = K / GS;
  const int lane = threadIdx.x & 31;
  const int g = threadIdx.x >> 5;
  const int n0 = blockIdx.x * N_TILE;
  float acc[M_ROWS][N_TILE];
#pragma unroll
  for (int m = 0; m < M_ROWS; ++m)
#pragma unroll
    for (int t = 0; t < N_TILE; ++t) acc[m][t] = 0.0f;

  for (int s = 0; s < LANE_WORDS; s += VEC) {
    // contiguous: lane owns [lane * LANE_WORDS, +LANE_WORDS) of its group (K-major walk);
    // interleaved: lane owns word `lane` of every 32-word (256-value) block.
    const int word = g * GROUP_WORDS +
        (LAYOUT_CONTIGUOUS ? lane * LANE_WORDS + s : s * 32 + lane * VEC);
    uint32_t wv[N_TILE][VEC];
    float sc[N_TILE], bi[N_TILE];
#pragma unroll
    for (int t = 0; t < N_TILE; ++t) {
      const int n = n0 + t;
      dflash2_load_words<VEC>(w + n * WORDS + word, wv[t]);
      const int grp = (word * 8) / GS;  // VEC words never straddle a group (GS >= 8 * VEC)
      sc[t] = static_cast<float>(scales[n * ROW_GROUPS + grp]);
      bi[t] = static_cast<float>(biases[n * ROW_GROUPS + grp]);
    }
#pragma unroll
    for (int v = 0; v < VEC; ++v) {
      float xv[M_ROWS][8];
#pragma unroll
      for (int m = 0; m < M_ROWS; ++m) dflash2_load8(x + m * K + (word + v) * 8, xv[m]);
#pragma unroll
      for (int t = 0; t < N_TILE; ++t) {
        float wf[8];
#pragma unroll
        for (int j = 0; j < 8; ++j)
          wf[j] = sc[t] * static_cast<float>((wv[t][v] >> (4 * j)) & 0xFu) + bi[t];
#pragma unroll
        for (int m = 0; m < M_ROWS; ++m)
#pragma unroll
          for (int j = 0; j < 8; ++j) acc[m][t] = fmaf(xv[m][j], wf[j], acc[m][t]);
      }
    }
  }

  __shared__ float partial[K_GROUPS][M_ROWS * N_TILE];
#pragma unroll
  for (int m = 0; m < M_ROWS; ++m)
#pragma unroll
    for (int t = 0; t < N_TILE; ++t) {
      const float total = dflash2_lane0_sum(acc[m][t]);
      if (lane == ((m * N_TILE + t) & 31)) partial[g][m * N_TILE + t] = total;
    }
  __syncthreads();
  for (int i = threadIdx.x; i < M_ROWS * N_TILE; i += blockDim.x) {
    float total = partial[0][i];
#pragma unroll
    for (int h = 1; h < K_GROUPS; ++h) total += partial[h][i];  // groups in order
    const int m = i / N_TILE, t = i % N_TILE;
    y[m * N + n0 + t] = static_cast<T>(total);
  }
"""
# What SPLIT_K_BODY tiles: each lane of a K group owns whole words of every 32-word (256-value)
# block (K % (256 * k_groups)), a block writes whole N_TILE column tiles, and the group sums
# partial[K_GROUPS][M_ROWS * N_TILE] live in static shared memory.
SPLIT_K_TILING = Tiling(shared_floats=("k_groups", "M", "n_tile"))
