"""Metal helpers every variant's source includes: 4-bit affine dequantization of one word."""

DEQUANT_HEADER = r"""
#include <metal_stdlib>
using namespace metal;

// One packed uint32 word holds 8 consecutive 4-bit values of one output row n at K offset k.
// Dequantized in float32 exactly as MLX's own QMM does: scale * q + bias.
inline void dequant_word(const device uint32_t* w, const device T* scales,
                         const device T* biases, uint n, uint k, uint K, thread float out[8]) {
  const uint32_t word = w[n * (K / 8) + k / 8];
  const float s = float(scales[n * (K / GS) + k / GS]);
  const float b = float(biases[n * (K / GS) + k / GS]);
  for (uint j = 0; j < 8; ++j) {
    out[j] = s * float((word >> (4 * j)) & 0xFu) + b;
  }
}
"""
