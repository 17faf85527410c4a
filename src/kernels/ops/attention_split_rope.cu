// attention_split_rope: one decode token's RoPE (with q/k head norms where the model has them),
// cache store and split attention in one kernel — rope_kv_store() then attention_decode() with
// the in-place merge, which are two launches; in the decode chain each launch boundary costs
// microseconds of drain and ramp, far more than the rotation. For the contexts past the
// one-kernel path's (attention_decode_rope.cu: no splits, no GQA), GQA, sliding windows and
// head norms included (Gemma 3, Qwen 3, Llama 3).
//
// Grid (KV head, split), 4 warps, as attn_split_kernel (attention_decode.cu), which a block then
// runs for its share of the positions. Before that, each block of KV head kvh:
//   1. the n_rot/2 angles of the position into shared memory, before the PDL wait (pos is the
//      pass's input copy);
//   2. the group's G query heads and the KV head's k and v into shared memory; with head norms
//      each head's 1/rms (f64 sums, as rope_kv_store); q and k rotated there (rope.cuh: the
//      arithmetic of rope_kv_store bit for bit); the block's warps take q from there;
//   3. the split holding the position stores k and v in its cache row (f16), then reads the row
//      back like any other (a barrier makes the block's own stores visible to it).
// Every block reads the unrotated q and k; the block that writes the group's output (the last
// split to arrive: finish_split) writes the rotated heads back to q and k, as rope_kv_store leaves
// them, when no other split of the group can still be reading them.
#include "kernels/common/launch_status.h"
#include "kernels/common/pdl.cuh"
#include "kernels/ops/attention_split.cuh"
#include "kernels/ops/ops.h"
#include "kernels/ops/rope.cuh"

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>

namespace lamina::kernels {
namespace {

using namespace attn_detail;

constexpr int kMaxGroup = 4;  // query heads per KV head (Llama 3 and Gemma 3 have 4 at most)

// Shared memory of the prologue: the angles, the group's heads [q_0 .. q_{G-1}, k, v], 1/rms.
template <int HD, int MAXG>
struct SplitRopeSmem {
  float cs[HD / 2], sn[HD / 2];
  float heads[MAXG + 2][HD];
  float inv[MAXG + 1];
};

// q: [n_head * HD], k, v: [n_head_kv * HD] (one row); kc, vc: [n_ctx][n_head_kv * HD] f16.
template <int HD, int MAXG>
__global__ void __launch_bounds__(kSplitWarps * 32)
    attn_split_rope_kernel(float* __restrict__ q, float* __restrict__ k, const float* __restrict__ v,
                           const int32_t* __restrict__ pos, RopeArgs r, float theta_scale, HeadNorms nrm, __half* kc,
                           __half* vc, AttentionArgs a, int splits, float* __restrict__ work, SplitMerge mg) {
  constexpr int E = HD / 32, P = MAXG == 1 ? 8 : 4;
  __shared__ SplitRopeSmem<HD, MAXG> s;
  const int kvh = blockIdx.x, sp = blockIdx.y, position = pos[0];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, half = r.n_rot / 2;
  for (int i = threadIdx.x; i < half; i += blockDim.x) rope_detail::angle(i, position, theta_scale, r, s.cs[i], s.sn[i]);
  pdl_enter();
  const int G = a.n_head / a.n_head_kv;
  const int64_t kvd = int64_t(a.n_head_kv) * HD;
  auto src = [&](int i) -> float* {  // head i of the group: q heads, then k, then v
    return i < G ? q + int64_t(kvh * G + i) * HD : (i == G ? k : const_cast<float*>(v)) + int64_t(kvh) * HD;
  };
  for (int i = threadIdx.x; i < (G + 2) * HD; i += blockDim.x) s.heads[i / HD][i % HD] = src(i / HD)[i % HD];
  __syncthreads();
  if (nrm.q) {
    for (int i = warp; i <= G; i += kSplitWarps) {
      double ss = 0;
      for (int d = lane; d < HD; d += 32) ss += double(s.heads[i][d]) * s.heads[i][d];
      for (int o = 16; o; o >>= 1) ss += __shfl_xor_sync(~0u, ss, o);
      if (lane == 0) s.inv[i] = float(1.0 / sqrt(ss / double(HD) + double(nrm.eps)));
    }
    __syncthreads();
  }
  for (int i = threadIdx.x; i < (G + 1) * half; i += blockDim.x) {
    const int h = i / half, p = i % half;
    if (nrm.q) rope_detail::rotate_normed(s.heads[h], p, s.cs[p], s.sn[p], r, s.inv[h], h < G ? nrm.q : nrm.k);
    else rope_detail::rotate(s.heads[h], p, s.cs[p], s.sn[p], r);
  }
  __syncthreads();
  const SplitRange rg = split_range(position, a.window, splits, sp);
  if (rg.begin <= position && position < rg.end) {  // this split's positions end at the new row
    for (int d = threadIdx.x; d < HD; d += blockDim.x) {
      kc[int64_t(position) * kvd + int64_t(kvh) * HD + d] = __float2half_rn(s.heads[G][d]);
      vc[int64_t(position) * kvd + int64_t(kvh) * HD + d] = __float2half_rn(s.heads[G + 1][d]);
    }
    __syncthreads();
  }

  WarpState<E, MAXG> st;
  st.reset();
#pragma unroll
  for (int g = 0; g < MAXG; ++g) {
    if (g >= G) break;
#pragma unroll
    for (int e = 0; e < E; ++e) st.q[g][e] = s.heads[g][lane * E + e];
  }
  attend_positions<__half, E, MAXG, P>(st, kc + int64_t(kvh) * HD + lane * E, vc + int64_t(kvh) * HD + lane * E, kvd,
                                       rg.begin + warp * P, rg.end, kSplitWarps * P, G, a.scale);
  __shared__ MergeSmem<kSplitWarps, MAXG, HD> sm;
  if (finish_split<HD>(st, sm, a, kvh, sp, splits, 0, work, mg))
    for (int i = threadIdx.x; i < (G + 1) * HD; i += blockDim.x) src(i / HD)[i % HD] = s.heads[i / HD][i % HD];
}

template <int HD>
void launch_hd(float* q, float* k, const float* v, const int32_t* pos, const RopeArgs& r, float theta_scale,
               const HeadNorms& n, __half* kc, __half* vc, const AttentionArgs& a, int splits, float* work,
               const SplitMerge& mg, cudaStream_t s) {
  const dim3 grid(unsigned(a.n_head_kv), unsigned(splits));
  if (a.n_head == a.n_head_kv)
    launch_pdl(attn_split_rope_kernel<HD, 1>, grid, kSplitWarps * 32, 0, s, q, k, v, pos, r, theta_scale, n, kc, vc, a, splits, work, mg);
  else
    launch_pdl(attn_split_rope_kernel<HD, kMaxGroup>, grid, kSplitWarps * 32, 0, s, q, k, v, pos, r, theta_scale, n, kc, vc, a, splits, work, mg);
}

}  // namespace

bool attention_split_rope_supported(const AttentionArgs& a, const RopeArgs& r, int64_t rows, bool norms) {
  const bool hd = a.head_dim == 64 || a.head_dim == 96 || a.head_dim == 128 || a.head_dim == 256;
  return rows == 1 && hd && a.kv_type == GgmlType::F16 && a.n_head > 0 && a.n_head_kv > 0 && a.n_head % a.n_head_kv == 0 &&
         a.n_head / a.n_head_kv <= kMaxGroup && a.window >= 0 && r.n_rot > 0 && r.n_rot % 2 == 0 &&
         r.n_rot <= a.head_dim && (!norms || r.n_rot == a.head_dim);
}

Status attention_split_rope(float* q, float* k, const float* v, const int32_t* pos, const RopeArgs& r,
                            const HeadNorms& norms, void* k_cache, void* v_cache, const AttentionArgs& a, int splits,
                            float* work, float* out, unsigned* merge_count, cudaStream_t s, void* out8) {
  if (!attention_split_rope_supported(a, r, 1, norms.q || norms.k))
    return Status::error("attention_split_rope: needs an f16 cache, head_dim 64/96/128/256, at most 4 query heads per "
                         "KV head, 0 < n_rot <= head_dim (even; all of it with head norms)");
  if (!q || !k || !v || !pos || !k_cache || !v_cache || !work || !out || !merge_count)
    return Status::error("attention_split_rope: null pointer");
  if (bool(norms.q) != bool(norms.k)) return Status::error("attention_split_rope: head norms need both q and k weights");
  if (splits < 1 || splits > 65535) return Status::error("attention_split_rope: bad split count");
  const float theta_scale = powf(r.base, -2.0f / float(r.n_rot));
  auto* kc = static_cast<__half*>(k_cache);
  auto* vc = static_cast<__half*>(v_cache);
  const SplitMerge mg{merge_count, out, static_cast<uint8_t*>(out8)};
  switch (a.head_dim) {
    case 64: launch_hd<64>(q, k, v, pos, r, theta_scale, norms, kc, vc, a, splits, work, mg, s); break;
    case 96: launch_hd<96>(q, k, v, pos, r, theta_scale, norms, kc, vc, a, splits, work, mg, s); break;
    case 128: launch_hd<128>(q, k, v, pos, r, theta_scale, norms, kc, vc, a, splits, work, mg, s); break;
    default: launch_hd<256>(q, k, v, pos, r, theta_scale, norms, kc, vc, a, splits, work, mg, s); break;
  }
  return launch_status("attention_split_rope");
}

}  // namespace lamina::kernels
