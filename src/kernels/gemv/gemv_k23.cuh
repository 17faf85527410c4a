// The repacked layouts of Q2_K and Q3_K (gemv.h): GGUF's super-blocks split into planes in Q4_0's
// block order, so that a lane of q_dp4a takes block j (elements 32 j .. 32 j + 31 of a row), meets
// one x block and reads its bits with a shift and a mask per four quants, as it reads Q6_K's:
//   low   [n][k/4]   the 2 low bits: two u32 per block, one per half of 16 (h = 0: elements 0..15);
//                    byte b of a half's word holds its elements b, b + 4, b + 8, b + 12 at bits
//                    0, 2, 4, 6 (Q6_K's qh order): field i of the word, shifted down and masked,
//                    is elements 4 i .. 4 i + 3 of the half in x's byte order
//   Q3_K: high [n][k/8]           the third bit: one u32 per block, byte b holding elements
//                                 b + 4 i at bit i (i = 0..7; field 4 h + i: half h's elements 4 i ..)
//         scales int8 [n][k/16]   q3k_scale, already less 32 | d f16 [n][k/256]
//                                 (114 bytes per 256 weights; the file: 110)
//   Q2_K: scales [n][k/16]        as in the file (scale | min << 4) | (d, dmin) f16 [n][k/256]
//                                 (84 bytes per 256: the file's)
// Values: Q3_K d sc (q - 4) with q = low | high << 2 (0..7); Q2_K d sc low - dmin m.
// Q6_K's high 2 bits (gemv_q6k.cu) are words of the same order: k23_low_shift and q2_bytes read
// them too (q6_bytes).
// Against the planes before (Q3_K: GGUF's qs and hmask orders, a 16-byte run of qs meeting four
// runs of 16 in two x blocks; Q2_K: in place), a lane's chunk is one x block, as in q_dp4a's frame.
#pragma once

#include "format/quant_decode.h"

#include <cstddef>
#include <cstdint>

namespace lamina::kernels::gemv_detail {

// Byte offsets of the planes of an n x k matrix: low, high (Q3_K; empty for Q2_K), scales, d.
struct K23Planes {
  size_t high, sc, d, end;
  __host__ __device__ K23Planes(bool q3, int64_t n, int64_t k)
      : high(size_t(n) * size_t(k) / 4),
        sc(high + (q3 ? size_t(n) * size_t(k) / 8 : 0)),
        d(sc + size_t(n) * size_t(k) / 16),
        end(d + size_t(n) * size_t(k / 256) * (q3 ? 2 : 4)) {}
};

// Where element e (0..15) of a half's low word sits, and element e (0..31) of a block's high word.
__host__ __device__ constexpr int k23_low_shift(int e) { return 8 * (e % 4) + 2 * (e / 4); }
__host__ __device__ constexpr int k23_high_shift(int e) { return 8 * (e % 4) + e / 4; }

// The fifth-bit planes of Q5_0, Q5_1 and Q5_K (gemv_block32_planes.cu, gemv_kquant_planes.cu) hold a
// block's 32 bits in Q3_K's high-word order: element e's bit at k23_high_shift(e), so that the four
// elements of x word g (0..7: elements 4 g .. 4 g + 3) have theirs at bit g of bytes 0..3.
// plane_fifth_bits moves them to bit 4, above their nibbles, by one shift and a mask (the file's
// order, bit e for element e, took a shift, a mask, a multiply and a mask).
__host__ __device__ inline uint32_t fifth_plane_word(uint32_t file_bits) {
  uint32_t w = 0;
  for (int e = 0; e < 32; ++e) w |= ((file_bits >> e) & 1u) << k23_high_shift(e);
  return w;
}
__host__ __device__ inline int fifth_plane_bit(uint32_t word, int e) { return int((word >> k23_high_shift(e)) & 1u); }
__device__ __forceinline__ uint32_t plane_fifth_bits(uint32_t word, int g) {
  return (g < 4 ? word << (4 - g) : word >> (g - 4)) & 0x10101010u;
}

// The words of block j (0..7) of a super-block from the file's qs (half h) and Q3_K's hmask (repack).
__host__ __device__ inline uint32_t k23_low_word(const uint8_t* qs, int j, int h) {
  uint32_t w = 0;
  for (int e = 0; e < 16; ++e) w |= uint32_t(k23_low2(qs, 32 * j + 16 * h + e)) << k23_low_shift(e);
  return w;
}
__host__ __device__ inline uint32_t q3k_high_word(const uint8_t* hmask, int j) {
  uint32_t w = 0;
  for (int e = 0; e < 32; ++e) w |= uint32_t(q3k_high(hmask, 32 * j + e)) << k23_high_shift(e);
  return w;
}

// Elements 4 i .. 4 i + 3 of half h as bytes: the 2 low bits (Q2_K: q) and, for Q3_K, the third
// bit from the block's high word (q + 4 - 4 = q3's low | high << 2, 0..7).
__device__ __forceinline__ uint32_t q2_bytes(uint32_t low, int i) { return (low >> (2 * i)) & 0x03030303u; }
__device__ __forceinline__ uint32_t q3_bytes(uint32_t low, uint32_t high, int h, int i) {
  return q2_bytes(low, i) | ((high >> (4 * h + i)) & 0x01010101u) << 2;
}
// Q6_K's planes in Q4_0's order (gemv_q6k.cu): the four 6-bit quants of nibble word `nib` (bits
// 0-3 of each byte: elements 4 i .. 4 i + 3 of a block's half) with their high 2 bits, field i of
// the half's qh word `hi`, as bytes 0..63. (q6k_dp4a, q_dp4a)
__device__ __forceinline__ uint32_t q6_bytes(uint32_t nib, uint32_t hi, int i) {
  return (nib & 0x0F0F0F0Fu) | q2_bytes(hi, i) << 4;
}
// Element e (0..31) of a block: its 2 low bits from the halves' words (low), with Q3_K's third bit.
__device__ __forceinline__ int k23_quant(uint32_t low_lo, uint32_t low_hi, uint32_t high, int e, bool q3) {
  const int q = int(((e & 16 ? low_hi : low_lo) >> k23_low_shift(e & 15)) & 3u);
  return q3 ? q | int((high >> k23_high_shift(e)) & 1u) << 2 : q;
}

}  // namespace lamina::kernels::gemv_detail
