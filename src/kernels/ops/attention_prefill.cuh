// The prompt-attention rungs' shared pieces (attention_prefill.cu: v1, v2 on mma.sync;
// attention_prefill_wgmma.cu: v3, v4 on wgmma). Every rung keeps, per warp, 16 query rows in the
// m16n8k16 fragment layout: row g = lane / 4 and g + 8, columns 2 (lane % 4) + {0, 1} of each
// 8-wide group. A wgmma m64nN accumulator is that layout four times over (warp w of the
// warpgroup: rows 16 w .. 16 w + 15), so the same softmax and stores serve both.
#pragma once

#include "kernels/common/mma.cuh"
#include "kernels/common/launch_status.h"
#include "kernels/ops/ops.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace lamina::kernels::prefill {

constexpr float kLog2e = 1.4426950408889634f;  // q is scaled by scale * log2 e: the softmax uses exp2

// Q fragments of rows r0+g and r0+g+8 for each 16-wide chunk of d, scaled and rounded to f16
// (q: [rows][n_head][HD] f32, row stride qd; rows past `rows` are zeros).
template <int HD>
__device__ __forceinline__ void load_q(const float* __restrict__ q, int rows, int64_t qd, int h, int r0, float qscale,
                                       uint32_t (&qf)[HD / 16][4]) {
  const int g = threadIdx.x % 32 / 4, t4 = threadIdx.x % 4;
#pragma unroll
  for (int kk = 0; kk < HD / 16; ++kk)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int r = r0 + g + (i % 2) * 8, d = kk * 16 + 2 * t4 + (i / 2) * 8;
      float2 v = make_float2(0.f, 0.f);
      if (r < rows) v = *reinterpret_cast<const float2*>(q + int64_t(r) * qd + int64_t(h) * HD + d);
      qf[kk][i] = mma::pack2<__half>(v.x * qscale, v.y * qscale);
    }
}

// Causal mask of a 16 x TK score tile whose keys start at k0 (query rows from qpos0), and with a
// sliding window (window > 0: position p sees keys p - window + 1 .. p) the keys before it: a
// masked score is replaced, so whatever the product held (even NaN from unwritten cache rows) is
// gone.
template <int TK>
__device__ __forceinline__ void mask_tile(float (&s)[TK / 8][4], int k0, int qpos0, int window = 0) {
  const int g = threadIdx.x % 32 / 4, t4 = threadIdx.x % 4;
  // (the whole tile visible to every row: causally, and inside the last row's window)
  if (k0 + TK - 1 <= qpos0 && (window <= 0 || k0 > qpos0 + 15 - window)) return;
#pragma unroll
  for (int j = 0; j < TK / 8; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int key = k0 + j * 8 + 2 * t4 + (i % 2), qpos = qpos0 + g + (i / 2) * 8;
      if (key > qpos || (window > 0 && key <= qpos - window)) s[j][i] = -1e30f;
    }
}

// 2^x on the SFU with subnormal results flushed to zero (ex2.approx.ftz: one instruction;
// exp2f's ex2.approx without ftz adds a range test and two scalings around it). A flushed value
// is below 2^-126, far under f16's smallest (P is rounded to f16).
__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Online softmax per row (row g: elements 0, 1; row g+8: elements 2, 3; a row spans a quad):
// s becomes P, the running max m and partial sum l are updated, and corr is the factor by which
// the output so far must be rescaled (rescale_o; apart for v4_overlap, whose O is still being
// accumulated by the last tile's MMAs when the next tile's scores are ready). Without kGuard a row
// must have seen a visible key before a tile that masks all of its keys (causal: key 0 is visible
// to every row, and tiles run from key 0 up); with it (sliding windows, whose first tiles may hold
// none of a row's keys) a row with no visible key yet gets P = 0 there, not exp2(0) = 1.
template <int TK, bool kGuard = false>
__device__ __forceinline__ void softmax_scores(float (&s)[TK / 8][4], float (&m)[2], float (&l)[2], float (&corr)[2]) {
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    float mx = m[hr];
#pragma unroll
    for (int j = 0; j < TK / 8; ++j) mx = fmaxf(mx, fmaxf(s[j][2 * hr], s[j][2 * hr + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(~0u, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(~0u, mx, 2));
    // (kGuard: every key so far masked; subtracting 0 makes P = exp2(-1e30) = 0)
    const float ref = kGuard && mx == -1e30f ? 0.f : mx;
    corr[hr] = exp2_ftz(m[hr] - ref);
    m[hr] = mx;
    float sum = 0.f;
#pragma unroll
    for (int j = 0; j < TK / 8; ++j) {
      s[j][2 * hr] = exp2_ftz(s[j][2 * hr] - ref);
      s[j][2 * hr + 1] = exp2_ftz(s[j][2 * hr + 1] - ref);
      sum += s[j][2 * hr] + s[j][2 * hr + 1];
    }
    l[hr] = l[hr] * corr[hr] + sum;  // per-thread partial; the quad's partials are summed at the end
  }
}

template <int HD>
__device__ __forceinline__ void rescale_o(float (&o)[HD / 8][4], const float (&corr)[2]) {
#pragma unroll
  for (int n = 0; n < HD / 8; ++n) o[n][0] *= corr[0], o[n][1] *= corr[0], o[n][2] *= corr[1], o[n][3] *= corr[1];
}

template <int TK, int HD, bool kGuard = false>
__device__ __forceinline__ void softmax_step(float (&s)[TK / 8][4], float (&m)[2], float (&l)[2],
                                             float (&o)[HD / 8][4]) {
  float corr[2];
  softmax_scores<TK, kGuard>(s, m, l, corr);
  rescale_o<HD>(o, corr);
}

// P (16 x TK, from s) as the A fragments of k-step kc (keys 16 kc .. 16 kc + 15).
template <int TK>
__device__ __forceinline__ void p_fragments(const float (&s)[TK / 8][4], int kc, uint32_t (&a)[4]) {
  a[0] = mma::pack2<__half>(s[2 * kc][0], s[2 * kc][1]);
  a[1] = mma::pack2<__half>(s[2 * kc][2], s[2 * kc][3]);
  a[2] = mma::pack2<__half>(s[2 * kc + 1][0], s[2 * kc + 1][1]);
  a[3] = mma::pack2<__half>(s[2 * kc + 1][2], s[2 * kc + 1][3]);
}

// out[r] = o / l for the warp's rows r0+g and r0+g+8 (and its 16-bit copy when out16 is given).
template <int HD>
__device__ __forceinline__ void store_rows(float (&o)[HD / 8][4], float (&l)[2], int rows, int64_t qd, int h, int r0,
                                           float* __restrict__ out, void* __restrict__ out16, bool bf16) {
  const int g = threadIdx.x % 32 / 4, t4 = threadIdx.x % 4;
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    l[hr] += __shfl_xor_sync(~0u, l[hr], 1);
    l[hr] += __shfl_xor_sync(~0u, l[hr], 2);
    const int r = r0 + g + hr * 8;
    if (r >= rows) continue;
    const float inv = 1.f / l[hr];
    const int64_t row = int64_t(r) * qd + int64_t(h) * HD;
#pragma unroll
    for (int n = 0; n < HD / 8; ++n) {
      const float2 v = make_float2(o[n][2 * hr] * inv, o[n][2 * hr + 1] * inv);
      const int64_t i = row + n * 8 + 2 * t4;
      *reinterpret_cast<float2*>(out + i) = v;
      if (out16) {
        if (bf16) *reinterpret_cast<__nv_bfloat162*>(static_cast<__nv_bfloat16*>(out16) + i) = __floats2bfloat162_rn(v.x, v.y);
        else *reinterpret_cast<__half2*>(static_cast<__half*>(out16) + i) = __floats2half2_rn(v.x, v.y);
      }
    }
  }
}

// v3 and v4 (attention_prefill_wgmma.cu): whether they run here, for args attention_prefill_supported
// takes (an sm_90 device, a cache whose rows a tensor map can address, q readable as 16-byte
// vectors; over a paged cache, blocks whose size TMA boxes can follow: wgmma_paged_blocks), and
// their launch (overlap: v4) over a contiguous cache (table null) or a paged one (slot of
// position j: table[j / block_tokens] * block_tokens + j % block_tokens).
bool wgmma_supported(const AttentionArgs& a, const float* q, const void* k_cache, const void* v_cache);
bool wgmma_paged_blocks(int block_tokens);
Status launch_wgmma(const float* q, int rows, const int32_t* pos, const __half* kc, const __half* vc,
                    const AttentionArgs& a, float* out, void* out16, bool bf16, bool overlap, const int32_t* table,
                    int block_tokens, cudaStream_t s);

}  // namespace lamina::kernels::prefill
