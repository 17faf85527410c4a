// A block's f64 sum (block_sum: norm_rope.cu and peer_all_reduce.cu), and the residual add and
// the next norm of one row (add_norm_row: add_norm in norm_rope.cu): x[i] += y(i); then, when w
// is given, h[i] = rmsnorm(x)[i] * w[i] and h's int8 blocks (h8, optional; cols % 32 == 0).
// Thread t takes elements t, t + blockDim.x, ... (a warp: 32 consecutive columns, one int8
// block); the sum of squares is f64 over the block (part: blockDim.x / 32 doubles of shared
// memory).
#pragma once

#include "kernels/common/q8_blocks.cuh"

#include <cstdint>

namespace lamina::kernels {

// The sum of v over the block, the same in every thread (part: blockDim.x / 32 doubles).
__device__ __forceinline__ double block_sum(double v, double* part) {
  for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(~0u, v, o);
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = v;
  __syncthreads();
  double t = 0;
  for (int i = 0; i < int(blockDim.x / 32); ++i) t += part[i];
  __syncthreads();  // (part is reused by the next call)
  return t;
}

template <class Y>
__device__ __forceinline__ void add_norm_row(float* __restrict__ xr, Y y, const float* __restrict__ w, int64_t cols,
                                             float eps, float* __restrict__ hr, uint8_t* __restrict__ h8r, double* part) {
  double ss = 0;
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
    const float v = xr[i] + y(i);
    xr[i] = v;
    ss += double(v) * v;
  }
  if (!w) return;
  const float sc = float(1.0 / sqrt(block_sum(ss, part) / double(cols) + double(eps)));
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {  // a warp's lanes: 32 consecutive columns
    const float v = xr[i] * sc * w[i];
    hr[i] = v;
    if (h8r) quantize_block32(v, cols, i / 32, h8r);
  }
}

}  // namespace lamina::kernels
