// Prompt attention on tensor cores (flash-attention 2 on mma.sync m16n8k16, f16 in, f32 out).
//
// grid (query tile of 64, head); 4 warps, each owning 16 query rows. Q is read once from the f32
// activations into A fragments (scaled by scale * log2 e, so the softmax uses exp2). KV tiles of
// 64 positions stream through shared memory, K as [key][d] and V transposed to [d][key], so
// every B fragment of S = Q K^T and of O += P V is one 32-bit shared load; rows are padded by 8
// halves so that the 8 rows x 4 columns of a fragment load fall in distinct banks. S's
// accumulator layout is P's A-fragment layout, so P never leaves registers. Causal masking
// only touches the tiles that cross the diagonal; later tiles are skipped.
//
// Layouts: q [rows][n_head][HD] f32; caches [n_ctx][n_head_kv][HD] f16; out like q.
#include "kernels/common/launch_status.h"
#include "kernels/common/mma.cuh"
#include "kernels/ops/ops.h"

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <string>

namespace lamina::kernels {
namespace {

using mma::mma16816;
using mma::pack2;

constexpr int kTileQ = 64, kTileK = 64, kWarps = 4, kPad = 8;

template <int HD>
__global__ void __launch_bounds__(kWarps * 32) flash_prefill_kernel(const float* __restrict__ q, int rows,
                                                                    const int32_t* __restrict__ pos,
                                                                    const __half* __restrict__ kc,
                                                                    const __half* __restrict__ vc, AttentionArgs a,
                                                                    float* __restrict__ out) {
  __shared__ __align__(16) __half k_s[kTileK][HD + kPad];
  __shared__ __align__(16) __half vt_s[HD][kTileK + kPad];
  const int tile = int(gridDim.x - 1 - blockIdx.x);  // the longest (latest) tiles first
  const int h = blockIdx.y, kvh = h / (a.n_head / a.n_head_kv);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t4 = lane % 4;
  const int p0 = pos[0];
  const int64_t qd = int64_t(a.n_head) * HD, kvd = int64_t(a.n_head_kv) * HD;
  const int r0 = tile * kTileQ + warp * 16;  // this warp's first query row
  const float qscale = a.scale * 1.4426950408889634f;

  // Q fragments: rows r0+g and r0+g+8, for each 16-wide chunk of d.
  uint32_t qf[HD / 16][4];
#pragma unroll
  for (int kk = 0; kk < HD / 16; ++kk)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int r = r0 + g + (i % 2) * 8, d = kk * 16 + 2 * t4 + (i / 2) * 8;
      float2 v = make_float2(0.f, 0.f);
      if (r < rows) v = *reinterpret_cast<const float2*>(q + int64_t(r) * qd + int64_t(h) * HD + d);
      qf[kk][i] = pack2<__half>(v.x * qscale, v.y * qscale);
    }

  float o[HD / 8][4] = {};
  float m[2] = {-1e30f, -1e30f}, l[2] = {0.f, 0.f};
  const int q_hi = min(rows, (tile + 1) * kTileQ) - 1;  // the block's last query row
  const int n_keys = p0 + q_hi + 1;
  for (int k0 = 0; k0 < n_keys; k0 += kTileK) {
    __syncthreads();  // the previous tile is consumed
    // K tile [key][d] and V tile transposed [d][key]; 16-byte chunks, zeros beyond n_keys.
    // Consecutive threads take consecutive keys, so the transposed stores of a warp fill one
    // row of vt_s (two keys per bank word) instead of 16 rows of the same bank.
    for (int c = threadIdx.x; c < kTileK * HD / 8; c += kWarps * 32) {
      const int key = c % kTileK, d = (c / kTileK) * 8;
      uint4 kv = make_uint4(0, 0, 0, 0), vv = make_uint4(0, 0, 0, 0);
      if (k0 + key < n_keys) {
        kv = *reinterpret_cast<const uint4*>(kc + int64_t(k0 + key) * kvd + int64_t(kvh) * HD + d);
        vv = *reinterpret_cast<const uint4*>(vc + int64_t(k0 + key) * kvd + int64_t(kvh) * HD + d);
      }
      *reinterpret_cast<uint4*>(&k_s[key][d]) = kv;
      const __half* vh = reinterpret_cast<const __half*>(&vv);
#pragma unroll
      for (int i = 0; i < 8; ++i) vt_s[d + i][key] = vh[i];
    }
    __syncthreads();
    if (r0 >= rows || k0 > p0 + r0 + 15) continue;  // nothing of this tile is visible to the warp

    // S = Q K^T: 16 x 64 per warp, as 8 tiles of 16 x 8.
    float s[kTileK / 8][4];
#pragma unroll
    for (int j = 0; j < kTileK / 8; ++j) {
      s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
      for (int kk = 0; kk < HD / 16; ++kk) {
        const uint32_t b0 = *reinterpret_cast<const uint32_t*>(&k_s[j * 8 + g][kk * 16 + 2 * t4]);
        const uint32_t b1 = *reinterpret_cast<const uint32_t*>(&k_s[j * 8 + g][kk * 16 + 2 * t4 + 8]);
        mma16816<__half>(s[j], qf[kk][0], qf[kk][1], qf[kk][2], qf[kk][3], b0, b1);
      }
    }
    // Causal mask (and keys past the end) where the tile reaches the diagonal.
    if (k0 + kTileK - 1 > p0 + r0) {
#pragma unroll
      for (int j = 0; j < kTileK / 8; ++j)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int key = k0 + j * 8 + 2 * t4 + (i % 2), qpos = p0 + r0 + g + (i / 2) * 8;
          if (key > qpos) s[j][i] = -1e30f;
        }
    }
    // Online softmax per row (row g: elements 0, 1; row g+8: elements 2, 3; a row spans a quad).
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      float mx = m[hr];
#pragma unroll
      for (int j = 0; j < kTileK / 8; ++j) mx = fmaxf(mx, fmaxf(s[j][2 * hr], s[j][2 * hr + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(~0u, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(~0u, mx, 2));
      const float corr = exp2f(m[hr] - mx);
      m[hr] = mx;
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < kTileK / 8; ++j) {
        s[j][2 * hr] = exp2f(s[j][2 * hr] - mx);
        s[j][2 * hr + 1] = exp2f(s[j][2 * hr + 1] - mx);
        sum += s[j][2 * hr] + s[j][2 * hr + 1];
      }
      l[hr] = l[hr] * corr + sum;  // per-thread partial; the quad's partials are summed at the end
#pragma unroll
      for (int n = 0; n < HD / 8; ++n) o[n][2 * hr] *= corr, o[n][2 * hr + 1] *= corr;
    }
    // O += P V: P (16 x 64) as A fragments straight from s; B from the transposed V tile.
#pragma unroll
    for (int kc2 = 0; kc2 < kTileK / 16; ++kc2) {
      const uint32_t a0 = pack2<__half>(s[2 * kc2][0], s[2 * kc2][1]);
      const uint32_t a1 = pack2<__half>(s[2 * kc2][2], s[2 * kc2][3]);
      const uint32_t a2 = pack2<__half>(s[2 * kc2 + 1][0], s[2 * kc2 + 1][1]);
      const uint32_t a3 = pack2<__half>(s[2 * kc2 + 1][2], s[2 * kc2 + 1][3]);
#pragma unroll
      for (int n = 0; n < HD / 8; ++n) {
        const uint32_t b0 = *reinterpret_cast<const uint32_t*>(&vt_s[n * 8 + g][kc2 * 16 + 2 * t4]);
        const uint32_t b1 = *reinterpret_cast<const uint32_t*>(&vt_s[n * 8 + g][kc2 * 16 + 2 * t4 + 8]);
        mma16816<__half>(o[n], a0, a1, a2, a3, b0, b1);
      }
    }
  }
  if (r0 >= rows) return;
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    l[hr] += __shfl_xor_sync(~0u, l[hr], 1);
    l[hr] += __shfl_xor_sync(~0u, l[hr], 2);
    const int r = r0 + g + hr * 8;
    if (r >= rows) continue;
    const float inv = 1.f / l[hr];
    float* dst = out + int64_t(r) * qd + int64_t(h) * HD;
#pragma unroll
    for (int n = 0; n < HD / 8; ++n)
      *reinterpret_cast<float2*>(dst + n * 8 + 2 * t4) = make_float2(o[n][2 * hr] * inv, o[n][2 * hr + 1] * inv);
  }
}

}  // namespace

bool attention_prefill_supported(const AttentionArgs& a) {
  return a.kv_type == GgmlType::F16 && (a.head_dim == 64 || a.head_dim == 128) && a.n_head_kv > 0 &&
         a.n_head % a.n_head_kv == 0;
}

Status attention_prefill(const float* q, int64_t rows, const int32_t* pos, const void* k_cache, const void* v_cache,
                         const AttentionArgs& a, float* out, cudaStream_t s) {
  if (!attention_prefill_supported(a)) return Status::error("attention_prefill: needs an f16 cache and head_dim 64 or 128");
  if (!q || !pos || !k_cache || !v_cache || !out) return Status::error("attention_prefill: null pointer");
  if (rows <= 0) return Status::success();
  if (rows > a.n_ctx) return Status::error("attention_prefill: more rows than cache positions");
  const dim3 grid(unsigned((rows + kTileQ - 1) / kTileQ), unsigned(a.n_head));
  const auto* kc = static_cast<const __half*>(k_cache);
  const auto* vc = static_cast<const __half*>(v_cache);
  if (a.head_dim == 64) flash_prefill_kernel<64><<<grid, kWarps * 32, 0, s>>>(q, int(rows), pos, kc, vc, a, out);
  else flash_prefill_kernel<128><<<grid, kWarps * 32, 0, s>>>(q, int(rows), pos, kc, vc, a, out);
  return launch_status("attention_prefill");
}

}  // namespace lamina::kernels
