// mma rung of the paged decode attention (DecodeAttention::Mma, the batching engine's decode rows).
//
// Against the split rung (attention_decode.cu): the same grid (KV head, split, row) and the same
// partials for attn_merge_kernel, but a warp scores and folds 16 positions at a time on tensor
// cores instead of one warp-wide shuffle reduction per position and query head. ncu of the split
// kernel in 128-user engine steps (Llama-3-8B: 8 KV heads, 4 query heads each, head_dim 128):
// 30 % of DRAM bandwidth with issue slots 53 % busy, most of them shuffles and their adds
// (docs/benchmarks.md, thirty-sixth session).
//
// Per 16 positions j0 .. j0 + 15, warp lanes (g = lane / 4, c = lane % 4), mma.sync m16n8k16:
//   S = Q K^T      A = Q: row g = query head g of the group (zero past G; rows 8-15 zero),
//                  B = K^T, two n8 tiles (positions j0 + 8n + g);  S[g][8n + 2c + {0,1}] land
//                  in lane (g, c).
//   O^T += V^T P^T A = V^T: rows are head dims, k the 16 positions; B = P^T, whose fragment is
//                  exactly S's accumulator layout (P never leaves registers); n = the 8 heads.
// Both contractions may order their k freely, and the output rows (head dims) may be permuted as
// long as the write-out follows: so a lane loads contiguous pieces of rows with 16-byte loads:
//   K: lane (g, c) loads dims [c * HD/4, (c + 1) * HD/4) of position j0 + 8n + g; mma k-step kk
//      pairs logical k 2c + {0,1} with dim c * HD/4 + 4kk + {0,1} and k 2c + 8 + {0,1} with
//      4kk + 2 + {0,1} (Q's A fragment uses the same map);
//   V: lane (g, c) loads dims [g * HD/8, (g + 1) * HD/8) of positions j0 + 2c + {0, 1, 8, 9};
//      m-tile mt's row g is dim g * HD/8 + 2mt, row g + 8 is dim g * HD/8 + 2mt + 1 (two rows'
//      halves paired by byte permutes into the A fragment).
// Precision: Q and P are split into f16 high and low parts (x = hi + lo, lo = f16(x - hi)) and
// (Q's entries times scale * log2(e) must stay under f16's 65504: |q| below ~5e5 at head_dim 128)
// each product is two mmas, so the scores and weights carry ~22 bits like the f32 split rung
// (the tensor cores have time to spare: the kernel is bound by the cache reads). K and V are the
// f16 cache values. Scores are scaled by log2(e) and use exp2; the partial's max is written in
// natural-log units, as the split rung writes it.
// Positions past the split's end are masked (score -inf, weight 0) and load the last valid row,
// so no unwritten cache slot is read.
#include "kernels/common/launch_status.h"
#include "kernels/common/mma.cuh"
#include "kernels/common/pdl.cuh"
#include "kernels/ops/attention_decode.cuh"
#include "kernels/ops/ops.h"

#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace lamina::kernels {
namespace {

using namespace attn_detail;
using mma::mma16816;

constexpr int kWarps = 4, kMaxGroup = 8, kChunk = 16;
constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;

// x as f16 hi + lo halves, packed in pairs (the A/B fragment registers).
__device__ __forceinline__ void split2(float x, float y, uint32_t& hi, uint32_t& lo) {
  const __half2 h = __floats2half2_rn(x, y);
  const float2 hf = __half22float2(h);
  const __half2 l = __floats2half2_rn(x - hf.x, y - hf.y);
  hi = *reinterpret_cast<const uint32_t*>(&h);
  lo = *reinterpret_cast<const uint32_t*>(&l);
}

// q [rows][n_head * HD] f32; kc, vc: the paged f16 cache [slots][n_head_kv * HD]; work as the
// split rung's (per row, head, split: [m, l, o[HD]]).
// Four blocks an SM (at most 128 registers): the rows looked up a chunk ahead took the kernel
// from 126 to 150 registers, three blocks, unbounded; bounded, ptxas fits them without spills.
template <int HD>
__global__ void __launch_bounds__(kWarps * 32, 4) attn_paged_mma_kernel(const float* __restrict__ q, const int32_t* __restrict__ pos,
                                                                     const __half* __restrict__ kc, const __half* __restrict__ vc,
                                                                     AttentionArgs a, int splits, float* __restrict__ work,
                                                                     PagedKv paged) {
  pdl_enter();
  constexpr int KE = HD / 4, VE = HD / 8;  // halves of a K row / of a V row that one lane loads
  constexpr int KS = HD / 16, MT = HD / 16;  // k-steps of S; m-tiles of O^T
  const int kvh = blockIdx.x, sp = blockIdx.y, t = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  const int G = a.n_head / a.n_head_kv;
  const int64_t kvd = int64_t(a.n_head_kv) * HD;
  const auto [begin, end] = split_range(pos[t], a.window, sp, splits);
  const PagedRows rows{paged.tables + int64_t(paged.row_seq[t]) * paged.max_blocks, paged.block_tokens};

  // Q's A fragments (row g = query head kvh * G + g), scaled by scale * log2(e), hi and lo: the
  // same for every warp, so warp 0 makes them and the others read them from shared memory in
  // fragment order (lane-contiguous 8 bytes: no bank conflicts), not holding them in registers.
  __shared__ uint2 qf[2][KS][32];
  if (warp == 0) {
    const float qs = a.scale * kLog2e;
    const float* qrow = q + int64_t(t) * a.n_head * HD + int64_t(kvh * G + g) * HD + c * KE;
#pragma unroll
    for (int kk = 0; kk < KS; ++kk) {
      float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
      if (g < G) v = *reinterpret_cast<const float4*>(qrow + 4 * kk);
      split2(v.x * qs, v.y * qs, qf[0][kk][lane].x, qf[1][kk][lane].x);
      split2(v.z * qs, v.w * qs, qf[0][kk][lane].y, qf[1][kk][lane].y);
    }
  }
  __syncthreads();
  float m = kNoScore, l = 0.f;  // head g's running max (log2 units) and this lane's share of its sum
  float o[MT][4];               // O^T: [mt] (dim g*VE + 2mt, head 2c), (.., 2c+1), (dim + 1, 2c), (dim + 1, 2c+1)
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) o[mt][0] = o[mt][1] = o[mt][2] = o[mt][3] = 0.f;
  const __half* kb = kc + int64_t(kvh) * HD + c * KE;
  const __half* vb = vc + int64_t(kvh) * HD + g * VE;

  // The cache rows of this lane's positions in the chunk at j0 (K: j0 + 8n + g; V: j0 + 2c +
  // {0, 1, 8, 9}), looked up one chunk ahead: the block-table reads then overlap the chunk before
  // instead of standing in front of every K/V load.
  struct ChunkRows {  // (a cache has fewer than 2^31 slots: block ids are int32, as are positions)
    int32_t k[2], v[4];
  };
  const auto rows_of = [&](int j0) {
    ChunkRows cr;
#pragma unroll
    for (int n = 0; n < 2; ++n) cr.k[n] = int32_t(rows(min(j0 + 8 * n + g, end - 1)));
#pragma unroll
    for (int r = 0; r < 4; ++r) cr.v[r] = int32_t(rows(min(j0 + 2 * c + r % 2 + 8 * (r / 2), end - 1)));
    return cr;
  };
  constexpr int kStride = kWarps * kChunk;
  ChunkRows cur{};
  if (begin + warp * kChunk < end) cur = rows_of(begin + warp * kChunk);
  for (int j0 = begin + warp * kChunk; j0 < end; j0 += kStride) {
    uint4 kr[2][KE / 8], vr[4][VE / 8];
#pragma unroll
    for (int n = 0; n < 2; ++n) {
      const uint4* p = reinterpret_cast<const uint4*>(kb + int64_t(cur.k[n]) * kvd);
#pragma unroll
      for (int i = 0; i < KE / 8; ++i) kr[n][i] = p[i];
    }
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const uint4* p = reinterpret_cast<const uint4*>(vb + int64_t(cur.v[r]) * kvd);
#pragma unroll
      for (int i = 0; i < VE / 8; ++i) vr[r][i] = p[i];
    }
    if (j0 + kStride < end) cur = rows_of(j0 + kStride);
    // S = Q K^T: s[n][0..1] = head g at positions j0 + 8n + 2c + {0,1} (s[n][2..3]: zero rows)
    float s[2][4] = {};
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
      for (int kk = 0; kk < KS; ++kk) {
        const uint32_t* w = reinterpret_cast<const uint32_t*>(&kr[n][0]);
        const uint32_t b0 = w[2 * kk], b1 = w[2 * kk + 1];
        const uint2 qh = qf[0][kk][lane], ql = qf[1][kk][lane];
        mma16816<__half>(s[n], qh.x, 0u, qh.y, 0u, b0, b1);
        mma16816<__half>(s[n], ql.x, 0u, ql.y, 0u, b0, b1);
      }
    // Online softmax of head g over the chunk (the four lanes of group g hold its 16 scores).
    float mx = m;
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        if (j0 + 8 * n + 2 * c + i >= end) s[n][i] = kNoScore;
        mx = fmaxf(mx, s[n][i]);
      }
    mx = fmaxf(mx, __shfl_xor_sync(~0u, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(~0u, mx, 2));
    const float alpha = exp2f(m - mx);
    m = mx;
    float p[2][2];
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
      for (int i = 0; i < 2; ++i) p[n][i] = j0 + 8 * n + 2 * c + i < end ? exp2f(s[n][i] - mx) : 0.f;
    l = l * alpha + (p[0][0] + p[0][1]) + (p[1][0] + p[1][1]);
    uint32_t ph[2], pl[2];  // B = P^T: k = positions 2c + {0,1} (n = 0) and 8 + 2c + {0,1} (n = 1), column g
    split2(p[0][0], p[0][1], ph[0], pl[0]);
    split2(p[1][0], p[1][1], ph[1], pl[1]);
    // O^T's columns are heads 2c and 2c + 1: their rescale factors live in groups 2c and 2c + 1.
    const float a0 = __shfl_sync(~0u, alpha, 8 * c), a1 = __shfl_sync(~0u, alpha, 8 * c + 4);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      o[mt][0] *= a0, o[mt][1] *= a1, o[mt][2] *= a0, o[mt][3] *= a1;
      // A = V^T: rows dim 2mt (g) and 2mt + 1 (g + 8) of this lane's piece; k = its 4 positions
      const int wi = mt / 4, wj = mt % 4;  // the 32-bit word holding dims 2mt, 2mt + 1
      const auto word = [&](int r) { return reinterpret_cast<const uint32_t*>(&vr[r][wi])[wj]; };
      const uint32_t v0 = word(0), v1 = word(1), v8 = word(2), v9 = word(3);
      const uint32_t x0 = __byte_perm(v0, v1, 0x5410), x1 = __byte_perm(v0, v1, 0x7632);
      const uint32_t x2 = __byte_perm(v8, v9, 0x5410), x3 = __byte_perm(v8, v9, 0x7632);
      mma16816<__half>(o[mt], x0, x1, x2, x3, ph[0], ph[1]);
      mma16816<__half>(o[mt], x0, x1, x2, x3, pl[0], pl[1]);
    }
  }
  l += __shfl_xor_sync(~0u, l, 1);
  l += __shfl_xor_sync(~0u, l, 2);

  // The warps' partials for combine_warps_at. Lane (g, c) holds heads 2c, 2c + 1 at dims
  // g * VE + j: in rows of HD floats the 32 lanes' stores fell in 2 banks (16-way conflicts at
  // HD 128). So a float of padding follows every VE dims and a head's row is HD + 12 floats: the
  // 32 lanes of a store then hit 32 banks, for VE = 16 and 8 alike.
  constexpr int kRow = HD + 12;
  const auto at = [](int d) { return d + d / VE; };
  __shared__ float ml[kWarps][kMaxGroup][2];
  __shared__ float os[kWarps][kMaxGroup][kRow];
  if (c == 0) ml[warp][g][0] = m > kNoScore ? m * kLn2 : kNoScore, ml[warp][g][1] = l;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int i = 0; i < 4; ++i) os[warp][2 * c + i % 2][at(g * VE + 2 * mt + i / 2)] = o[mt][i];
  combine_warps_at<kWarps, HD>(
      G, [&](int w, int h, int k) { return ml[w][h][k]; }, [&](int w, int h, int d) { return os[w][h][at(d)]; },
      [&](int h, int d, float M, float L, float O) {
    float* dst = work + ((int64_t(t) * a.n_head + kvh * G + h) * splits + sp) * (HD + 2);
    if (d == 0) dst[0] = M, dst[1] = L;
    dst[2 + d] = O;
  });
}

}  // namespace

namespace attn_detail {

bool paged_mma_supported(const AttentionArgs& a) {
  const int G = a.n_head_kv > 0 ? a.n_head / a.n_head_kv : 0;
  return a.kv_type == GgmlType::F16 && (a.head_dim == 64 || a.head_dim == 128) && G >= 2 && G <= kMaxGroup;
}

void launch_paged_mma(const float* q, int64_t rows, const int32_t* pos, const void* kc, const void* vc,
                      const AttentionArgs& a, int splits, float* work, cudaStream_t s, const PagedKv& paged) {
  const dim3 grid(unsigned(a.n_head_kv), unsigned(splits), unsigned(rows));
  const auto* k = static_cast<const __half*>(kc);
  const auto* v = static_cast<const __half*>(vc);
  if (a.head_dim == 64) launch_pdl(attn_paged_mma_kernel<64>, grid, kWarps * 32, 0, s, q, pos, k, v, a, splits, work, paged);
  else launch_pdl(attn_paged_mma_kernel<128>, grid, kWarps * 32, 0, s, q, pos, k, v, a, splits, work, paged);
}

}  // namespace attn_detail
}  // namespace lamina::kernels
