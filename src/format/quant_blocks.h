// ggml quantisation blocks, bit-exact with llama.cpp's files (ggml-common.h layout).
// Plain structs usable from host and device code. f16 fields are stored as raw uint16_t bits;
// decode them with f16_to_f32 from core/half.h.
//
// Legacy types hold 32 elements per block; K types hold 256 (a "super-block") split into
// sub-blocks of 16 or 32 with 6- or 8-bit scales. See docs in ../shared/docs/formats.md §2.
#pragma once

#include <cstdint>
#include <cstring>

namespace lamina {

inline constexpr int QK = 32;      // elements per legacy block
inline constexpr int QK_K = 256;   // elements per K-quant super-block
inline constexpr int K_SCALE_SIZE = 12;

struct block_q4_0 {      // d * (q - 8), q in 0..15
  uint16_t d;
  uint8_t qs[QK / 2];    // element e<16: qs[e] & 15; e>=16: qs[e-16] >> 4
};
struct block_q4_1 {      // d * q + m
  uint16_t d, m;
  uint8_t qs[QK / 2];
};
struct block_q5_0 {      // d * ((q | hbit<<4) - 16)
  uint16_t d;
  uint8_t qh[4];         // little-endian u32, bit e = 5th bit of element e
  uint8_t qs[QK / 2];
};
struct block_q5_1 {      // d * (q | hbit<<4) + m
  uint16_t d, m;
  uint8_t qh[4];
  uint8_t qs[QK / 2];
};
struct block_q8_0 {      // d * q
  uint16_t d;
  int8_t qs[QK];
};
struct block_q8_1 {      // d * q; s = d * sum(q) (used by Q4_1/Q5_1 dot products)
  uint16_t d, s;
  int8_t qs[QK];
};
struct block_q2_K {
  uint8_t scales[QK_K / 16];  // low 4 bits scale, high 4 bits min, per 16 elements
  uint8_t qs[QK_K / 4];
  uint16_t d, dmin;
};
struct block_q3_K {
  uint8_t hmask[QK_K / 8];
  uint8_t qs[QK_K / 4];
  uint8_t scales[12];         // 16 x 6-bit scales, offset by 32
  uint16_t d;
};
struct block_q4_K {
  uint16_t d, dmin;
  uint8_t scales[K_SCALE_SIZE];  // 8 x (6-bit scale, 6-bit min)
  uint8_t qs[QK_K / 2];          // 64-element chunks: 32 low nibbles then 32 high nibbles
};
struct block_q5_K {
  uint16_t d, dmin;
  uint8_t scales[K_SCALE_SIZE];
  uint8_t qh[QK_K / 8];
  uint8_t qs[QK_K / 2];
};
struct block_q6_K {
  uint8_t ql[QK_K / 2];      // low 4 bits
  uint8_t qh[QK_K / 4];      // high 2 bits
  int8_t scales[QK_K / 16];  // signed 8-bit scale per 16 elements
  uint16_t d;
};
// The non-linear 4-bit types: each nibble indexes a table of 16 int8 values (quant_decode.h's
// iq4_value), scaled by the block's d (IQ4_NL, 32
// elements) or by d * (ls - 32) per 32-element sub-block (IQ4_XS: 6-bit ls, its low 4 bits in
// scales_l (two per byte, sub-block ib in nibble ib % 2 of byte ib / 2), its high 2 in scales_h
// (bits 2ib)). Nibble layout as q4_0: qs[j] low = element j, high = element j + 16 (per 32).
struct block_iq4_nl {
  uint16_t d;
  uint8_t qs[QK / 2];
};
struct block_iq4_xs {
  uint16_t d;
  uint16_t scales_h;
  uint8_t scales_l[QK_K / 64];
  uint8_t qs[QK_K / 2];
};
struct block_q8_K {          // activation format for K-quant dot products
  float d;
  int8_t qs[QK_K];
  int16_t bsums[QK_K / 16];
};

static_assert(sizeof(block_q4_0) == 18);
static_assert(sizeof(block_q4_1) == 20);
static_assert(sizeof(block_q5_0) == 22);
static_assert(sizeof(block_q5_1) == 24);
static_assert(sizeof(block_q8_0) == 34);
static_assert(sizeof(block_q8_1) == 36);
static_assert(sizeof(block_q2_K) == 84);
static_assert(sizeof(block_q3_K) == 110);
static_assert(sizeof(block_q4_K) == 144);
static_assert(sizeof(block_q5_K) == 176);
static_assert(sizeof(block_q6_K) == 210);
static_assert(sizeof(block_q8_K) == 292);
static_assert(sizeof(block_iq4_nl) == 18);
static_assert(sizeof(block_iq4_xs) == 136);

// The t-th (0..15) signed scale of a Q3_K super-block: 6 bits from its 12 packed bytes, less 32.
#if defined(__CUDACC__)
__host__ __device__
#endif
inline int q3k_scale(const uint8_t* s12, int t) {
  const int lo = t < 8 ? (s12[t] & 15) : (s12[t - 8] >> 4);
  const int hi = (s12[8 + t % 4] >> (2 * (t / 4))) & 3;
  return (lo | hi << 4) - 32;
}

// Unpacks the j-th (0..7) 6-bit scale and min of a Q4_K/Q5_K super-block.
#if defined(__CUDACC__)
__host__ __device__
#endif
inline void q4k_scale_min(int j, const uint8_t* s, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = uint8_t((s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4));
    *m = uint8_t((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
  }
}

// All eight scales and mins of a q4_K block at once, q4k_scale_min's formula four at a time on
// 32-bit words: out[0..8) the scales, out[8..16) the mins. Scales and mins 0-3 are the low 6 bits
// of bytes 0-3 and 4-7; 4-7 take their low 4 bits from the nibbles of bytes 8-11 and their high
// 2 bits from the top of bytes 0-3 (scales) and 4-7 (mins).
inline void q4k_scales_mins(const uint8_t* s, uint8_t out[16]) {
  uint32_t u[3];
  std::memcpy(u, s, 12);
  const uint32_t w[4] = {u[0] & 0x3F3F3F3Fu, (u[2] & 0x0F0F0F0Fu) | ((u[0] >> 6) & 0x03030303u) << 4,
                         u[1] & 0x3F3F3F3Fu, ((u[2] >> 4) & 0x0F0F0F0Fu) | ((u[1] >> 6) & 0x03030303u) << 4};
  std::memcpy(out, w, 16);
}

}  // namespace lamina
