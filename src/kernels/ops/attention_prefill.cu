// Prompt attention on tensor cores (flash-attention 2 on mma.sync m16n8k16, f16 in, f32 out).
// The first two rungs of PrefillAttention (ops.h), both kept and tested; the next two, v3_wgmma
// and v4_overlap on Hopper's warpgroup MMAs, are attention_prefill_wgmma.cu:
//
// v1_mma: grid (query tile of 64, head); 4 warps, each owning 16 query rows. KV tiles of 64
//   positions are loaded synchronously into shared memory, K as [key][d] and V transposed to
//   [d][key] element by element, so every B fragment is one 32-bit shared load. The synchronous
//   loads leave the tensor cores mostly idle (a few % of their roofline: docs/benchmarks.md).
// v2_pipelined: grid (head, query tile of 128), the longest tiles first; 8 warps. K and V tiles
//   stay [key][d] as in the cache and stream through two shared-memory stages with cp.async (the
//   next tile is in flight while this one is multiplied); B fragments come from ldmatrix (K) and
//   ldmatrix.trans (V), four 8x8 matrices per instruction. A KV tile now serves 128 queries.
//   At pp512 32 heads x 4 tiles is one wave and the causal tiles are uneven, so v2 gains most on
//   long prompts (figures: docs/benchmarks.md). A 4-warp, 64-query version of v2 measured the
//   same (dropped). v2 alone also takes head_dim 256 and sliding windows (Gemma 3): a block starts
//   at its first row's first visible key, a warp skips tiles outside its rows' windows, and the
//   softmax gives a row that has seen no visible key yet P = 0 (softmax_scores' kGuard); the
//   other rungs run as v2 there. At head size 256 with few heads it takes 64-row blocks of 4
//   warps where 128-row blocks would not fill the SMs (launch_v2_any).
//
// Common to both: Q is read once from the f32 activations into A fragments (scaled by scale *
// log2 e, so the softmax uses exp2). Shared rows are padded by 8 halves so that the 8 rows of a
// fragment or ldmatrix load fall in distinct banks. S's accumulator layout is P's A-fragment
// layout, so P never leaves registers. Causal masking only touches the tiles that cross the
// diagonal; later tiles are skipped. The output may also be written in f16/bf16 (out16), the A
// operand of the next GEMM.
//
// Layouts: q [rows][n_head][HD] f32; caches [n_ctx][n_head_kv][HD] f16; out (and out16) like q.
// v2 also reads a paged cache (attention_prefill_paged: the batching engine's prompt chunks): key
// position j's row is the slot its sequence's block table gives (attn_detail::PagedRows), looked
// up per 16-byte chunk as the tile is staged; everything else is the same kernel. (v3 and v4 read
// it by a TMA box per block: attention_prefill_wgmma.cu; v1 runs there as v2.)
#include "kernels/common/launch_status.h"
#include "kernels/common/mma.cuh"
#include "kernels/ops/attention_decode.cuh"
#include "kernels/ops/attention_prefill.cuh"
#include "kernels/ops/ops.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <string>

namespace lamina::kernels {
namespace {

using mma::mma16816;
using prefill::load_q;
using prefill::p_fragments;
using prefill::store_rows;

constexpr int kTileK = 64, kPad = 8;
constexpr int kTileQ1 = 64, kWarps1 = 4;   // v1

template <int HD>
__global__ void __launch_bounds__(kWarps1 * 32) flash_prefill_v1(const float* __restrict__ q, int rows,
                                                                 const int32_t* __restrict__ pos,
                                                                 const __half* __restrict__ kc,
                                                                 const __half* __restrict__ vc, AttentionArgs a,
                                                                 float* __restrict__ out, void* __restrict__ out16,
                                                                 bool bf16) {
  __shared__ __align__(16) __half k_s[kTileK][HD + kPad];
  __shared__ __align__(16) __half vt_s[HD][kTileK + kPad];
  const int tile = int(gridDim.x - 1 - blockIdx.x);  // the longest (latest) tiles first
  const int h = blockIdx.y, kvh = h / (a.n_head / a.n_head_kv);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t4 = lane % 4;
  const int p0 = pos[0];
  const int64_t qd = int64_t(a.n_head) * HD, kvd = int64_t(a.n_head_kv) * HD;
  const int r0 = tile * kTileQ1 + warp * 16;  // this warp's first query row
  uint32_t qf[HD / 16][4];
  load_q<HD>(q, rows, qd, h, r0, a.scale * prefill::kLog2e, qf);

  float o[HD / 8][4] = {};
  float m[2] = {-1e30f, -1e30f}, l[2] = {0.f, 0.f};
  const int q_hi = min(rows, (tile + 1) * kTileQ1) - 1;  // the block's last query row
  const int n_keys = p0 + q_hi + 1;
  for (int k0 = 0; k0 < n_keys; k0 += kTileK) {
    __syncthreads();  // the previous tile is consumed
    // K tile [key][d] and V tile transposed [d][key]; 16-byte chunks, zeros beyond n_keys.
    // Consecutive threads take consecutive keys, so the transposed stores of a warp fill one
    // row of vt_s (two keys per bank word) instead of 16 rows of the same bank.
    for (int c = threadIdx.x; c < kTileK * HD / 8; c += kWarps1 * 32) {
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
    prefill::mask_tile<kTileK>(s, k0, p0 + r0);
    prefill::softmax_step<kTileK, HD>(s, m, l, o);
    // O += P V: B from the transposed V tile.
#pragma unroll
    for (int kc2 = 0; kc2 < kTileK / 16; ++kc2) {
      uint32_t pa[4];
      p_fragments<kTileK>(s, kc2, pa);
#pragma unroll
      for (int n = 0; n < HD / 8; ++n) {
        const uint32_t b0 = *reinterpret_cast<const uint32_t*>(&vt_s[n * 8 + g][kc2 * 16 + 2 * t4]);
        const uint32_t b1 = *reinterpret_cast<const uint32_t*>(&vt_s[n * 8 + g][kc2 * 16 + 2 * t4 + 8]);
        mma16816<__half>(o[n], pa[0], pa[1], pa[2], pa[3], b0, b1);
      }
    }
  }
  if (r0 < rows) store_rows<HD>(o, l, rows, qd, h, r0, out, out16, bf16);
}

// v2's shared memory: two stages of K and V tiles, [key][d] padded.
template <int HD>
struct KvStages {
  __half k[2][kTileK][HD + kPad];
  __half v[2][kTileK][HD + kPad];
};

// Rows: the cache row of key position j (attn_detail::ContiguousRows, or PagedRows).
template <int HD, int WARPS, class Rows>
__global__ void __launch_bounds__(WARPS * 32) flash_prefill_v2(const float* __restrict__ q, int rows,
                                                                 const int32_t* __restrict__ pos,
                                                                 const __half* __restrict__ kc,
                                                                 const __half* __restrict__ vc, AttentionArgs a,
                                                                 float* __restrict__ out, void* __restrict__ out16,
                                                                 bool bf16, Rows rows_of) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  KvStages<HD>& sm = *reinterpret_cast<KvStages<HD>*>(smem_raw);
  const int h = blockIdx.x, tile = int(gridDim.y - 1 - blockIdx.y);  // the longest (latest) tiles first
  const int kvh = h / (a.n_head / a.n_head_kv);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int p0 = pos[0];
  const int64_t qd = int64_t(a.n_head) * HD, kvd = int64_t(a.n_head_kv) * HD;
  const int r0 = tile * WARPS * 16 + warp * 16;  // this warp's first query row
  const int q_hi = min(rows, (tile + 1) * WARPS * 16) - 1;
  const int n_keys = p0 + q_hi + 1, n_tiles = (n_keys + kTileK - 1) / kTileK;
  // With a sliding window the block's first key is its first row's first (earlier tiles are
  // skipped), and a warp multiplies a tile only if it holds a key of its rows' windows.
  const int first_tile = a.window > 0 ? max(0, p0 + tile * WARPS * 16 - a.window + 1) / kTileK : 0;
  const int warp_lo = a.window > 0 ? p0 + r0 - a.window + 1 : 0;  // the warp's earliest visible key
  const __half* kh = kc + int64_t(kvh) * HD;
  const __half* vh = vc + int64_t(kvh) * HD;

  // Tile i into stage i % 2: 16-byte cp.async chunks, consecutive threads along a row; keys past
  // n_keys are zero-filled (their scores are masked, and zero V rows keep P V finite).
  auto stage = [&](int i) {
    const int k0 = i * kTileK, st = i % 2;
    for (int c = threadIdx.x; c < kTileK * HD / 8; c += WARPS * 32) {
      const int key = c / (HD / 8), d = (c % (HD / 8)) * 8;
      const bool in = k0 + key < n_keys;
      const int64_t off = (in ? rows_of(k0 + key) : 0) * kvd + d;
      mma::cp_async16(&sm.k[st][key][d], kh + off, in ? 16 : 0);
      mma::cp_async16(&sm.v[st][key][d], vh + off, in ? 16 : 0);
    }
    mma::cp_async_commit();
  };
  stage(first_tile);

  uint32_t qf[HD / 16][4];
  load_q<HD>(q, rows, qd, h, r0, a.scale * prefill::kLog2e, qf);
  float o[HD / 8][4] = {};
  float m[2] = {-1e30f, -1e30f}, l[2] = {0.f, 0.f};
  // ldmatrix lane roles: lane i addresses row i % 8 of matrix i / 8.
  const int lm_row = lane % 8, lm_mat = lane / 8;
  for (int i = first_tile; i < n_tiles; ++i) {
    if (i + 1 < n_tiles) {
      stage(i + 1);
      mma::cp_async_wait<1>();
    } else {
      mma::cp_async_wait<0>();
    }
    __syncthreads();  // tile i is in stage i % 2 for every thread
    const int k0 = i * kTileK, st = i % 2;
    if (r0 < rows && k0 <= p0 + r0 + 15 && k0 + kTileK > warp_lo) {
      // S = Q K^T (16 x 64 per warp). One ldmatrix.x4 gives b0, b1 of key tiles j and j + 1:
      // matrices (keys j*8.., d), (keys j*8.., d+8), (keys j*8+8.., d), (keys j*8+8.., d+8).
      float s[kTileK / 8][4] = {};
#pragma unroll
      for (int kk = 0; kk < HD / 16; ++kk)
#pragma unroll
        for (int j = 0; j < kTileK / 8; j += 2) {
          uint32_t b[4];
          mma::ldmatrix_x4(b, &sm.k[st][j * 8 + (lm_mat / 2) * 8 + lm_row][kk * 16 + (lm_mat % 2) * 8]);
          mma16816<__half>(s[j], qf[kk][0], qf[kk][1], qf[kk][2], qf[kk][3], b[0], b[1]);
          mma16816<__half>(s[j + 1], qf[kk][0], qf[kk][1], qf[kk][2], qf[kk][3], b[2], b[3]);
        }
      prefill::mask_tile<kTileK>(s, k0, p0 + r0, a.window);
      prefill::softmax_step<kTileK, HD, true>(s, m, l, o);
      // O += P V. ldmatrix.trans of the [key][d] tile gives V's B fragments: matrices
      // (keys kc*16.., d n*8), (keys kc*16+8.., d n*8), (keys kc*16.., d n*8+8), (keys kc*16+8.., d n*8+8).
#pragma unroll
      for (int kc2 = 0; kc2 < kTileK / 16; ++kc2) {
        uint32_t pa[4];
        p_fragments<kTileK>(s, kc2, pa);
#pragma unroll
        for (int n = 0; n < HD / 8; n += 2) {
          uint32_t b[4];
          mma::ldmatrix_x4_trans(b, &sm.v[st][kc2 * 16 + (lm_mat % 2) * 8 + lm_row][(n + lm_mat / 2) * 8]);
          mma16816<__half>(o[n], pa[0], pa[1], pa[2], pa[3], b[0], b[1]);
          mma16816<__half>(o[n + 1], pa[0], pa[1], pa[2], pa[3], b[2], b[3]);
        }
      }
    }
    __syncthreads();  // stage i % 2 is refilled with tile i + 2 in the next iteration
  }
  if (r0 < rows) store_rows<HD>(o, l, rows, qd, h, r0, out, out16, bf16);
}

template <int HD, int WARPS, class Rows>
Status launch_v2(const float* q, int rows, const int32_t* pos, const __half* kc, const __half* vc,
                 const AttentionArgs& a, float* out, void* out16, bool bf16, cudaStream_t s, Rows rows_of) {
  const size_t smem = sizeof(KvStages<HD>);
  // (set on every launch: the attribute belongs to the current device, and ranks of a
  // tensor-parallel group launch on several)
  const cudaError_t attr =
      cudaFuncSetAttribute(flash_prefill_v2<HD, WARPS, Rows>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  if (attr != cudaSuccess) return Status::error("attention_prefill: " + std::to_string(smem) + " bytes of shared memory refused");
  const dim3 grid(unsigned(a.n_head), unsigned((rows + WARPS * 16 - 1) / (WARPS * 16)));
  flash_prefill_v2<HD, WARPS, Rows><<<grid, WARPS * 32, smem, s>>>(q, rows, pos, kc, vc, a, out, out16, bf16, rows_of);
  return launch_status("attention_prefill");
}

// v2 at the args' head_dim (64, 128 or 256).
template <class Rows>
Status launch_v2_any(const float* q, int rows, const int32_t* pos, const __half* kc, const __half* vc,
                     const AttentionArgs& a, float* out, void* out16, bool bf16, cudaStream_t s, Rows rows_of) {
  if (a.head_dim == 64) return launch_v2<64, 8>(q, rows, pos, kc, vc, a, out, out16, bf16, s, rows_of);
  if (a.head_dim == 128) return launch_v2<128, 8>(q, rows, pos, kc, vc, a, out, out16, bf16, s, rows_of);
  // Few heads of 256 (Gemma 3 270M and 1B: 4) leave most SMs idle with blocks of 128 rows (16
  // blocks at 512 tokens): blocks of 64 rows, 4 warps, where 128-row blocks would not fill them.
  int dev = 0, sms = 0;
  if (cudaGetDevice(&dev) == cudaSuccess && cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess &&
      int64_t(a.n_head) * ((rows + 127) / 128) < sms)
    return launch_v2<256, 4>(q, rows, pos, kc, vc, a, out, out16, bf16, s, rows_of);
  return launch_v2<256, 8>(q, rows, pos, kc, vc, a, out, out16, bf16, s, rows_of);
}

}  // namespace

const char* prefill_attention_name(PrefillAttention v) {
  switch (v) {
    case PrefillAttention::V1Mma: return "v1_mma";
    case PrefillAttention::V2Pipelined: return "v2_pipelined";
    case PrefillAttention::V3Wgmma: return "v3_wgmma";
    case PrefillAttention::V4Overlap: return "v4_overlap";
  }
  return "?";
}

namespace {
// v2's two K/V stages fit the current device's shared memory (at head_dim 256 they take 132 KiB:
// more than an sm_86, sm_89 or sm_120 block may have, so those run the decode kernels).
bool v2_fits(int head_dim) {
  if (head_dim != 256) return true;
  int dev = 0, optin = 0;
  return cudaGetDevice(&dev) == cudaSuccess &&
         cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) == cudaSuccess &&
         size_t(optin) >= sizeof(KvStages<256>);
}
bool wgmma_rung(PrefillAttention v) { return v == PrefillAttention::V3Wgmma || v == PrefillAttention::V4Overlap; }
// v1 takes head_dim 64 and 128 without a window; elsewhere it runs as v2.
bool v1_takes(const AttentionArgs& a) { return a.head_dim <= 128 && a.window == 0; }
// What attention_prefill_supported asks, for the error when it says no.
constexpr const char* kNeeds =
    "needs an f16 cache, head_dim 64, 128 or 256 (256: 132 KiB of shared memory a block), a window >= 0 and query "
    "heads a multiple of the KV heads";
}  // namespace

bool attention_prefill_supported(const AttentionArgs& a) {
  return a.kv_type == GgmlType::F16 && (a.head_dim == 64 || a.head_dim == 128 || a.head_dim == 256) && a.window >= 0 &&
         a.n_head_kv > 0 && a.n_head % a.n_head_kv == 0 && v2_fits(a.head_dim);
}

bool prefill_attention_runs(PrefillAttention v, const AttentionArgs& a, const float* q, const void* k_cache,
                            const void* v_cache) {
  if (v == PrefillAttention::V1Mma && !v1_takes(a)) return false;
  return attention_prefill_supported(a) && (!wgmma_rung(v) || prefill::wgmma_supported(a, q, k_cache, v_cache));
}

bool prefill_attention_paged_runs(PrefillAttention v, const AttentionArgs& a, int block_tokens, const float* q,
                                  const void* k_cache, const void* v_cache) {
  if (v == PrefillAttention::V1Mma) return false;
  return prefill_attention_runs(v, a, q, k_cache, v_cache) && (!wgmma_rung(v) || prefill::wgmma_paged_blocks(block_tokens));
}

Status attention_prefill(const float* q, int64_t rows, const int32_t* pos, const void* k_cache, const void* v_cache,
                         const AttentionArgs& a, float* out, cudaStream_t s, void* out16, GgmlType t16,
                         PrefillAttention variant) {
  if (!attention_prefill_supported(a)) return Status::error(std::string("attention_prefill: ") + kNeeds);
  if (!q || !pos || !k_cache || !v_cache || !out) return Status::error("attention_prefill: null pointer");
  if (out16 && t16 != GgmlType::F16 && t16 != GgmlType::BF16) return Status::error("attention_prefill: out16 must be f16 or bf16");
  if (rows <= 0) return Status::success();
  if (rows > a.n_ctx) return Status::error("attention_prefill: more rows than cache positions");
  const auto* kc = static_cast<const __half*>(k_cache);
  const auto* vc = static_cast<const __half*>(v_cache);
  const bool bf16 = t16 == GgmlType::BF16;
  const attn_detail::ContiguousRows rows_of{};
  if (wgmma_rung(variant) && prefill::wgmma_supported(a, q, kc, vc))
    return prefill::launch_wgmma(q, int(rows), pos, kc, vc, a, out, out16, bf16, variant == PrefillAttention::V4Overlap,
                                  nullptr, 0, s);
  // (v3 and v4 where they cannot run, and v1 at head_dim 256 or with a sliding window: v2)
  if (variant != PrefillAttention::V1Mma || !v1_takes(a))
    return launch_v2_any(q, int(rows), pos, kc, vc, a, out, out16, bf16, s, rows_of);
  const dim3 grid(unsigned((rows + kTileQ1 - 1) / kTileQ1), unsigned(a.n_head));
  if (a.head_dim == 64) flash_prefill_v1<64><<<grid, kWarps1 * 32, 0, s>>>(q, int(rows), pos, kc, vc, a, out, out16, bf16);
  else flash_prefill_v1<128><<<grid, kWarps1 * 32, 0, s>>>(q, int(rows), pos, kc, vc, a, out, out16, bf16);
  return launch_status("attention_prefill");
}

Status attention_prefill_paged(const float* q, int64_t rows, const int32_t* pos, const int32_t* table, int block_tokens,
                               const void* k_cache, const void* v_cache, const AttentionArgs& a, float* out,
                               cudaStream_t s, void* out16, PrefillAttention variant) {
  if (!attention_prefill_supported(a)) return Status::error(std::string("attention_prefill_paged: ") + kNeeds);
  if (!q || !pos || !table || !k_cache || !v_cache || !out) return Status::error("attention_prefill_paged: null pointer");
  if (block_tokens <= 0) return Status::error("attention_prefill_paged: bad block size");
  if (rows <= 0) return Status::success();
  if (rows > a.n_ctx) return Status::error("attention_prefill_paged: more rows than cache positions");
  const auto* kc = static_cast<const __half*>(k_cache);
  const auto* vc = static_cast<const __half*>(v_cache);
  if (wgmma_rung(variant) && prefill::wgmma_supported(a, q, kc, vc) &&
      prefill::wgmma_paged_blocks(block_tokens))
    return prefill::launch_wgmma(q, int(rows), pos, kc, vc, a, out, out16, false, variant == PrefillAttention::V4Overlap,
                                 table, block_tokens, s);
  const attn_detail::PagedRows rows_of{table, block_tokens};  // (v1 as v2 here)
  return launch_v2_any(q, int(rows), pos, kc, vc, a, out, out16, false, s, rows_of);
}

}  // namespace lamina::kernels
