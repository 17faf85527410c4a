// attention_wo: a decode token's attention block and its output projection in one kernel — RoPE,
// the cache store and attention as attention_decode_rope, then x += Wo o with Wo split over heads
// (split-K), the residual add and the next RMSNorm's int8 blocks (matmul_add_norm's y8
// epilogue).
//
// Why: in the decode chain of the 7B q4_0 model the attention kernel and the Wo GEMV after it
// added 5.1 + 6.1 µs per layer (CUPTI trace, docs/benchmarks.md) for ~1 MB of K/V and 9.4 MB of
// weights: the attention is a chain of dependent loads on 32 SMs, and the Wo GEMV could start
// streaming only once it was done. Here every block copies its slice of Wo into shared memory
// before the PDL wait (while the Q/K/V GEMV before is still running), and the attention runs
// with those bytes in flight.
//
// Grid (n_head, splits), 16 warps. Block (h, c):
//   1. before the wait: the RoPE angles of the position; cp.async of Wo's rows
//      [c*R, c*R + R) (R = n / splits), columns of head h (head_dim / 32 blocks per row) into
//      shared memory — lane-private staging, 16 bytes per lane and step — and their scales;
//   2. head h's attention exactly as attention_decode_rope (every block of the head computes it
//      and writes the same cache row; q and k are not written back), o into shared memory and
//      its int8 blocks (the blocks the Wo GEMV would read: head_dim is a multiple of 32);
//   3. partial[h][row] = the head's slice of row `row` times o (dp4a, gemv_dp4a.cuh's chunk
//      arithmetic), each row's chunks reduced across lanes in a fixed order;
//   4. the warp that stores the last partials of a 32-row block of x (a counter per block, reset
//      by that warp) sums the heads' partials in head order — the result does not depend on
//      timing — adds the sum to x and writes the int8 blocks of x * gain with their sums of
//      squares.
#include "kernels/common/launch_status.h"
#include "kernels/common/pdl.cuh"
#include "kernels/common/q8_blocks.cuh"
#include "kernels/gemv/gemv_common.cuh"
#include "kernels/gemv/gemv_dp4a.cuh"
#include "kernels/ops/attention_head_rope.cuh"
#include "kernels/ops/ops.h"

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <string>

namespace lamina::kernels {
namespace {

using namespace attn_detail;

constexpr int kWarps = 16;
constexpr int kMaxSplits = 64;   // row ranges per head
constexpr int kWarpBlocks = 4;   // 32-row blocks of x a warp's rows may touch (rows / kWarps <= 64)

__device__ __forceinline__ void cp_async16(void* smem, const void* src, uint64_t policy) {
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;" ::"r"(
                   static_cast<uint32_t>(__cvta_generic_to_shared(smem))),
               "l"(src), "l"(policy)
               : "memory");
}

// kBytes (4, 8 or 16; both addresses kBytes-aligned) through L1.
template <int kBytes>
__device__ __forceinline__ void cp_async_small(void* smem, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2;" ::"r"(static_cast<uint32_t>(__cvta_generic_to_shared(smem))),
               "l"(src), "n"(kBytes)
               : "memory");
}

// The Wo slice of one block in lane-private staging: lane `lane` of warp w holds, in step i,
// chunk (lane % CPR) of row w * RW + i * (32 / CPR) + lane / CPR of the block's R rows
// (RW = R / kWarps rows per warp, CPR = 16-byte chunks per row and head).
//   q  [steps][kWarps][32] uint4          quant chunks
//   s  [R][HD / 32 * kScale] bytes        each row's block scales of the head (f16 d, or d and m)
template <int kBits, bool kMin, int HD>
struct WoSlice {
  static constexpr int kPer = kBits == 4 ? 32 : 16;  // weights per chunk
  static constexpr int kCpr = HD / kPer;             // chunks per row and head
  static constexpr int kRowsPerStep = 32 / kCpr;
  static constexpr int kScale = kMin ? 4 : 2;             // bytes per block scale
  static constexpr int kRowScales = HD / 32 * kScale;     // 4 .. 16 bytes: one cp.async
  int rw, steps;
  __device__ __forceinline__ WoSlice(int64_t rows) : rw(int(rows / kWarps)), steps((rw + kRowsPerStep - 1) / kRowsPerStep) {}
  __device__ __forceinline__ int row_in_warp(int step) const { return step * kRowsPerStep + int(threadIdx.x % 32) / kCpr; }
  __device__ __forceinline__ size_t index(int step) const { return (size_t(step) * kWarps + threadIdx.x / 32) * 32 + threadIdx.x % 32; }
};

template <int HD, int kBits, bool kMin>
__global__ void __launch_bounds__(kWarps * 32)
    attn_wo_kernel(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
                   const int32_t* __restrict__ pos, RopeArgs r, AttentionArgs a, float theta_scale,
                   __half* __restrict__ kc, __half* __restrict__ vc, float* __restrict__ out, AttnWoArgs wa) {
  constexpr int P = 8;
  using Step = gemv_detail::Dp4aStep<kBits, kMin, 1, 1>;
  using Slice = WoSlice<kBits, kMin, HD>;
  extern __shared__ __align__(16) uint8_t dyn[];
  __shared__ RopeHeadSmem<kWarps, HD> hs;
  __shared__ __align__(16) uint8_t o8[HD + HD / 32 * 8];  // o as int8 blocks (q8_blocks.h, k = HD)
  const int h = blockIdx.x, c = blockIdx.y, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int position = pos[0];
  const int64_t n = wa.n, K = int64_t(a.n_head) * HD, rows = n / gridDim.y, row0 = c * rows;
  const Slice slice(rows);
  auto* stage_q = reinterpret_cast<uint4*>(dyn);
  uint8_t* stage_s = dyn + size_t(slice.steps) * kWarps * 32 * 16;

  // 1. Weights and angles: nothing here depends on an earlier kernel.
  const auto* wo = static_cast<const uint8_t*>(wa.wo);
  const size_t qrow = size_t(K) * kBits / 8, srow = size_t(K / 32) * Slice::kScale;
  const uint64_t policy = gemv_detail::evict_first_policy();
  const int chunk = lane % Slice::kCpr;
  const int64_t l = int64_t(h) * Slice::kCpr + chunk;  // the chunk's index along the row
  for (int i = 0; i < slice.steps; ++i) {
    const int rl = slice.row_in_warp(i);
    if (rl >= slice.rw) continue;
    const int64_t rb = int64_t(warp) * slice.rw + rl, row = row0 + rb;  // in the block, in Wo
    cp_async16(stage_q + slice.index(i), wo + size_t(row) * qrow + size_t(l) * 16, policy);
    if (chunk == 0)
      cp_async_small<Slice::kRowScales>(stage_s + rb * Slice::kRowScales,
                                        wo + size_t(n) * qrow + size_t(row) * srow + size_t(h) * Slice::kRowScales);
  }
  asm volatile("cp.async.commit_group;" ::: "memory");
  rope_angles(hs.cs, hs.sn, position, theta_scale, r);
  pdl_enter();

  // 2. Attention of head h (attention_decode_rope's steps; q and k stay unrotated in memory; every
  //    block of the head writes the same cache row).
  rope_attend_head<kWarps, HD, P>(hs, h, position, q, k, v, nullptr, nullptr, r, a, kc, vc, [&](int d, float o) {
    if (out && c == 0) out[int64_t(h) * HD + d] = o;
    quantize_block32(o, HD, d / 32, o8);
  });
  asm volatile("cp.async.wait_all;" ::: "memory");  // this lane's staged chunks
  __syncthreads();                                 // o8 complete

  // 3. The head's share of each of the warp's rows.
  for (int i = 0; i < slice.steps; ++i) {
    const int rl = slice.row_in_warp(i);
    float p = 0.f;
    if (rl < slice.rw) {
      const uint8_t* sp = stage_s + (int64_t(warp) * slice.rw + rl) * Slice::kRowScales + (chunk * Slice::kPer / 32) * Slice::kScale;
      const float2 dm = Step::scale_at(sp);
      p = Step::chunk_dot(stage_q[slice.index(i)], Step::x_chunk(o8, HD, chunk), dm.x, dm.y);
    }
#pragma unroll
    for (int o = 1; o < Slice::kCpr; o <<= 1) p += __shfl_xor_sync(0xffffffffu, p, o);
    if (rl < slice.rw && chunk == 0) wa.partial[int64_t(h) * n + row0 + int64_t(warp) * slice.rw + rl] = p;
  }

  // 4. Each 32-row block of x is reduced by the warp that stores its last head's partials: the
  //    warp counts its rows' blocks once its stores are visible (a counter per 32-row block; lane
  //    j counts the warp's j-th block). x and the gain of those blocks are loaded first.
  const gemv_detail::Epilogue ep{nullptr, nullptr, false, static_cast<uint8_t*>(wa.y8), nullptr, wa.gain, wa.y8_ss};
  const int64_t first_row = row0 + int64_t(warp) * slice.rw, end_row = first_row + slice.rw;
  const int64_t b0 = first_row / 32, nb = (end_row + 31) / 32 - b0;  // <= kWarpBlocks (attention_wo_supported)
  float xv[kWarpBlocks], gv[kWarpBlocks];
#pragma unroll
  for (int j = 0; j < kWarpBlocks; ++j)
    if (j < nb) xv[j] = wa.x[(b0 + j) * 32 + lane], gv[j] = wa.gain[(b0 + j) * 32 + lane];
  __threadfence();  // this lane's partials (stored above) before the warp counts them
  __syncwarp();
  bool last = false;
  if (lane < nb) {
    const int64_t lo = std::max<int64_t>((b0 + lane) * 32, first_row), hi = std::min<int64_t>((b0 + lane) * 32 + 32, end_row);
    last = atomicAdd(wa.counters + b0 + lane, unsigned(hi - lo)) + unsigned(hi - lo) == 32u * gridDim.x;
  }
  const unsigned lasts = __ballot_sync(0xffffffffu, last);
  if (!lasts) return;
  __threadfence();  // every head's partials of those blocks are visible from here on
#pragma unroll
  for (int j = 0; j < kWarpBlocks; ++j) {
    if (!(lasts >> j & 1u)) continue;
    const int64_t blk = b0 + j, row = blk * 32 + lane;
    float sum = 0.f;
#pragma unroll 8
    for (int hh = 0; hh < int(gridDim.x); ++hh) sum += __ldcg(wa.partial + int64_t(hh) * n + row);
    const float val = xv[j] + sum;
    wa.x[row] = val;
    gemv_detail::write_y8_gained(ep, blk, n, 1, [&](int) { return val; }, gv[j]);
    if (lane == 0) wa.counters[blk] = 0;
  }
}

template <int HD, int kBits, bool kMin>
Status launch(const float* q, const float* k, const float* v, const int32_t* pos, const RopeArgs& r,
              const AttentionArgs& a, float theta_scale, __half* kc, __half* vc, float* out, const AttnWoArgs& wa,
              cudaStream_t s) {
  auto kernel = attn_wo_kernel<HD, kBits, kMin>;
  const int64_t rows = wa.n / wa.splits, rw = rows / kWarps, per_step = 32 / WoSlice<kBits, kMin, HD>::kCpr;
  const size_t steps = size_t((rw + per_step - 1) / per_step);
  const size_t smem = steps * kWarps * 32 * 16 + size_t(rows) * WoSlice<kBits, kMin, HD>::kRowScales;
  if (smem > 48 * 1024 && cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)) != cudaSuccess)
    return Status::error("attention_wo: the Wo slice does not fit in shared memory (" + std::to_string(smem) + " bytes)");
  launch_pdl(kernel, dim3(unsigned(a.n_head), unsigned(wa.splits)), kWarps * 32, smem, s, q, k, v, pos, r, a,
             theta_scale, kc, vc, out, wa);
  return launch_status("attention_wo");
}

template <int HD>
Status launch_type(const float* q, const float* k, const float* v, const int32_t* pos, const RopeArgs& r,
                   const AttentionArgs& a, float ts, __half* kc, __half* vc, float* out, const AttnWoArgs& wa,
                   cudaStream_t s) {
  if (wa.wtype == GgmlType::Q4_0) return launch<HD, 4, false>(q, k, v, pos, r, a, ts, kc, vc, out, wa, s);
  if (wa.wtype == GgmlType::Q4_1) return launch<HD, 4, true>(q, k, v, pos, r, a, ts, kc, vc, out, wa, s);
  return launch<HD, 8, false>(q, k, v, pos, r, a, ts, kc, vc, out, wa, s);
}

}  // namespace

int attention_wo_splits(int n_head, int64_t n, int sms) {
  if (n_head <= 0 || n <= 0 || n % 32) return 0;
  const int64_t want = std::max<int64_t>(1, std::min<int64_t>(kMaxSplits, sms / n_head));
  for (int64_t c = want; c >= 1; --c)  // row ranges of whole 32-row blocks, kWarps rows at least, 64 at most per warp
    if ((n / 32) % c == 0 && (n / c) % kWarps == 0 && n / c / kWarps <= 64) return int(c);
  return 0;
}

bool attention_wo_supported(const AttentionArgs& a, const RopeArgs& r, GgmlType wtype, int64_t n) {
  const bool type = wtype == GgmlType::Q4_0 || wtype == GgmlType::Q4_1 || wtype == GgmlType::Q8_0;
  return type && (a.head_dim == 64 || a.head_dim == 128) && attention_decode_rope_supported(a, r, 1) && n > 0 &&
         n % 32 == 0;
}

Status attention_wo(const float* q, const float* k, const float* v, const int32_t* pos, const RopeArgs& r,
                    void* k_cache, void* v_cache, const AttentionArgs& a, float* out, const AttnWoArgs& wa,
                    cudaStream_t s) {
  if (!attention_wo_supported(a, r, wa.wtype, wa.n))
    return Status::error("attention_wo: needs attention_decode_rope's cases, head_dim 64 or 128, a q4_0/q4_1/q8_0 Wo "
                         "and a width that is a multiple of 32");
  if (!q || !k || !v || !pos || !k_cache || !v_cache || !wa.wo || !wa.x || !wa.y8 || !wa.y8_ss || !wa.partial ||
      !wa.counters)
    return Status::error("attention_wo: null pointer");
  if (wa.splits < 1 || wa.splits > kMaxSplits || wa.n % (int64_t(wa.splits) * 32) || (wa.n / wa.splits) % kWarps ||
      wa.n / wa.splits / kWarps > 64)
    return Status::error("attention_wo: splits must divide the rows into whole 32-row blocks of at most 64 rows per warp");
  const float theta_scale = powf(r.base, -2.0f / float(r.n_rot));
  auto* kc = static_cast<__half*>(k_cache);
  auto* vc = static_cast<__half*>(v_cache);
  if (a.head_dim == 64) return launch_type<64>(q, k, v, pos, r, a, theta_scale, kc, vc, out, wa, s);
  return launch_type<128>(q, k, v, pos, r, a, theta_scale, kc, vc, out, wa, s);
}

}  // namespace lamina::kernels
