"""Metal helpers every variant's source includes: 4-bit affine dequantization of one word."""

DEQUANT_HEADER = r"""
#include <metal_stdlib>
using namespace metal;

// One packed uint32 word holds 8 consecutive 4-bit values of one output row n at K offset k.
// Dequantized in float32 exactly as MLX's own QMM does: scale * q + bias.
// MLX places this header at file scope, before the kernel's template signature, so nothing here
// may name the kernel's template parameters (T, GS): the group size is an explicit template
// argument and the pointer types are deduced. Deduced pointers also accept MLX's `constant`
// buffers (arrays under 8 elements) and scales stored in a dtype other than the activations'.
// `out` is a reference to the caller's array, not a decayed pointer, so its length is part of
// the type and an index past it is caught (the emulator compiles with array-bounds checks).
template <int GS, typename WPtr, typename SPtr>
inline void dequant_word(WPtr w, SPtr scales, SPtr biases, uint n, uint k, uint K,
                         thread float (&out)[8]) {
  const uint32_t word = w[n * (K / 8) + k / 8];
  const float s = float(scales[n * (K / GS) + k / GS]);
  const float b = float(biases[n * (K / GS) + k / GS]);
  for (uint j = 0; j < 8; ++j) {
    out[j] = s * float((word >> (4 * j)) & 0xFu) + b;
  }
}
"""

# The split-K body narrow_output and verify_m16 share (their contracts differ only in the K
# layout inside a group). Template parameters: T, M_ROWS, N_TILE, K_GROUPS, K, N, GS,
# LAYOUT_CONTIGUOUS. Grid: (N / N_TILE) threadgroups of K_GROUPS SIMD groups.
SPLIT_K_BODY = r"""
  threadgroup float partial[K_GROUPS][M_ROWS][N_TILE];
  const uint lane = thread_index_in_simdgroup;
  const uint g = simdgroup_index_in_threadgroup;
  const uint n0 = threadgroup_position_in_grid.x * N_TILE;
  const uint kg = K / K_GROUPS;
  const uint kl = kg / 32;
  // contiguous: the lane walks [g*kg + lane*kl, +kl); interleaved: word `lane` of each 256-block.
  const uint k_first = LAYOUT_CONTIGUOUS ? g * kg + lane * kl : g * kg + lane * 8;
  const uint k_end = LAYOUT_CONTIGUOUS ? k_first + kl : (g + 1) * kg;
  const uint k_step = LAYOUT_CONTIGUOUS ? 8 : 256;
  float acc[M_ROWS][N_TILE];
  for (uint m = 0; m < M_ROWS; ++m)
    for (uint t = 0; t < N_TILE; ++t) acc[m][t] = 0.0f;
  for (uint k = k_first; k < k_end; k += k_step) {
    for (uint t = 0; t < N_TILE; ++t) {
      float wv[8];
      dequant_word<GS>(w, scales, biases, n0 + t, k, K, wv);
      for (uint m = 0; m < M_ROWS; ++m)
        for (uint j = 0; j < 8; ++j) acc[m][t] = fma(float(x[m * K + k + j]), wv[j], acc[m][t]);
    }
  }
  for (uint m = 0; m < M_ROWS; ++m)
    for (uint t = 0; t < N_TILE; ++t) {
      const float v = simd_sum(acc[m][t]);
      if (lane == 0) partial[g][m][t] = v;
    }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint i = g * 32 + lane; i < M_ROWS * N_TILE; i += 32 * K_GROUPS) {
    const uint m = i / N_TILE, t = i % N_TILE;
    float s = 0.0f;
    for (uint h = 0; h < K_GROUPS; ++h) s += partial[h][m][t];  // groups in order
    y[m * N + n0 + t] = static_cast<T>(s);
  }
"""
