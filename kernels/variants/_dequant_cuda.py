"""The mma variants' dequantization on CUDA: packed nibbles to pairs of the activation type.

Kept apart from the variants' sources (the pipelines) because every way of taking a nibble
pair (the magic's OR and subtraction, fp16's high nibble in place, ``denorm``'s subnormals)
must give the same q to the same one-rounding FMA, and their arguments for that sit best side
by side. ``NIBBLE_HEADER`` serves both mma variants; ``DEQUANT_HEADER`` is mma_weights_a's,
whose FMA applies the scale and bias per weight (mma_group_sums applies them once a group).
"""

# Two nibbles into the mantissa of a power of two, for the mma variants' A tiles, and the
# activations paired to match them for B.
NIBBLE_HEADER = r"""
// (bits & MASK) | magic as ONE lop3 (LUT 0xea = (a & b) | c), with the magic in a register:
// written as an AND and an OR of two immediates, ptxas emits two LOP3s (a LOP3 takes one
// immediate), a fifth of the dequantization's issue slots (ncu's SASS of mma_weights_a,
// 2026-12-04, bench/results/h200/sass_*).
template <uint32_t MASK>
__device__ __forceinline__ uint32_t dflash2_or_magic(uint32_t bits, uint32_t magic) {
  uint32_t v;
  asm("lop3.b32 %0, %1, %2, %3, 0xea;" : "=r"(v) : "r"(bits), "n"(MASK), "r"(magic));
  return v;
}
// A packed word's 8 activations (one 16-byte load) as the B operand's pairs (0, 4), (1, 5),
// (2, 6), (3, 7): the pairs of nibbles a mask of 0x000F000F takes from the word, shifted by 0,
// 4, 8 and 12, so that A and B agree on every k.
__device__ __forceinline__ void dflash2_activation_pairs(const uint4 v, uint32_t (&b)[4]) {
  b[0] = __byte_perm(v.x, v.z, 0x5410);
  b[1] = __byte_perm(v.x, v.z, 0x7632);
  b[2] = __byte_perm(v.y, v.w, 0x5410);
  b[3] = __byte_perm(v.y, v.w, 0x7632);
}
"""

# mma_weights_a's pair dequantizations (after NIBBLE_HEADER, whose OR they use).
DEQUANT_HEADER = r"""
// Packed pairs of the activation type in 32-bit words: a * b + c, a - b and a * b, each half
// rounded once (the half2 intrinsics, the casts to their types in one place).
template <bool BF16> struct dflash2_half2 { using T = __half2; };
template <> struct dflash2_half2<true> { using T = __nv_bfloat162; };
template <bool BF16>
__device__ __forceinline__ uint32_t dflash2_fma2(uint32_t a, uint32_t b, uint32_t c) {
  using H2 = typename dflash2_half2<BF16>::T;
  H2 r = __hfma2(*reinterpret_cast<H2*>(&a), *reinterpret_cast<H2*>(&b),
                 *reinterpret_cast<H2*>(&c));
  return *reinterpret_cast<uint32_t*>(&r);
}
template <bool BF16>
__device__ __forceinline__ uint32_t dflash2_sub2(uint32_t a, uint32_t b) {
  using H2 = typename dflash2_half2<BF16>::T;
  H2 r = __hsub2(*reinterpret_cast<H2*>(&a), *reinterpret_cast<H2*>(&b));
  return *reinterpret_cast<uint32_t*>(&r);
}
template <bool BF16>
__device__ __forceinline__ uint32_t dflash2_mul2(uint32_t a, uint32_t b) {
  using H2 = typename dflash2_half2<BF16>::T;
  H2 r = __hmul2(*reinterpret_cast<H2*>(&a), *reinterpret_cast<H2*>(&b));
  return *reinterpret_cast<uint32_t*>(&r);
}
// Nibbles 0 and 4 of ``bits`` as two dequantized activation-type values, low and high:
// OR-ing a nibble into the mantissa of 1024 (fp16) or 128 (bf16) gives 1024 + q or 128 + q
// exactly, the subtraction is exact, and the FMA rounds scale * q + bias once. HIGH (fp16
// only): nibbles 1 and 5 instead, taken where they lie, at bits 4-7 of each half: in the
// mantissa of 64, whose last place is 1/16, they give 64 + q exactly, so the q that reaches
// the FMA is the same and two of every three shifts go (bf16's 7-bit mantissa has no room
// for a nibble at bits 4-7).
template <bool BF16, bool HIGH>
__device__ __forceinline__ uint32_t dflash2_dequant_pair(uint32_t bits, uint32_t scale2,
                                                         uint32_t bias2) {
  static_assert(!(BF16 && HIGH), "a bf16 mantissa holds a nibble at bits 0-3 only");
  constexpr uint32_t MAGIC = BF16 ? 0x43004300u : HIGH ? 0x54005400u : 0x64006400u;
  uint32_t magic = MAGIC;
  uint32_t v = dflash2_or_magic<HIGH ? 0x00F000F0u : 0x000F000Fu>(bits, magic);
  return dflash2_fma2<BF16>(dflash2_sub2<BF16>(v, magic), scale2, bias2);
}
// DENORM: nibble pair J ((0, 4), (1, 5), (2, 6), (3, 7)) of ``bits`` taken as two subnormals
// of the activation type, with no magic and no subtraction. MODE 1: in bf16 at bits 0-3 of
// each half, q x 2^-133; in fp16 at bits 4-7, q x 2^-20 (nibbles 1 and 5 lie there, the others
// one shift away). MODE 2: each pair where it lies after one shift of 8 for pairs 2 and 3, the
// even pairs at bits 0-3 (q x 2^-133 in bf16, q x 2^-24 in fp16) and the odd ones at bits 4-7
// (q x 2^-129, q x 2^-20: below 2^8 (bf16) or 2^11 (fp16) a bit pattern's value is the
// pattern times the least subnormal, across the first normal binade too), so one shift a word
// instead of three. ``scale2`` is the scale times the inverse of the pair's factor
// (dflash2_denorm_scale, dflash2_denorm_odd), so the FMA's exact product is scale * q, the
// very product the plain path's FMA forms, and its one rounding of scale * q + bias is the
// same: the output is the plain path's bit for bit. Valid while the scaled scale is finite:
// |scale| < 2^-5 (bf16), < 2^-4 (fp16, MODE 1), < 2^-8 (fp16, MODE 2: times 2^24).
template <bool BF16, int MODE>
__device__ __forceinline__ uint32_t dflash2_dequant_denorm(uint32_t bits, int j,
                                                           uint32_t scale2, uint32_t bias2) {
  const uint32_t v =
      MODE == 2 ? (j < 2 ? bits : bits >> 8) & (j & 1 ? 0x00F000F0u : 0x000F000Fu)
      : BF16    ? (bits >> (4 * j)) & 0x000F000Fu
                : (j == 0 ? bits << 4 : bits >> (4 * j - 4)) & 0x00F000F0u;
  return dflash2_fma2<BF16>(v, scale2, bias2);
}
// A packed scale pair times the inverse of the factor of the nibbles at bits 0-3 (MODE 2) or
// of every nibble (MODE 1): 2^133 in bf16 (2^66 then 2^67, each a bf16), 2^20 in fp16 (2^10
// twice) or 2^24 there with MODE 2 (2^10 then 2^14): exact multiplications by powers of two
// while the result stays finite.
template <bool BF16, int MODE>
__device__ __forceinline__ uint32_t dflash2_denorm_scale(uint32_t scale2) {
  return BF16 ? dflash2_mul2<BF16>(dflash2_mul2<BF16>(scale2, 0x60806080u), 0x61006100u)
              : dflash2_mul2<BF16>(dflash2_mul2<BF16>(scale2, 0x64006400u),
                                   MODE == 2 ? 0x74007400u : 0x64006400u);
}
// MODE 2: the scale pair of the nibbles at bits 4-7 (16 times the least subnormal) from that
// of bits 0-3: times 2^-4, exact (a nonzero scaled scale is at least 1, the least subnormal
// scale times 2^133 or 2^24, so it stays a normal number).
template <bool BF16>
__device__ __forceinline__ uint32_t dflash2_denorm_odd(uint32_t scale2) {
  return dflash2_mul2<BF16>(scale2, BF16 ? 0x3D803D80u : 0x2C002C00u);
}
"""
