// Device side of kernels/common/q8_blocks.h: one warp quantises a block of 32.
#pragma once

#include "kernels/common/q8_blocks.h"

#include <cstdint>

namespace lamina::kernels {

// One warp quantises block `blk` of a row at `row` (layout in q8_blocks.h): lane i holds the block's
// element i in v. Every lane of the warp must call it.
__device__ __forceinline__ void quantize_block32(float v, int64_t k, int64_t blk, uint8_t* row) {
  const int lane = threadIdx.x % 32;
  float amax = fabsf(v);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float d = amax / 127.f, id = d != 0.f ? 1.f / d : 0.f;
  const int q = int(roundf(v * id));
  reinterpret_cast<int8_t*>(row)[blk * 32 + lane] = int8_t(q);
  int sum = q;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (lane == 0) {
    reinterpret_cast<float*>(row + k)[blk] = d;
    reinterpret_cast<int*>(row + k + (k / 32) * 4)[blk] = sum;
  }
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
