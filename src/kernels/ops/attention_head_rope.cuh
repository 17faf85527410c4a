// One query head's decode attention with RoPE and the cache store, run by a whole thread block
// (the body of attention_decode_rope, one block per query head; with GQA the group's first query
// head stores its KV head's row).
#pragma once

#include "kernels/ops/attention_decode.cuh"
#include "kernels/ops/ops.h"
#include "kernels/ops/rope.cuh"

#include <cuda_fp16.h>

#include <cstdint>

namespace lamina::kernels::attn_detail {

// Shared memory of rope_attend_head: the angles, the head's q and k (rotated in place), with head
// norms their 1/rms, the merge.
template <int kW, int HD>
struct RopeHeadSmem {
  float cs[HD / 2], sn[HD / 2];
  float qk[2][HD];
  float inv[2];
  float v[HD];
  MergeSmem<kW, 1, HD> merge;
};

// Before the PDL wait: the warp's first round of cache rows (positions warp * P ..), those below
// `position` only. Those rows were written by an earlier step or by the prompt, at least one
// GEMV before this kernel (in decode the Q/K/V GEMV runs right before it). A GEMV triggers its
// dependents only after its own wait (kernels/common/pdl.cuh), by which time every kernel before
// its predecessor has completed; so this kernel cannot start before those rows are written and
// may read them before its wait. The row of `position` is written by this kernel:
// rope_attend_head fills it in from shared memory. (A KvRound held through a runtime-chosen
// pointer went to local memory: 288-byte stack frame, tg128 q4_0 -5 %; hence kPreload is a
// template parameter of the kernel.)
// g: the KV head; rows: where a position's row lies (one sequence's contiguous cache, or a paged
// cache's block table).
template <int kW, int HD, int P, class Rows = ContiguousRows>
__device__ __forceinline__ void preload_first_round(const __half* kc, const __half* vc, const AttentionArgs& a, int g,
                                                    int position, KvRound<HD / 32, P>& kv, Rows rows = {}) {
  if (position == 0) return;  // nothing below the position: rope_attend_head fills in every row
  constexpr int E = HD / 32;
  const int64_t kvd = int64_t(a.n_head_kv) * HD, col = int64_t(g) * HD + (threadIdx.x % 32) * E;
  load_round<__half, E, P>(kc + col, vc + col, kvd, (threadIdx.x / 32) * P, position, rows, kv);
}

// Before the PDL wait (the position is the pass's input copy): the n_rot/2 angles into s.
__device__ __forceinline__ void rope_angles(float* cs, float* sn, int position, float theta_scale, const RopeArgs& r) {
  for (int i = threadIdx.x; i < r.n_rot / 2; i += blockDim.x) rope_detail::angle(i, position, theta_scale, r, cs[i], sn[i]);
}

// After the wait: query head h's q ([n_head * HD]) and its KV head g's k ([n_head_kv * HD]) into
// shared memory and rotated there (rope.cuh: the same arithmetic as rope() bit for bit), written
// back to q_out / k_out when given (k by the storing block only); when `store`, k and v stored in
// the cache row of `position` ([n_ctx][n_head_kv * HD] f16); then attention over positions
// 0..position by the block's kW warps (P positions per warp and round) and emit(d, o) for the
// head's HD outputs o = O / L, d consecutive within a warp. With GQA one block of the group stores
// and the others never read that row from global memory (no order between blocks): each folds its
// own rotated copy of it, as the cache holds it (f16). first: the warp's first round as
// preload_first_round loaded it before the wait, or null (then every round is loaded here).
// nrm (qwen3, gemma3; n_rot == HD): q and k RMS-normalised per head before the rotation, as
// rope_kv_store does it (warps 0 and 1 sum the squares in f64 in its order: the same bits).
// rows: where a position's cache row lies (ContiguousRows: row p; PagedRows: the sequence's block
// table, which already holds the new position's block); the new row is stored at rows(position).
template <int kW, int HD, int P, class Emit, class Rows = ContiguousRows>
__device__ __forceinline__ void rope_attend_head(RopeHeadSmem<kW, HD>& s, int h, int g, bool store, int position,
                                                 const float* q, const float* k, const float* v, float* q_out,
                                                 float* k_out, const RopeArgs& r, const AttentionArgs& a, __half* kc,
                                                 __half* vc, Emit&& emit, KvRound<HD / 32, P>* first = nullptr,
                                                 const HeadNorms& nrm = {}, Rows rows = {}) {
  constexpr int E = HD / 32;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, half = r.n_rot / 2;
  const int64_t kvd = int64_t(a.n_head_kv) * HD, col0 = int64_t(h) * HD, kv0 = int64_t(g) * HD;
  for (int i = threadIdx.x; i < 3 * HD; i += blockDim.x) {  // q, k and v of the head in one round trip
    // (from L2: the kernel before wrote them)
    const float x = __ldcg((i < HD ? q + col0 : i < 2 * HD ? k + kv0 : v + kv0) + i % HD);
    if (i < 2 * HD) s.qk[i / HD][i % HD] = x;
    else s.v[i % HD] = x;
  }
  __syncthreads();
  if (nrm.q) {
    if (warp < 2) {
      double ss = 0;
      for (int i = lane; i < HD; i += 32) ss += double(s.qk[warp][i]) * s.qk[warp][i];
      for (int o = 16; o; o >>= 1) ss += __shfl_xor_sync(~0u, ss, o);
      if (lane == 0) s.inv[warp] = float(1.0 / sqrt(ss / double(HD) + double(nrm.eps)));
    }
    __syncthreads();
    for (int i = threadIdx.x; i < 2 * half; i += blockDim.x) {
      const int m = i / half;
      rope_detail::rotate_normed(s.qk[m], i % half, s.cs[i % half], s.sn[i % half], r, s.inv[m], m ? nrm.k : nrm.q);
    }
  } else {
    for (int i = threadIdx.x; i < 2 * half; i += blockDim.x)
      rope_detail::rotate(s.qk[i / half], i % half, s.cs[i % half], s.sn[i % half], r);
  }
  __syncthreads();
  __half* krow = kc + rows(position) * kvd + kv0;
  __half* vrow = vc + rows(position) * kvd + kv0;
  for (int i = threadIdx.x; i < HD; i += blockDim.x) {
    if (q_out) q_out[col0 + i] = s.qk[0][i];
    if (store) {
      if (k_out) k_out[kv0 + i] = s.qk[1][i];
      krow[i] = __float2half_rn(s.qk[1][i]);
      vrow[i] = __float2half_rn(s.v[i]);
    }
  }
  // The storing block's own cache row, written above, is read back from global memory by the
  // rounds after the first; a first round loaded before the wait takes it from shared memory
  // instead (and a barrier here would wait for the stores). A block that does not store folds
  // the rows below the position from the cache and that row from shared memory, in a round of
  // its own (warp 0).
  const bool late = !first || position >= kW * P;
  if (late && store) __syncthreads();

  WarpState<E, 1> st;
  st.reset();
#pragma unroll
  for (int e = 0; e < E; ++e) st.q[0][e] = s.qk[0][lane * E + e];
  int from = warp * P;
  if (first) {  // rows at or past the position: the new row as the cache holds it (f16), finite when masked
#pragma unroll
    for (int p = 0; p < P; ++p)
      if (from + p >= position)
#pragma unroll
        for (int e = 0; e < E; ++e) {
          first->k[p][e] = __half2float(__float2half_rn(s.qk[1][lane * E + e]));
          first->v[p][e] = __half2float(__float2half_rn(s.v[lane * E + e]));
        }
    if (from <= position) fold_round<E, 1, P>(st, *first, from, position + 1, 1, a.scale);
    from += kW * P;
  }
  attend_positions<__half, E, 1, P, Rows>(st, kc + kv0 + lane * E, vc + kv0 + lane * E, kvd, from,
                                          store ? position + 1 : position, kW * P, 1, a.scale, rows);
  if (late && !store && warp == 0) {
    KvRound<E, P> own;
#pragma unroll
    for (int p = 0; p < P; ++p)
#pragma unroll
      for (int e = 0; e < E; ++e) {
        own.k[p][e] = __half2float(__float2half_rn(s.qk[1][lane * E + e]));
        own.v[p][e] = __half2float(__float2half_rn(s.v[lane * E + e]));
      }
    fold_round<E, 1, P>(st, own, position, position + 1, 1, a.scale);
  }
  merge_warps<kW>(st, 1, s.merge, [&](int, int d, float, float L, float O) { emit(d, L > 0.f ? O / L : 0.f); });
}

}  // namespace lamina::kernels::attn_detail
