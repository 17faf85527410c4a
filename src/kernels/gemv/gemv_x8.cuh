// x as int8 blocks for the dp4a GEMV variants: the caller's, or made by each block in shared memory.
#pragma once

#include "kernels/common/pdl.cuh"
#include "kernels/common/q8_blocks.cuh"
#include "kernels/gemv/gemv_internal.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace lamina::kernels::gemv_detail {

// x as int8 blocks (kernels/common/q8_blocks.cuh): given by the caller (GemvProblem::x8, read
// through L1), or made by each block into shared memory with x8_bytes(k) per batch row (or
// `stride` bytes, at least that, for a layout padded against bank conflicts).
__device__ inline void quantize_x_to_smem(const float* __restrict__ x, int64_t k, int batch, uint8_t* smem,
                                          size_t stride = 0) {
  if (stride == 0) stride = x8_bytes(k);
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
        quantize_block32(v[u], k, blk, smem + size_t(b) * stride);
      }
    }
  }
}

// Where a dp4a kernel's x comes from: x8 (int8 blocks made by the kernel before), or x (f32),
// quantised by each block into shared memory; with norm_w, x is first normalised by RMSNorm with
// that weight (GemvProblem::norm_w: the norm fused into the GEMV that consumes it).
struct XSource {
  const float* x;
  const uint8_t* x8;
  const float* norm_w;
  float norm_eps;
  float* norm_out;     // with norm_w: block 0 writes the normalised x here ([batch][k] f32)
  uint8_t* norm_out8;  // optional: and its int8 blocks ([batch][x8_bytes(k)])
  const double* ss;    // GemvProblem::x8_ss (x8 holds x * w): scale the sums by the RMS (RmsParts)
};

// RMSNorm of each batch row of x, then the int8 blocks of the result into smem: the values of
// ops' rmsnorm (f64 sum of squares, v = x * scale * w), the blocks of quantize_x_to_smem. The
// second read of x hits L1.
__device__ inline void norm_quantize_x_to_smem(const XSource& in, int64_t k, int batch, uint8_t* smem) {
  __shared__ double part[32];
  __shared__ float scale_s;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  for (int b = 0; b < batch; ++b) {
    const float* xr = in.x + b * k;
    double ss = 0;
    if (k % 4 == 0) {
#pragma unroll 4
      for (int64_t i = int64_t(threadIdx.x) * 4; i < k; i += int64_t(blockDim.x) * 4) {
        const float4 v = *reinterpret_cast<const float4*>(xr + i);
        ss += double(v.x) * v.x + double(v.y) * v.y + double(v.z) * v.z + double(v.w) * v.w;
      }
    } else {
      for (int64_t i = threadIdx.x; i < k; i += blockDim.x) ss += double(xr[i]) * xr[i];
    }
    for (int o = 16; o; o >>= 1) ss += __shfl_xor_sync(~0u, ss, o);
    if (lane == 0) part[warp] = ss;
    __syncthreads();
    if (warp == 0) {
      double v = lane < warps ? part[lane] : 0.0;
      for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(~0u, v, o);
      if (lane == 0) scale_s = float(1.0 / sqrt(v / double(k) + double(in.norm_eps)));
    }
    __syncthreads();
    const float scale = scale_s;
    constexpr int kInFlight = 4;  // blocks per warp whose x and w loads go out together (registers: 2 per block)
    for (int64_t blk0 = warp; blk0 < k / 32; blk0 += int64_t(warps) * kInFlight) {
      float xv[kInFlight], wv[kInFlight];
#pragma unroll
      for (int u = 0; u < kInFlight; ++u) {
        const int64_t blk = blk0 + int64_t(u) * warps;
        xv[u] = blk < k / 32 ? xr[blk * 32 + lane] : 0.f;
        wv[u] = blk < k / 32 ? in.norm_w[blk * 32 + lane] : 0.f;
      }
#pragma unroll
      for (int u = 0; u < kInFlight; ++u) {
        const int64_t blk = blk0 + int64_t(u) * warps;
        if (blk >= k / 32) break;
        const float v = xv[u] * scale * wv[u];
        if (blockIdx.x == 0) in.norm_out[b * k + blk * 32 + lane] = v;
        quantize_block32(v, k, blk, smem + size_t(b) * x8_bytes(k));
      }
    }
    __syncthreads();  // part and scale_s are reused by the next row
  }
  if (blockIdx.x == 0 && in.norm_out8) {  // the int8 copy for later GEMVs of the same x
    const size_t n16 = size_t(batch) * x8_bytes(k) / 16;
    for (size_t i = threadIdx.x; i < n16; i += blockDim.x)
      reinterpret_cast<uint4*>(in.norm_out8)[i] = reinterpret_cast<const uint4*>(smem)[i];
  }
}

// The x the kernel reads: the caller's x8 when given, else x (normalised when norm_w is set)
// quantised by this block into smem (then every thread of the block must call this, before
// anything else touches smem).
__device__ inline const uint8_t* x8_source(const XSource& in, int64_t k, int batch, uint8_t* smem) {
  if (in.x8) return in.x8;
  if (in.norm_w) norm_quantize_x_to_smem(in, k, batch, smem);
  else quantize_x_to_smem(in.x, k, batch, smem);
  __syncthreads();
  return smem;
}

__device__ __forceinline__ int sum16(const int4& v) {  // sum of 16 int8
  const int ones = 0x01010101;
  return __dp4a(v.w, ones, __dp4a(v.z, ones, __dp4a(v.y, ones, __dp4a(v.x, ones, 0))));
}

// One batch row of x8 (layout in kernels/common/q8_blocks.h).
struct X8Row {
  const uint8_t* row;
  int64_t k;
  __device__ X8Row(const uint8_t* smem, int b, int64_t k) : row(smem + size_t(b) * x8_bytes(k)), k(k) {}
  // The x side of two runs of 16 weights (q4_K and q6_K take two per 16-byte chunk of quants):
  // the 16 int8 values from elements e_lo and e_hi (16-aligned), their blocks' steps, and each
  // run's share of its block's largest element: the byte of the run it meets (0..15) and its Q,
  // 0 when the element lies in the block's other run; the sums are those of the run's q and Q.
  struct Halves {
    int4 lo, hi;
    float d_lo, d_hi;
    int sum_lo, sum_hi;
    int m_lo, m_hi;
    int big_lo, big_hi;
  };
  __device__ __forceinline__ Halves halves(int64_t e_lo, int64_t e_hi) const {
    Halves h;
    h.lo = *reinterpret_cast<const int4*>(row + e_lo);
    h.hi = *reinterpret_cast<const int4*>(row + e_hi);
    const X8Facts lo = x8_facts(row, k, e_lo / 32), hi = x8_facts(row, k, e_hi / 32);
    h.d_lo = lo.d, h.d_hi = hi.d;
    h.m_lo = lo.m & 15, h.m_hi = hi.m & 15;
    h.big_lo = (lo.m >> 4) == int(e_lo / 16 % 2) ? lo.big : 0;
    h.big_hi = (hi.m >> 4) == int(e_hi / 16 % 2) ? hi.big : 0;
    h.sum_lo = sum16(h.lo) + h.big_lo, h.sum_hi = sum16(h.hi) + h.big_hi;
    return h;
  }
};

// Blocks per SM of a persistent grid: as many as fit, or at most `max_per_sm` (> 0) as the variant
// asks.
inline int gemv_blocks_per_sm(int fit, int max_per_sm) {
  return std::max(1, max_per_sm > 0 ? std::min(fit, max_per_sm) : fit);
}

// Dynamic shared memory for x of a persistent dp4a launch: none when the caller gives x8 (and no
// norm is to be made from x), else batch rows of int8 blocks.
inline size_t x8_smem_bytes(const GemvProblem& p) {
  const bool split = p.x8_ss != nullptr;  // x8 and its sums of squares given (takes_x8_ss variants)
  return p.x8 && (!p.norm_w || split) ? 0 : size_t(p.batch) * x8_bytes(p.k);
}

inline XSource xsource_of(const GemvProblem& p) {
  const bool split = p.x8_ss != nullptr;
  return XSource{p.x,
                 p.norm_w && !split ? nullptr : static_cast<const uint8_t*>(p.x8),
                 split ? nullptr : p.norm_w,
                 p.norm_eps,
                 p.norm_out,
                 static_cast<uint8_t*>(p.norm_out8),
                 p.x8_ss};
}

// Grid of a persistent launch of `kernel` with `smem` bytes of dynamic shared memory (set as the
// kernel's maximum when above the default 48 KiB): as many blocks as fit on the device (at most
// max_per_sm per SM when > 0), but no more than the rows need.
// rows_per_block: the rows of y one block covers at a time (warps x rows per warp, or the rows a
// block's warps share).
template <class Kernel>
Status persistent_grid_rows(Kernel kernel, const char* name, const GemvProblem& p, int warps, int64_t rows_per_block,
                            size_t smem, int max_per_sm, unsigned& grid) {
  // Above the default 48 KiB with the kernel's static shared memory (batch 8 of k = 4096 is 48 KiB
  // of x alone) the kernel must opt in. (Under 32 KiB of x no variant's static memory, at most
  // 16 KiB, gets there: the check stays off the launch path of the small cases.)
  cudaFuncAttributes fa{};
  if (smem > 32 * 1024 && (cudaFuncGetAttributes(&fa, kernel) != cudaSuccess ||
                           (smem + fa.sharedSizeBytes > 48 * 1024 &&
                            cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)) != cudaSuccess)))
    return Status::error(std::string(name) + ": does not fit in shared memory (" + std::to_string(smem) + " bytes)");
  int dev = 0, sms = 0, per_sm = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, warps * 32, smem);
  const int64_t needed = (p.n + rows_per_block - 1) / rows_per_block;
  grid = unsigned(std::max<int64_t>(1, std::min<int64_t>(needed, int64_t(sms) * gemv_blocks_per_sm(per_sm, max_per_sm))));
  return Status{};
}
template <class Kernel>
Status persistent_grid(Kernel kernel, const char* name, const GemvProblem& p, const GemvConfig& c, int rows_per_warp,
                       size_t smem, int max_per_sm, unsigned& grid) {
  return persistent_grid_rows(kernel, name, p, c.warps, int64_t(c.warps) * rows_per_warp, smem, max_per_sm, grid);
}

// Launches a persistent-grid kernel that keeps x (batch x k) as int8 blocks in dynamic shared
// memory (persistent_grid).
template <class Kernel>
Status launch_x8_persistent(Kernel kernel, const char* name, const GemvProblem& p, const GemvConfig& c, int rows_per_warp,
                            cudaStream_t s, int max_per_sm = 0) {
  const size_t smem = x8_smem_bytes(p);
  unsigned grid = 0;
  if (Status st = persistent_grid(kernel, name, p, c, rows_per_warp, smem, max_per_sm, grid); !st.ok) return st;
  launch_pdl(kernel, grid, unsigned(c.warps * 32), smem, s, static_cast<const uint8_t*>(p.w),
             static_cast<const uint8_t*>(p.w_up), xsource_of(p), p.y, p.n, p.k, p.batch, epilogue_of(p));
  return launch_status(name);
}

}  // namespace lamina::kernels::gemv_detail
