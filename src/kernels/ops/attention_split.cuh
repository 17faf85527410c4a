// A flash-decoding split block's own pieces, shared by attn_split_kernel (attention_decode.cu)
// and attn_split_rope_kernel (attention_split_rope.cu): the positions a split takes, how it
// ends (its partial into the work buffer, merged by a second kernel or in place by the last
// split to arrive, or the output itself when it is the only split), and the merge.
//
// The merge of a head's splits (partials m, l, o) is
//   M = max_s m_s,  L = sum_s l_s e^(m_s - M),  out = sum_s o_s e^(m_s - M) / L.
#pragma once

#include "kernels/common/q8_blocks.cuh"
#include "kernels/ops/attention_decode.cuh"
#include "kernels/ops/ops.h"

#include <cstdint>

namespace lamina::kernels::attn_detail {

constexpr int kSplitWarps = 4;

// Where a split block's result goes: its partial into work, merged by attn_merge_kernel
// (count null), or merged in place by the last split of each (KV head, token) to arrive
// (count: [rows][n_head_kv] zeroed words, left zeroed); out [rows][n_head * head_dim] and out8
// ([rows][x8_bytes(n_head * head_dim)] or null) as merge_heads writes them.
struct SplitMerge {
  unsigned* count = nullptr;
  float* out = nullptr;
  uint8_t* out8 = nullptr;
};

// Split sp's positions [begin, end) of a sequence at `position`: all positions up to it, or its
// last `window`, cut into `splits` equal chunks (the last ones may be short or empty).
struct SplitRange {
  int begin, end;
};
__device__ __forceinline__ SplitRange split_range(int position, int window, int splits, int sp) {
  const int first = window > 0 ? max(0, position + 1 - window) : 0;
  const int len = position + 1 - first;
  const int chunk = (len + splits - 1) / splits;
  const int begin = first + sp * chunk;
  return {begin, min(first + len, begin + chunk)};
}

// A split's partial in the work buffer: [m, l, 2 unused, o[HD]] (o 16-byte aligned), per
// (token, head, split).
constexpr int kPartialHead = 4;
template <int HD>
constexpr int partial_floats() { return HD + kPartialHead; }

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o; o >>= 1) v = fmaxf(v, __shfl_xor_sync(~0u, v, o));
  return v;
}

// Heads h0 .. h0 + heads - 1 of row t merged from their splits' partials in work into out (and
// out8, each warp quantising the 32-column blocks it wrote), by the calling block's warps
// (kSplitWarps of them, all reaching this). Per head: every warp finds M and L with its lanes
// over the splits; warp w sums splits w, w + warps, ... for its lanes' HD/32 columns each, and
// the warps' sums meet in shared memory. (A thread per column walking every split in turn was
// bound by the latency of its one load at a time: 64 splits of Gemma 3's one KV head cost more
// than the attention; docs/benchmarks.md.) The loads bypass L1: in the in-place merge other
// blocks of the kernel wrote the partials.
template <int HD>
__device__ __forceinline__ void merge_heads(const float* __restrict__ work, int n_head, int splits, int t, int h0,
                                            int heads, float* __restrict__ out, uint8_t* __restrict__ out8) {
  constexpr int E = HD / 32, W = partial_floats<HD>();
  __shared__ float sums[kSplitWarps][HD];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t width = int64_t(n_head) * HD;
  for (int i = 0; i < heads; ++i) {
    const int h = h0 + i;
    const float* w = work + (int64_t(t) * n_head + h) * splits * W;
    float M = kNoScore;
    for (int s = lane; s < splits; s += 32) M = fmaxf(M, __ldcg(w + int64_t(s) * W));
    M = warp_max(M);
    float L = 0.f, o[E] = {};
#pragma unroll 4
    for (int s = warp; s < splits; s += kSplitWarps) {
      const float* ws = w + int64_t(s) * W;
      const float f = __expf(__ldcg(ws) - M);
      L += __ldcg(ws + 1) * f;
#pragma unroll
      for (int e = 0; e < E; ++e) o[e] += __ldcg(ws + kPartialHead + lane * E + e) * f;
    }
#pragma unroll
    for (int e = 0; e < E; ++e) sums[warp][lane * E + e] = o[e];
    __shared__ float Ls[kSplitWarps];
    if (lane == 0) Ls[warp] = L;
    __syncthreads();
    float Lt = 0.f;
#pragma unroll
    for (int x = 0; x < kSplitWarps; ++x) Lt += Ls[x];
    for (int b = warp; b < E; b += kSplitWarps) {  // head h's 32-column block b
      const int d = b * 32 + lane;
      float O = 0.f;
#pragma unroll
      for (int x = 0; x < kSplitWarps; ++x) O += sums[x][d];
      const float v = Lt > 0.f ? O / Lt : 0.f;
      const int64_t col = int64_t(h) * HD + d;
      out[int64_t(t) * width + col] = v;
      if (out8) quantize_block32(v, width, col / 32, out8 + size_t(t) * x8_bytes(width));
    }
    __syncthreads();  // sums and Ls are the next head's
  }
}

// The end of split sp of (KV head kvh, row t) once its warps hold their states: the warps merged
// through shared memory, then the result written as SplitMerge says. Returns whether this block
// wrote the group's output (the only split, or the last to arrive in place): every split of the
// group has then finished reading its inputs.
template <int HD, int MAXG, int E>
__device__ __forceinline__ bool finish_split(const WarpState<E, MAXG>& st, MergeSmem<kSplitWarps, MAXG, HD>& sm,
                                             const AttentionArgs& a, int kvh, int sp, int splits, int t,
                                             float* __restrict__ work, const SplitMerge& mg) {
  const int G = a.n_head / a.n_head_kv;
  const int64_t width = int64_t(a.n_head) * HD;
  if (mg.count && splits == 1) {  // the block holds the whole result: no partial, no merge
    merge_warps<kSplitWarps>(st, G, sm, [&](int g, int d, float, float L, float O) {
      const float o = L > 0.f ? O / L : 0.f;
      const int64_t col = int64_t(kvh * G + g) * HD + d;
      mg.out[int64_t(t) * width + col] = o;
      if (mg.out8) quantize_block32(o, width, col / 32, mg.out8 + size_t(t) * x8_bytes(width));
    });
    return true;
  }
  merge_warps<kSplitWarps>(st, G, sm, [&](int g, int d, float M, float L, float O) {
    float* dst = work + ((int64_t(t) * a.n_head + kvh * G + g) * splits + sp) * partial_floats<HD>();
    if (d == 0) dst[0] = M, dst[1] = L;
    dst[kPartialHead + d] = O;
  });
  if (!mg.count) return false;
  // In place: the partial made visible to the whole GPU before the block counts itself in; the
  // last split to arrive merges them all and leaves the word zeroed for the next launch.
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned* c = mg.count + int64_t(t) * a.n_head_kv + kvh;
    last = atomicAdd(c, 1u) == unsigned(splits - 1);
    if (last) *c = 0u;
  }
  __syncthreads();
  if (last) merge_heads<HD>(work, a.n_head, splits, t, kvh * G, G, mg.out, mg.out8);
  return last;
}

}  // namespace lamina::kernels::attn_detail
