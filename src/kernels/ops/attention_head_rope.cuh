// One head's decode attention with RoPE and the cache store, run by a whole thread block: the
// body shared by attention_decode_rope (one block per head) and attention_wo (a head's blocks
// each compute it before their share of Wo).
#pragma once

#include "kernels/ops/attention_decode.cuh"
#include "kernels/ops/ops.h"
#include "kernels/ops/rope.cuh"

#include <cuda_fp16.h>

#include <cstdint>

namespace lamina::kernels::attn_detail {

// Shared memory of rope_attend_head: the angles, the head's q and k (rotated in place), the merge.
template <int kW, int HD>
struct RopeHeadSmem {
  float cs[HD / 2], sn[HD / 2];
  float qk[2][HD];
  MergeSmem<kW, 1, HD> merge;
};

// Before the PDL wait (the position is the pass's input copy): the n_rot/2 angles into s.
__device__ __forceinline__ void rope_angles(float* cs, float* sn, int position, float theta_scale, const RopeArgs& r) {
  for (int i = threadIdx.x; i < r.n_rot / 2; i += blockDim.x) rope_detail::angle(i, position, theta_scale, r, cs[i], sn[i]);
}

// After the wait: head h's q and k ([n_head * HD] each) into shared memory and rotated there
// (rope.cuh: the same arithmetic as rope() bit for bit), written back to q_out / k_out when
// given; k and v stored in the cache row of `position` ([n_ctx][n_head_kv * HD] f16; no GQA);
// then attention over positions 0..position by the block's kW warps (P positions per warp and
// round) and emit(d, o) for the head's HD outputs o = O / L, d consecutive within a warp.
template <int kW, int HD, int P, class Emit>
__device__ __forceinline__ void rope_attend_head(RopeHeadSmem<kW, HD>& s, int h, int position, const float* q,
                                                 const float* k, const float* v, float* q_out, float* k_out,
                                                 const RopeArgs& r, const AttentionArgs& a, __half* kc, __half* vc,
                                                 Emit&& emit) {
  constexpr int E = HD / 32;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, half = r.n_rot / 2;
  const int64_t kvd = int64_t(a.n_head_kv) * HD, col0 = int64_t(h) * HD;
  for (int i = threadIdx.x; i < 2 * HD; i += blockDim.x) s.qk[i / HD][i % HD] = (i < HD ? q : k)[col0 + i % HD];
  __syncthreads();
  for (int i = threadIdx.x; i < 2 * half; i += blockDim.x) rope_detail::rotate(s.qk[i / half], i % half, s.cs[i % half], s.sn[i % half], r);
  __syncthreads();
  __half* krow = kc + int64_t(position) * kvd + col0;
  __half* vrow = vc + int64_t(position) * kvd + col0;
  for (int i = threadIdx.x; i < HD; i += blockDim.x) {
    if (q_out) q_out[col0 + i] = s.qk[0][i], k_out[col0 + i] = s.qk[1][i];
    krow[i] = __float2half_rn(s.qk[1][i]);
    vrow[i] = __float2half_rn(v[col0 + i]);
  }
  __syncthreads();  // the block's own cache row, written above, is read below

  WarpState<E, 1> st;
  st.reset();
#pragma unroll
  for (int e = 0; e < E; ++e) st.q[0][e] = s.qk[0][lane * E + e];
  attend_positions<__half, E, 1, P>(st, kc + col0 + lane * E, vc + col0 + lane * E, kvd, warp * P, position + 1, kW * P, 1,
                                    a.scale);
  merge_warps<kW>(st, 1, s.merge, [&](int, int d, float, float L, float O) { emit(d, L > 0.f ? O / L : 0.f); });
}

}  // namespace lamina::kernels::attn_detail
