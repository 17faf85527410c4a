// x as int8 blocks for the dp4a GEMV variants: the caller's, or made by each block in shared memory.
#pragma once

#include "kernels/common/pdl.cuh"
#include "kernels/common/q8_blocks.cuh"
#include "kernels/gemv/gemv_internal.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

namespace lamina::kernels::gemv_detail {

// x as int8 blocks (kernels/common/q8_blocks.cuh): given by the caller (GemvProblem::x8, read
// through L1), or made by each block into shared memory with x8_bytes(k) per batch row.
__device__ inline void quantize_x_to_smem(const float* __restrict__ x, int64_t k, int batch, uint8_t* smem) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  for (int b = 0; b < batch; ++b) {
    constexpr int kInFlight = 16;  // independent x loads per lane before the reductions
    for (int64_t blk0 = warp; blk0 < k / 32; blk0 += int64_t(warps) * kInFlight) {
      float v[kInFlight];
#pragma unroll
      for (int u = 0; u < kInFlight; ++u) {
        const int64_t blk = blk0 + int64_t(u) * warps;
        v[u] = blk < k / 32 ? x[b * k + blk * 32 + lane] : 0.f;
      }
#pragma unroll
      for (int u = 0; u < kInFlight; ++u) {
        const int64_t blk = blk0 + int64_t(u) * warps;
        if (blk >= k / 32) break;
        quantize_block32(v[u], k, blk, smem + size_t(b) * x8_bytes(k));
      }
    }
  }
}

// The x the kernel reads: the caller's x8 when given, else x quantised by this block into smem
// (then every thread of the block must call this, before anything else touches smem).
__device__ inline const uint8_t* x8_source(const float* __restrict__ x, const uint8_t* __restrict__ x8, int64_t k,
                                           int batch, uint8_t* smem) {
  if (x8) return x8;
  quantize_x_to_smem(x, k, batch, smem);
  __syncthreads();
  return smem;
}

__device__ __forceinline__ int sum16(const int4& v) {  // sum of 16 int8
  const int ones = 0x01010101;
  return __dp4a(v.w, ones, __dp4a(v.z, ones, __dp4a(v.y, ones, __dp4a(v.x, ones, 0))));
}

// The parts of one batch row of x8: int8 values, block scales, block sums.
struct X8Row {
  const int8_t* q;
  const float* d;
  const int* sum;
  __device__ X8Row(const uint8_t* smem, int b, int64_t k)
      : q(reinterpret_cast<const int8_t*>(smem + size_t(b) * x8_bytes(k))),
        d(reinterpret_cast<const float*>(smem + size_t(b) * x8_bytes(k) + size_t(k))),
        sum(reinterpret_cast<const int*>(d + k / 32)) {}
};

// Launches a persistent-grid kernel that keeps x (batch x k) as int8 blocks in dynamic shared
// memory: as many blocks as fit on the device, but no more than the rows need.
template <class Kernel>
Status launch_x8_persistent(Kernel kernel, const char* name, const GemvProblem& p, const GemvConfig& c, int rows_per_warp,
                            cudaStream_t s) {
  const size_t smem = p.x8 ? 0 : size_t(p.batch) * x8_bytes(p.k);
  if (smem > 48 * 1024 && cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)) != cudaSuccess)
    return Status::error(std::string(name) + ": x does not fit in shared memory (" + std::to_string(smem) + " bytes)");
  int dev = 0, sms = 0, per_sm = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, c.warps * 32, smem);
  const int64_t rows_per_block = int64_t(c.warps) * rows_per_warp;
  const int64_t needed = (p.n + rows_per_block - 1) / rows_per_block;
  const unsigned grid = unsigned(std::max<int64_t>(1, std::min<int64_t>(needed, int64_t(sms) * std::max(per_sm, 1))));
  const Epilogue ep = epilogue_of(p);
  launch_pdl(kernel, grid, unsigned(c.warps * 32), smem, s, static_cast<const uint8_t*>(p.w),
             static_cast<const uint8_t*>(p.w_up), p.x, static_cast<const uint8_t*>(p.x8), p.y, p.n, p.k, p.batch, ep);
  return launch_status(name);
}

}  // namespace lamina::kernels::gemv_detail
