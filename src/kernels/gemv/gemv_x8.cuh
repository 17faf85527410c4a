// x as int8 blocks in shared memory, shared by the dp4a GEMV variants.
#pragma once

#include <cstdint>

namespace lamina::kernels::gemv_detail {

// Shared memory per batch row: k int8 values, then k/32 scales and k/32 sums, padded to 16
// bytes so that every row's int8 blocks stay 16-byte aligned for vector loads.
__host__ __device__ inline size_t x8_bytes(int64_t k) { return (size_t(k) + size_t(k / 32) * 8 + 15) & ~size_t(15); }

__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }

__device__ inline void quantize_x_to_smem(const float* __restrict__ x, int64_t k, int batch, uint8_t* smem) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  for (int b = 0; b < batch; ++b) {
    int8_t* q = reinterpret_cast<int8_t*>(smem + size_t(b) * x8_bytes(k));
    float* d = reinterpret_cast<float*>(smem + size_t(b) * x8_bytes(k) + size_t(k));
    int* s = reinterpret_cast<int*>(d + k / 32);
    constexpr int kInFlight = 8;  // independent x loads per lane before the reductions
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
        float amax = fabsf(v[u]);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
        const float dd = amax / 127.f, id = dd != 0.f ? 1.f / dd : 0.f;
        const int qi = int(roundf(v[u] * id));
        q[blk * 32 + lane] = int8_t(qi);
        int sum = qi;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        if (lane == 0) d[blk] = dd, s[blk] = sum;
      }
    }
  }
}


// The parts of one batch row of the shared-memory x: int8 values, block scales, block sums.
struct X8Row {
  const int8_t* q;
  const float* d;
  const int* sum;
  __device__ X8Row(const uint8_t* smem, int b, int64_t k)
      : q(reinterpret_cast<const int8_t*>(smem + size_t(b) * x8_bytes(k))),
        d(reinterpret_cast<const float*>(smem + size_t(b) * x8_bytes(k) + size_t(k))),
        sum(reinterpret_cast<const int*>(d + k / 32)) {}
};

}  // namespace lamina::kernels::gemv_detail
