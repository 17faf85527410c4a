// qkv_attention: a decode row's stacked Q/K/V GEMV with the attention of each head run by the
// block that completes the head's rows — one kernel where the decode chain had two (the GEMV,
// then attention_decode_rope), so one launch boundary less per layer.
//
// Grid and GEMV: q_dp4a_slots' pass loop (Dp4aSlots: one block per SM, 16 warps x 2 rows,
// unroll 2, weights loaded before the PDL wait) over the rows [q | k | v] of n_head * 128 each.
// Head h's rows are q rows 128h.., k rows D + 128h.., v rows 2D + 128h.. (D = n_head * 128).
//   1. a warp that has stored all its rows (lane 0; then a fence) adds 2 to the head counter of
//      each of its passes' row pairs (lane i: pass i); the lane that brings one to 3 * 128
//      notes the head in its block's list (shared memory) and zeroes the counter for the next
//      launch;
//   2. after its last pass each block runs the attention of the heads on its list with all 16
//      warps: attention_decode_rope's body (attention_head_rope.cuh: RoPE, cache store, attention
//      over 0..pos, out and its int8 blocks), q, k and v read back from L2 (__ldcg).
// Measured slower, off by default (backend switch LAMINA_QKV_ATTN=1). H100, llama2-7b presets,
// tg128 (`lamina bench -p 0 -n 128 -r 3`, one tune, arms alternating, 2026-11-23; CUPTI trace of
// the q4_0 decode graph for the kernel's time a layer):
//   - counting each pass's rows with a fence right after them: 23.2 us a layer against Q/K/V
//     11.7 + attention 4.2 apart; tg128 q4_0 556.1 -> 484.7, q8_0 341.0 -> 314.2;
//   - one fence after a warp's last pass, the lanes counting the passes at once (this version):
//     27.2 us a layer; tg128 q4_0 551.6 -> 458.0, q8_0 334.2 -> 299.0 (another machine).
// Where the time goes is not established: the tail (cache rows, q/k/v, attention) should cost
// about what the separate kernel does; the slots loop, not the tuner's pick for Q/K/V
// (q_dp4a at unroll 4 for the other one-matrix shapes), may be part of it.
#include "kernels/common/launch_status.h"
#include "kernels/common/pdl.cuh"
#include "kernels/common/q8_blocks.cuh"
#include "kernels/gemv/gemv_common.cuh"
#include "kernels/gemv/gemv_dp4a.cuh"
#include "kernels/gemv/gemv_x8.cuh"
#include "kernels/ops/attention_head_rope.cuh"
#include "kernels/ops/qkv_attention.h"

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>

namespace lamina::kernels {
namespace {

using namespace gemv_detail;
using namespace attn_detail;

constexpr int kHD = 128, kMaxHeads = 64, kP = 8;  // head_dim; heads a block may list; positions per warp and round

// The attention half's arguments as the kernel takes them (by value).
struct Tail {
  RopeArgs r;
  AttentionArgs a;
  float theta_scale;
  const int32_t* pos;
  __half *kc, *vc;
  float* out;
  uint8_t* out8;
  unsigned* counters;
};

// Head h's attention by the whole block: q, k, v from y = [q | k | v] (D wide each), RoPE on q
// and k (written back), the cache row at `position`, the output and its int8 blocks. kPreload:
// the warps' first round of cache rows loaded up front (attention_head_rope.cuh); a runtime loop
// over heads with it spilled the round (176 bytes at the 128-register cap of 512 threads), so
// only a block's first head takes it and any further heads (rare: one block completing two)
// load every round in the loop.
template <bool kPreload>
__device__ __forceinline__ void attend_head(RopeHeadSmem<16, kHD>& hs, int h, int position, float* y, int64_t D,
                                            const Tail& t) {
  constexpr int kW = 16;
  KvRound<kHD / 32, kP> first_round;
  if (kPreload) preload_first_round<kW, kHD, kP>(t.kc, t.vc, t.a, h, position, first_round);
  float* const out = t.out;
  uint8_t* const out8 = t.out8;
  rope_attend_head<kW, kHD, kP>(
      hs, h, position, y, y + D, y + 2 * D, y, y + D, t.r, t.a, t.kc, t.vc,
      [=](int d, float o) {
        const int64_t col = int64_t(h) * kHD + d;
        out[col] = o;
        if (out8) quantize_block32(o, D, col / 32, out8);
      },
      kPreload ? &first_round : nullptr);
}

// w: [3D][k] repacked; y: [3D] = q | k | v (D = n_head * 128); x from xin (int8 blocks of k).
template <int kBits>
__global__ void __launch_bounds__(Dp4aSlots<kBits>::kWarps * 32)
    qkv_attention_kernel(const uint8_t* __restrict__ w, XSource xin, float* y, int64_t n, int64_t k, Tail t) {
  using Slots = Dp4aSlots<kBits>;
  constexpr int kW = Slots::kWarps;
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ RopeHeadSmem<kW, kHD> hs;
  __shared__ int done[kMaxHeads];
  __shared__ int n_done;
  const int64_t stride = int64_t(gridDim.x) * kW * Slots::kRows;
  const int64_t first = (int64_t(blockIdx.x) * kW + threadIdx.x / 32) * Slots::kRows;
  const int64_t D = n / 3;
  typename Slots::Step::Regs a, b;
  if (first < n) Slots::fill(w, first, n, k, a, b);  // weights never depend on an earlier kernel: before the wait
  if (threadIdx.x == 0) n_done = 0;
  __syncthreads();
  pdl_wait();  // x (and the position) come from kernels before (see kernels/common/pdl.cuh)
  RmsParts rms;
  if (xin.ss) rms.load(xin.ss, k);
  const uint8_t* xs = x8_source(xin, k, 1, smem);
  const Epilogue plain{};
  for (int64_t row0 = first; row0 < n; row0 += stride) {
    if (row0 + stride >= n) pdl_launch_dependents();  // this warp's last rows: the next kernel may launch
    float acc[1][Slots::kRows][1] = {};
    Slots::pass(w, row0, stride, n, k, xs, a, b, acc[0]);
    store_rows(acc, row0, n, 1, plain, y, xin.ss ? rms.scale(k, xin.norm_eps) : 1.f);
  }
  // Lane 0 stored the warp's rows; lane i counts pass i's two rows to their head. One fence
  // after the last pass (a fence between passes would also wait for the slots' loads in flight:
  // the kernel then took 23 us a layer against 11.7 + 4.2 apart), made cumulative for the other
  // lanes by the warp barrier and their own fence; the counts go out together, not one round
  // trip after another.
  __syncwarp();
  __threadfence();
  for (int64_t row0 = first + int64_t(threadIdx.x % 32) * stride; row0 < n; row0 += 32 * stride) {
    const int h = int((row0 % D) / kHD);
    if (atomicAdd(t.counters + h, unsigned(Slots::kRows)) + Slots::kRows == 3 * kHD) {
      __threadfence();  // the head is complete: the other warps' rows are visible from here on
      t.counters[h] = 0;
      done[atomicAdd(&n_done, 1)] = h;
    }
  }
  __syncthreads();
  const int heads = n_done;
  if (heads == 0) return;
  const int position = t.pos[0];
  rope_angles(hs.cs, hs.sn, position, t.theta_scale, t.r);  // (visible after rope_attend_head's first barrier)
  attend_head<true>(hs, done[0], position, y, D, t);
  for (int i = 1; i < heads; ++i) {
    __syncthreads();  // hs is this head's
    attend_head<false>(hs, done[i], position, y, D, t);
  }
}

}  // namespace

bool qkv_attention_supported(const GemvProblem& p, const AttentionArgs& a, const RopeArgs& r) {
  const bool gemv = p.layout == WeightLayout::Repacked && (p.wtype == GgmlType::Q4_0 || p.wtype == GgmlType::Q8_0) &&
                    p.batch == 1 && !p.w_up && !p.bias && !p.residual && !p.y8 && p.k % 32 == 0 &&
                    (!p.x8_ss || p.k <= kX8SsMaxK);
  return gemv && a.head_dim == kHD && a.n_head <= kMaxHeads && p.n == 3 * int64_t(a.n_head) * kHD &&
         attention_decode_rope_supported(a, r, 1);
}

Status qkv_attention(const GemvProblem& p, const QkvAttnArgs& t, cudaStream_t s) {
  if (!qkv_attention_supported(p, t.a, t.r))
    return Status::error("qkv_attention: needs one row of a q4_0 / q8_0 dp4a stack [q | k | v] of 128-wide heads "
                         "without GQA and without epilogues");
  if (!p.w || !p.y || !t.pos || !t.k_cache || !t.v_cache || !t.out || !t.counters)
    return Status::error("qkv_attention: null pointer");
  const Tail tail{t.r, t.a, powf(t.r.base, -2.0f / float(t.r.n_rot)), t.pos, static_cast<__half*>(t.k_cache),
                  static_cast<__half*>(t.v_cache), t.out, static_cast<uint8_t*>(t.out8), t.counters};
  auto run = [&](auto kernel, int rows) {
    const GemvConfig c{rows, 32 / rows, 2};
    const size_t smem = x8_smem_bytes(p);
    unsigned grid = 0;
    if (Status st = persistent_grid(kernel, "qkv_attention", p, c, rows, smem, kDp4aBlocksPerSm, grid); !st.ok) return st;
    launch_pdl(kernel, grid, unsigned(c.warps * 32), smem, s, static_cast<const uint8_t*>(p.w), xsource_of(p), p.y, p.n,
               p.k, tail);
    return launch_status("qkv_attention");
  };
  if (p.wtype == GgmlType::Q4_0) return run(qkv_attention_kernel<4>, Dp4aSlots<4>::kRows);
  return run(qkv_attention_kernel<8>, Dp4aSlots<8>::kRows);
}

}  // namespace lamina::kernels
