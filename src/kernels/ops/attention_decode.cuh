// Device pieces of the decode attention kernels (attention_decode.cu: flash-decoding splits and
// their merge; attention_decode_rope.cu: one pass with RoPE and the cache store in front).
//
// Layout of a block's work: lane l of a warp holds elements [l*E, l*E + E) of a head
// (E = head_dim / 32) for each of the G <= MAXG query heads that read one KV head; a warp takes P
// positions at a time (2P row loads in flight) and folds them into its running (max m, sum l,
// output acc) — the online softmax. merge_warps combines the block's warps through shared memory.
#pragma once

#include "kernels/ops/ops.h"

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

namespace lamina::kernels::attn_detail {

constexpr float kNoScore = -1e30f;  // "minus infinity" that keeps exp(m_old - m_new) finite

template <class KT>
__device__ __forceinline__ float to_f32(KT v) {
  if constexpr (std::is_same_v<KT, __half>) return __half2float(v);
  else return v;
}

// E consecutive elements of a row from global memory as f32.
template <class KT, int E>
__device__ __forceinline__ void load_row(const KT* __restrict__ p, float (&o)[E]) {
  if constexpr (std::is_same_v<KT, __half> && E % 4 == 0) {
#pragma unroll
    for (int i = 0; i < E; i += 4) {
      const uint2 u = *reinterpret_cast<const uint2*>(p + i);
      const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&u.x));
      const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&u.y));
      o[i] = a.x, o[i + 1] = a.y, o[i + 2] = b.x, o[i + 3] = b.y;
    }
  } else if constexpr (std::is_same_v<KT, __half> && E % 2 == 0) {
#pragma unroll
    for (int i = 0; i < E; i += 2) {
      const float2 a = __half22float2(*reinterpret_cast<const __half2*>(p + i));
      o[i] = a.x, o[i + 1] = a.y;
    }
  } else {
#pragma unroll
    for (int i = 0; i < E; ++i) o[i] = to_f32(p[i]);
  }
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(~0u, v, o);
  return v;
}

// The positions a (row, split) block folds: first .. pos (all earlier ones, or the last `window`
// when it is set) cut into `splits` contiguous chunks; chunk `sp` is [begin, end) (empty past the
// last). Computed on the device from pos, so a recorded graph replays while the sequence grows.
struct SplitRange {
  int begin, end;
};
__device__ __forceinline__ SplitRange split_range(int pos, int window, int sp, int splits) {
  const int first = window > 0 ? max(0, pos + 1 - window) : 0;
  const int len = pos + 1 - first;
  const int chunk = (len + splits - 1) / splits;
  const int begin = first + sp * chunk;
  return {begin, min(first + len, begin + chunk)};
}

// Per-warp state of G query heads.
template <int E, int MAXG>
struct WarpState {
  float q[MAXG][E], m[MAXG], l[MAXG], acc[MAXG][E];
  __device__ void reset() {
#pragma unroll
    for (int g = 0; g < MAXG; ++g) {
      m[g] = kNoScore, l[g] = 0.f;
#pragma unroll
      for (int e = 0; e < E; ++e) acc[g][e] = 0.f, q[g][e] = 0.f;
    }
  }
};

// One round of a warp: the K and V rows of P positions j0 .. j0 + P - 1 (lane's E elements, f32).
template <int E, int P>
struct KvRound {
  float k[P][E], v[P][E];
};

// Where position j of a sequence sits in the cache: row j (one sequence), or the slot its block
// table gives (a paged cache: block table[j / block_tokens], engine/kv_blocks.h).
struct ContiguousRows {
  __device__ __forceinline__ int64_t operator()(int j) const { return j; }
};
struct PagedRows {
  const int32_t* table;  // the sequence's block ids
  int block_tokens;
  __device__ __forceinline__ int64_t operator()(int j) const {
    return int64_t(table[j / block_tokens]) * block_tokens + j % block_tokens;
  }
};

// Loads the round at j0 (rows past end - 1 clamped to end - 1: valid rows, masked by fold_round).
template <class KT, int E, int P, class Rows>
__device__ __forceinline__ void load_round(const KT* __restrict__ kbase, const KT* __restrict__ vbase, int64_t kvd,
                                           int j0, int end, Rows rows, KvRound<E, P>& kv) {
#pragma unroll
  for (int p = 0; p < P; ++p) {
    const int64_t r = rows(min(j0 + p, end - 1));
    load_row<KT, E>(kbase + r * kvd, kv.k[p]);
    load_row<KT, E>(vbase + r * kvd, kv.v[p]);
  }
}

// Folds the round at j0 into s (positions at or past `end` masked; their rows must be finite).
template <int E, int MAXG, int P>
__device__ __forceinline__ void fold_round(WarpState<E, MAXG>& s, const KvRound<E, P>& kv, int j0, int end, int G,
                                           float scale) {
#pragma unroll
  for (int g = 0; g < MAXG; ++g) {
    if (g >= G) break;
    float sc[P], mx = s.m[g];
#pragma unroll
    for (int p = 0; p < P; ++p) {
      float d = 0.f;
#pragma unroll
      for (int e = 0; e < E; ++e) d += s.q[g][e] * kv.k[p][e];
      sc[p] = j0 + p < end ? warp_sum(d) * scale : kNoScore;
      mx = fmaxf(mx, sc[p]);
    }
    const float corr = __expf(s.m[g] - mx);
    s.l[g] *= corr;
#pragma unroll
    for (int e = 0; e < E; ++e) s.acc[g][e] *= corr;
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const float w = j0 + p < end ? __expf(sc[p] - mx) : 0.f;
      s.l[g] += w;
#pragma unroll
      for (int e = 0; e < E; ++e) s.acc[g][e] += w * kv.v[p][e];
    }
    s.m[g] = mx;
  }
}

// Folds positions j0, j0 + stride, ... (P at a time, j0 = first + p) below `end` into s.
// kbase, vbase: the lane's first element of cache row 0 of this KV head; kvd: row stride; rows:
// the cache row of a position.
template <class KT, int E, int MAXG, int P, class Rows = ContiguousRows>
__device__ __forceinline__ void attend_positions(WarpState<E, MAXG>& s, const KT* __restrict__ kbase,
                                                 const KT* __restrict__ vbase, int64_t kvd, int first, int end,
                                                 int stride, int G, float scale, Rows rows = {}) {
  for (int j0 = first; j0 < end; j0 += stride) {
    KvRound<E, P> kv;
    load_round<KT, E, P>(kbase, vbase, kvd, j0, end, rows, kv);
    fold_round<E, MAXG, P>(s, kv, j0, end, G, scale);
  }
}

// Shared memory for merging kW warps: [warp][group] (m, l) and [warp][group][HD] outputs.
template <int kW, int MAXG, int HD>
struct MergeSmem {
  float ml[kW][MAXG][2];
  float o[kW][MAXG][HD];
};

// Combines the block's warps once each has left its (m, l) and outputs in shared memory, read
// through ml(w, g, 0 | 1) and o(w, g, d): for every (g < G, d < HD), emit(g, d, M, L, O) with
//   M = max_w m_w,  L = sum_w l_w e^(m_w - M),  O = sum_w o_w[d] e^(m_w - M).
// Items go to threads in order (i = g * HD + d), so a warp's 32 lanes take 32 consecutive d of
// one head (HD is a multiple of 32): emit may use warp collectives.
template <int kW, int HD, class Ml, class Out, class Emit>
__device__ __forceinline__ void combine_warps_at(int G, Ml&& ml, Out&& o, Emit&& emit) {
  __syncthreads();
  for (int i = threadIdx.x; i < G * HD; i += blockDim.x) {
    const int g = i / HD, d = i % HD;
    float M = kNoScore;
    for (int w = 0; w < kW; ++w) M = fmaxf(M, ml(w, g, 0));
    float L = 0.f, O = 0.f;
    for (int w = 0; w < kW; ++w) {
      const float f = __expf(ml(w, g, 0) - M);
      L += ml(w, g, 1) * f;
      O += o(w, g, d) * f;
    }
    emit(g, d, M, L, O);
  }
}

// combine_warps_at over a MergeSmem.
template <int kW, int MAXG, int HD, class Emit>
__device__ __forceinline__ void combine_warps(int G, const MergeSmem<kW, MAXG, HD>& sm, Emit&& emit) {
  combine_warps_at<kW, HD>(
      G, [&](int w, int g, int k) { return sm.ml[w][g][k]; }, [&](int w, int g, int d) { return sm.o[w][g][d]; },
      static_cast<Emit&&>(emit));
}

// Leaves each warp's WarpState in sm, then combine_warps.
template <int kW, int MAXG, int HD, int E, class Emit>
__device__ __forceinline__ void merge_warps(const WarpState<E, MAXG>& s, int G, MergeSmem<kW, MAXG, HD>& sm, Emit&& emit) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int g = 0; g < MAXG; ++g) {
    if (g >= G) break;
    if (lane == 0) sm.ml[warp][g][0] = s.m[g], sm.ml[warp][g][1] = s.l[g];
#pragma unroll
    for (int e = 0; e < E; ++e) sm.o[warp][g][lane * E + e] = s.acc[g][e];
  }
  combine_warps(G, sm, static_cast<Emit&&>(emit));
}

// The mma rung of the paged attention (attention_paged_mma.cu): the split partials of every row,
// (KV head, split, row) blocks as the split rung; where paged_mma_supported (an f16 cache,
// head_dim 64 or 128, 2 to 8 query heads per KV head).
bool paged_mma_supported(const AttentionArgs& a);
void launch_paged_mma(const float* q, int64_t rows, const int32_t* pos, const void* kc, const void* vc,
                      const AttentionArgs& a, int splits, float* work, cudaStream_t s, const PagedKv& paged);

}  // namespace lamina::kernels::attn_detail
