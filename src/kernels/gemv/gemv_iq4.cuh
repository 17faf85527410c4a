// The IQ4 table looked up by byte permutes, for the dp4a GEMVs on IQ4_XS (iq4xs_dp4a in place,
// q_dp4a on the planes).
#pragma once

#include "format/quant_decode.h"
#include "kernels/common/q8_blocks.cuh"

#include <cstdint>

namespace lamina::kernels::gemv_detail {

// Bytes 4i .. 4i + 3 of the IQ4 table as one little-endian word.
constexpr uint32_t iq4_word(int i) {
  uint32_t w = 0;
  for (int b = 3; b >= 0; --b) w = w << 8 | uint32_t(uint8_t(int8_t(iq4_value(4 * i + b))));
  return w;
}

// The IQ4 values of the four 4-bit indices in the low 16 bits of s (index i in bits 4i..4i+3),
// as four int8 in one word (byte i for index i). prmt picks from 8 bytes with 3 bits of each
// selector nibble (the fourth asks for a sign fill), so each half of the table is looked up with
// the low 3 bits and a third prmt takes byte i from the upper half where index i is 8 or more.
__device__ __forceinline__ uint32_t iq4_lookup4(uint32_t s) {
  constexpr uint32_t t0 = iq4_word(0), t1 = iq4_word(1), t2 = iq4_word(2), t3 = iq4_word(3);
  const uint32_t s3 = s & 0x7777u;
  const uint32_t lo = prmt(t0, t1, s3), hi = prmt(t2, t3, s3);
  return prmt(lo, hi, 0x3210u | ((s >> 1) & 0x4444u));
}

}  // namespace lamina::kernels::gemv_detail
