// Device side of kernels/common/q8_blocks.h: one warp quantises a block of 32.
#pragma once

#include "kernels/common/q8_blocks.h"

#include <cstdint>

namespace lamina::kernels {

// One warp quantises block `blk` of a row at `row` (layout in q8_blocks.h): lane i holds the block's
// element i in v. Every lane of the warp must call it.
__device__ __forceinline__ void quantize_block32(float v, int64_t k, int64_t blk, uint8_t* row) {
  const int lane = threadIdx.x % 32;
  // The two largest |v| by integer reductions of their bits (redux.sync, one instruction each
  // where a float butterfly took five shuffle rounds): non-negative floats order as their bits do.
  const unsigned a = __float_as_uint(fabsf(v));
  const unsigned a1 = __reduce_max_sync(0xffffffffu, a);
  const int m = __ffs(__ballot_sync(0xffffffffu, a == a1)) - 1;  // the first lane of equals
  const unsigned a2 = __reduce_max_sync(0xffffffffu, lane == m ? 0u : a);  // the largest of the other 31
  const float d = fmaxf(__uint_as_float(a2), __uint_as_float(a1) * kX8StepFloor) / 127.f, id = d != 0.f ? 1.f / d : 0.f;
  const int q = int(roundf(v * id));  // at lane m: Q, up to 127 * 2^14
  reinterpret_cast<int8_t*>(row)[blk * 32 + lane] = int8_t(lane == m ? 0 : q);
  const int sum = __reduce_add_sync(0xffffffffu, q);
  if (lane == m) reinterpret_cast<int4*>(row + k)[blk] = make_int4(__float_as_int(d), m, q, sum);
}

// The facts of block blk of an x8 row (layout in q8_blocks.h), in one 16-byte load.
__device__ __forceinline__ X8Facts x8_facts(const uint8_t* row, int64_t k, int64_t blk) {
  const int4 f = reinterpret_cast<const int4*>(row + k)[blk];
  return {__int_as_float(f.x), f.y, f.z, f.w};
}

// The 32-bit word of a 16-byte chunk (held as four words) that holds byte i (0..15): how a
// consumer finds the quant its block's largest element meets among weights it has in registers
// (selects, no local-memory indexing). Byte i is then (word >> (i % 4 * 8)) & 0xFF.
__device__ __forceinline__ uint32_t chunk_word(uint32_t w0, uint32_t w1, uint32_t w2, uint32_t w3, int i) {
  const uint32_t lo = i & 4 ? w1 : w0, hi = i & 4 ? w3 : w2;
  return i & 8 ? hi : lo;
}
__device__ __forceinline__ uint32_t chunk_byte(uint32_t w0, uint32_t w1, uint32_t w2, uint32_t w3, int i) {
  return (chunk_word(w0, w1, w2, w3, i) >> ((i & 3) * 8)) & 0xFFu;
}

// PTX prmt.b32 (generic mode): four bytes picked from the eight of (a, b), one per selector
// nibble (0..7; +8 replicates the picked byte's sign bit instead).
__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
}

// dp4a of unsigned bytes a with signed bytes b (PTX dp4a.u32.s32; the CUDA intrinsic has no
// mixed form): lets a Q4 chunk's high nibbles be used in place (w & 0xF0F0F0F0, 16x each).
__device__ __forceinline__ int dp4a_us(uint32_t a, int b, int c) {
  int d;
  asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

// The producer side of an RMSNorm that a dp4a GEMV applies later (GemvProblem::x8, x8_ss): block
// `blk` of the int8 copy of v * gain, and the block's sum of squares of v (f64) in *ss (written
// by lane 0; ss may be null). Every lane of the warp must call it.
__device__ __forceinline__ void quantize_block32_ss(float v, float gain, int64_t k, int64_t blk, uint8_t* row,
                                                    double* ss) {
  quantize_block32(v * gain, k, blk, row);
  if (!ss) return;
  double s = double(v) * v;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (threadIdx.x % 32 == 0) *ss = s;
}

}  // namespace lamina::kernels
