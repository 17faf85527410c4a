// Per-element decoding of ggml blocks, shared by the CPU reference (dequant.cpp) and the CUDA
// kernels (kernels/dequant). `decode_<type>(block, e)` returns element e (0..31 for the legacy
// types, 0..255 for the K types) of one block. Formulas: ../shared/docs/formats.md §2.3.
#pragma once

#include "core/half.h"
#include "format/quant_blocks.h"

namespace lamina {

LAMINA_HD int q_nib(const uint8_t* qs, int e) { return e < 16 ? (qs[e] & 15) : (qs[e - 16] >> 4); }
LAMINA_HD uint32_t q_u32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

LAMINA_HD float decode_q4_0(const block_q4_0& b, int e) {
  return f16_to_f32(b.d) * float(q_nib(b.qs, e) - 8);
}
LAMINA_HD float decode_q4_1(const block_q4_1& b, int e) {
  return f16_to_f32(b.d) * float(q_nib(b.qs, e)) + f16_to_f32(b.m);
}
LAMINA_HD float decode_q5_0(const block_q5_0& b, int e) {
  const int hi = int((q_u32(b.qh) >> e) & 1u) << 4;
  return f16_to_f32(b.d) * float((q_nib(b.qs, e) | hi) - 16);
}
LAMINA_HD float decode_q5_1(const block_q5_1& b, int e) {
  const int hi = int((q_u32(b.qh) >> e) & 1u) << 4;
  return f16_to_f32(b.d) * float(q_nib(b.qs, e) | hi) + f16_to_f32(b.m);
}
LAMINA_HD float decode_q8_0(const block_q8_0& b, int e) { return f16_to_f32(b.d) * float(b.qs[e]); }
LAMINA_HD float decode_q8_1(const block_q8_1& b, int e) { return f16_to_f32(b.d) * float(b.qs[e]); }

// Element e's 2 low bits in a Q2_K or Q3_K super-block's qs (the same order in both): bits 2 j of
// qs[32 n + l], e = 128 n + 32 j + l.
LAMINA_HD int k23_low2(const uint8_t* qs, int e) { return (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3; }
// Element e's bit of a Q3_K super-block's hmask (bit 4 n + j of hmask[l]): set, q = low 2 bits;
// clear, q = low 2 bits - 4.
LAMINA_HD int q3k_high(const uint8_t* hmask, int e) { return (hmask[e % 32] >> (4 * (e / 128) + (e % 128) / 32)) & 1; }

LAMINA_HD float decode_q2_K(const block_q2_K& b, int e) {
  const int q = k23_low2(b.qs, e);
  const uint8_t s = b.scales[e / 16];
  return f16_to_f32(b.d) * float(s & 15) * float(q) - f16_to_f32(b.dmin) * float(s >> 4);
}
LAMINA_HD float decode_q3_K(const block_q3_K& b, int e) {
  const int q = k23_low2(b.qs, e) - (q3k_high(b.hmask, e) ? 0 : 4);
  return f16_to_f32(b.d) * float(q3k_scale(b.scales, e / 16)) * float(q);
}
LAMINA_HD float decode_q4_K(const block_q4_K& b, int e) {
  uint8_t sc, m;
  q4k_scale_min(e / 32, b.scales, &sc, &m);
  const uint8_t byte = b.qs[32 * (e / 64) + e % 32];
  const int q = (e % 64 < 32) ? (byte & 15) : (byte >> 4);
  return f16_to_f32(b.d) * float(sc) * float(q) - f16_to_f32(b.dmin) * float(m);
}
LAMINA_HD float decode_q5_K(const block_q5_K& b, int e) {
  uint8_t sc, m;
  q4k_scale_min(e / 32, b.scales, &sc, &m);
  const uint8_t byte = b.qs[32 * (e / 64) + e % 32];
  const int q = ((e % 64 < 32) ? (byte & 15) : (byte >> 4)) + 16 * ((b.qh[e % 32] >> (e / 32)) & 1);
  return f16_to_f32(b.d) * float(sc) * float(q) - f16_to_f32(b.dmin) * float(m);
}
// Element e's 6 bits (0..63, the value + 32): the low 4 from ql, the high 2 from qh.
LAMINA_HD int q6k_quant(const block_q6_K& b, int e) {
  const int n = e / 128, k = (e % 128) / 32, l = e % 32;
  const uint8_t byte = b.ql[64 * n + 32 * (k & 1) + l];
  const int lo4 = k < 2 ? (byte & 15) : (byte >> 4);
  const int hi2 = (b.qh[32 * n + l] >> (2 * k)) & 3;
  return lo4 | hi2 << 4;
}
LAMINA_HD float decode_q6_K(const block_q6_K& b, int e) {
  return f16_to_f32(b.d) * float(b.scales[e / 16]) * float(q6k_quant(b, e) - 32);
}
LAMINA_HD float decode_q8_K(const block_q8_K& b, int e) { return b.d * float(b.qs[e]); }
// The IQ4 types' 16 values (a function, so that device code reads the same table).
LAMINA_HD constexpr int iq4_value(int nibble) {
  constexpr int8_t v[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
  return v[nibble];
}
// Sub-block ib's scale ls - 32 from the block's scale fields (also where they are kept apart from
// the quants: the GPU's repacked headers).
LAMINA_HD int iq4xs_scale(uint16_t scales_h, const uint8_t* scales_l, int ib) {
  return (((scales_l[ib / 2] >> (4 * (ib % 2))) & 15) | (((scales_h >> (2 * ib)) & 3) << 4)) - 32;
}
LAMINA_HD int iq4xs_scale(const block_iq4_xs& b, int ib) { return iq4xs_scale(b.scales_h, b.scales_l, ib); }
LAMINA_HD float decode_iq4_nl(const block_iq4_nl& b, int e) { return f16_to_f32(b.d) * float(iq4_value(q_nib(b.qs, e))); }
LAMINA_HD float decode_iq4_xs(const block_iq4_xs& b, int e) {
  const int ib = e / 32;
  return f16_to_f32(b.d) * float(iq4xs_scale(b, ib)) * float(iq4_value(q_nib(b.qs + 16 * ib, e % 32)));
}

}  // namespace lamina
