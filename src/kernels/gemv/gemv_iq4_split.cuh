// The IQ4 table looked up as two halves whose bytes add up to the values, for the dp4a GEMVs on
// IQ4_NL and IQ4_XS's planes (q_dp4a). (A header of its own beside gemv_iq4.cuh, which the prompt
// GEMMs include too: they convert the looked-up values to f16 and keep iq4_lookup4.)
#pragma once

#include "kernels/gemv/gemv_iq4.cuh"

#include <cstdint>

namespace lamina::kernels::gemv_detail {

// The IQ4 values of a word's eight indices as two pairs of words whose bytes add up to them, for
// two dp4a each instead of one lookup each: about half of iq4_lookup4's ALU work a value (4 byte
// permutes, 2 shifts and an xor for 8 values against 13 permutes, shifts and masks).
//   lo: the table's lower half (indices 0..7, all negative), looked up with the index as it is:
//       an index of 8 or more sets the selector's sign bit, which gives the picked byte's sign, -1;
//   hi: the upper half plus one (indices 8..15: 2..114, all positive), looked up with the sign
//       bit flipped: an index under 8 gives the sign of a positive byte, 0; 8 or more, iq4 + 1.
// So lo + hi is iq4[i] for either half, and dp4a(lo, x) + dp4a(hi, x) is the table's dot product.
// lo[0], hi[0]: indices in bits 0..15 (elements 0..3 of the word), lo[1], hi[1]: bits 16..31.
struct Iq4Split {
  uint32_t lo[2], hi[2];
};
constexpr bool iq4_split_holds() {
  for (int i = 0; i < 8; ++i)
    if (iq4_value(i) >= 0 || iq4_value(8 + i) + 1 <= 0 || iq4_value(8 + i) + 1 > 127) return false;
  return true;
}
static_assert(iq4_split_holds(), "the split lookup needs a negative lower half and a positive upper half");
// Bytes 4i .. 4i + 3 of the upper half plus one: iq4_word's bytes, each + 1 (no carries: all under 127).
constexpr uint32_t iq4_upper_word(int i) { return iq4_word(2 + i) + 0x01010101u; }
__device__ __forceinline__ Iq4Split iq4_split8(uint32_t w) {
  constexpr uint32_t l0 = iq4_word(0), l1 = iq4_word(1), u0 = iq4_upper_word(0), u1 = iq4_upper_word(1);
  const uint32_t f = w ^ 0x88888888u;
  return Iq4Split{{prmt(l0, l1, w), prmt(l0, l1, w >> 16)}, {prmt(u0, u1, f), prmt(u0, u1, f >> 16)}};
}

// The IQ4 value of the index in bits 0..3 of s (the bits above are ignored: s may be a word of
// indices shifted down to the one wanted), as an int, by the same two halves: each selector asks
// for byte idx in its low nibble (lo: idx, hi: idx with its top bit flipped) and, in the other
// three, for the sign of byte 0 of its half, which is the sign of all of them (lo: negative, hi:
// positive), so each half comes sign-extended (lo: iq4[idx], or -1 for idx >= 8; hi: 0, or
// iq4[idx] + 1). One LOP3 a selector from s (against a multiply, a mask and two LOPs from idx).
__device__ __forceinline__ int iq4_split1(uint32_t s) {
  constexpr uint32_t l0 = iq4_word(0), l1 = iq4_word(1), u0 = iq4_upper_word(0), u1 = iq4_upper_word(1);
  return int(prmt(l0, l1, (s & 0xFu) | 0x8880u)) + int(prmt(u0, u1, (s & 0xFu) ^ 0x8888u));
}

}  // namespace lamina::kernels::gemv_detail
