// attention_decode_rope: a decode token's whole attention block in one kernel — RoPE on q and
// k, the cache store of k and v, attention over positions 0..pos, the normalised output (and
// its int8 blocks for the Wo GEMV). The split path (rope_kv_store, attn_split_kernel,
// attn_merge_kernel) takes three launches; in the decode chain each launch boundary costs
// microseconds of drain and ramp (docs/benchmarks.md), far more than the work at short context.
//
// Grid: one block per query head, kW warps; no splits, so the backend takes it while the context
// is short (a few hundred positions: each warp then folds a few rounds of P positions) and the
// split path beyond. With GQA the blocks of a group each read their KV head's cache rows (from L2
// after the first) and the group's first block stores the new row: one block per KV head gave
// Llama 3 8 blocks and measured slower than the split path; one per query head gives it 32.
//   1. the n_rot/2 angles of the position into shared memory, and each warp's first round of
//      cache rows below the position into registers (preload_first_round), both before the PDL
//      wait (pos is the pass's input copy; its upload kernel completes before any later kernel
//      starts; the preload: a small gain in tg128, docs/benchmarks.md);
//   2. the head's q, k and v into shared memory (one round trip), q and k rotated there (pairs
//      (2i, 2i+1), or (i, i + n_rot/2) for NEOX; rope.cuh, the same arithmetic as rope() bit for
//      bit), written back to q and k, k and v stored in the cache row (by the group's first
//      block); past the first round a __syncthreads makes that row visible to the storing block
//      (the first round, and any block that does not store, take it from shared memory);
//   3. warps take positions warp*P, warp*P + kW*P, ... (attention_decode.cuh), merged through
//      shared memory, out = O / L.
#include "kernels/common/launch_status.h"
#include "kernels/common/pdl.cuh"
#include "kernels/common/q8_blocks.cuh"
#include "kernels/ops/attention_head_rope.cuh"
#include "kernels/ops/ops.h"

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

namespace lamina::kernels {
namespace {

using namespace attn_detail;

// Warps per block: 16 (a merge buffer of 16 x HD f32), 8 for head_dim 256 (16 warps would cap
// the registers at 128 and spill).
constexpr int rope_attn_warps(int hd) { return hd <= 128 ? 16 : 8; }

// q: [n_head * HD] (in place), k: [n_head_kv * HD] (in place without GQA; with it k is left as
// it came: the group's blocks read it in no order, so none may write it), v: [n_head_kv * HD];
// kc, vc: [n_ctx][n_head_kv * HD] f16; out: [n_head * HD]; out8: x8_bytes(n_head * HD) or null.
// Block h: query head h of KV head h / (n_head / n_head_kv). Each warp's first round of cache
// rows is loaded before the PDL wait (they were written by earlier steps).
template <int HD>
__global__ void __launch_bounds__(rope_attn_warps(HD) * 32)
    attn_rope_kernel(float* __restrict__ q, float* __restrict__ k, const float* __restrict__ v,
                     const int32_t* __restrict__ pos, RopeArgs r, AttentionArgs a, float theta_scale,
                     __half* __restrict__ kc, __half* __restrict__ vc, float* __restrict__ out,
                     uint8_t* __restrict__ out8, HeadNorms nrm) {
  constexpr int kW = rope_attn_warps(HD), P = 8;
  __shared__ RopeHeadSmem<kW, HD> sm;
  const int h = blockIdx.x, group = a.n_head / a.n_head_kv, g = h / group, position = pos[0];
  rope_angles(sm.cs, sm.sn, position, theta_scale, r);
  KvRound<HD / 32, P> first;
  preload_first_round<kW, HD, P>(kc, vc, a, g, position, first);
  pdl_enter();
  const int64_t width = int64_t(a.n_head) * HD;
  rope_attend_head<kW, HD, P>(
      sm, h, g, h % group == 0, position, q, k, v, q, group == 1 ? k : nullptr, r, a, kc, vc,
      [&](int d, float o) {
        const int64_t col = int64_t(h) * HD + d;
        out[col] = o;
        if (out8) quantize_block32(o, width, col / 32, out8);
      },
      &first, nrm);
}

// The batching engine's decode rows on the paged cache, one row per sequence: grid (query head,
// row). Row t: position pos[t], sequence row_seq[t], whose block table places every position
// (PagedRows; it already holds the new position's block, where the row is stored); q, k, v, out
// and out8 / out16 (optional: the Wo GEMV's int8 blocks, the Wo GEMM's f16 rows) at row t. The
// tables and positions are the pass's inputs (copied before its first kernel), so the first round
// is loaded before the PDL wait as in attn_rope_kernel.
template <int HD>
__global__ void __launch_bounds__(rope_attn_warps(HD) * 32)
    attn_rope_paged_kernel(float* __restrict__ q, float* __restrict__ k, const float* __restrict__ v,
                           const int32_t* __restrict__ pos, PagedKv kv, RopeArgs r, AttentionArgs a, float theta_scale,
                           __half* __restrict__ kc, __half* __restrict__ vc, float* __restrict__ out,
                           uint8_t* __restrict__ out8, __half* __restrict__ out16, HeadNorms nrm) {
  constexpr int kW = rope_attn_warps(HD), P = 8;
  __shared__ RopeHeadSmem<kW, HD> sm;
  const int h = blockIdx.x, t = blockIdx.y, group = a.n_head / a.n_head_kv, g = h / group, position = pos[t];
  const PagedRows rows{kv.tables + int64_t(kv.row_seq[t]) * kv.max_blocks, kv.block_tokens};
  rope_angles(sm.cs, sm.sn, position, theta_scale, r);
  KvRound<HD / 32, P> first;
  preload_first_round<kW, HD, P>(kc, vc, a, g, position, first, rows);
  pdl_enter();
  const int64_t width = int64_t(a.n_head) * HD, kvd = int64_t(a.n_head_kv) * HD;
  float* qt = q + t * width;
  float* kt = k + t * kvd;
  rope_attend_head<kW, HD, P>(
      sm, h, g, h % group == 0, position, qt, kt, v + t * kvd, qt, group == 1 ? kt : nullptr, r, a, kc, vc,
      [&](int d, float o) {
        const int64_t col = int64_t(h) * HD + d;
        out[t * width + col] = o;
        if (out16) out16[t * width + col] = __float2half_rn(o);
        if (out8) quantize_block32(o, width, col / 32, out8 + size_t(t) * x8_bytes(width));
      },
      &first, nrm, rows);
}

template <int HD>
void launch_hd(float* q, float* k, const float* v, const int32_t* pos, const RopeArgs& r, const AttentionArgs& a,
               float theta_scale, __half* kc, __half* vc, float* out, uint8_t* out8, const HeadNorms& nrm, cudaStream_t s) {
  launch_pdl(attn_rope_kernel<HD>, dim3(unsigned(a.n_head)), rope_attn_warps(HD) * 32, 0, s, q, k, v, pos, r, a, theta_scale, kc, vc, out, out8,
             nrm);
}

template <int HD>
void launch_paged_hd(float* q, float* k, const float* v, int64_t rows, const int32_t* pos, const PagedKv& kv,
                     const RopeArgs& r, const AttentionArgs& a, float theta_scale, __half* kc, __half* vc, float* out,
                     uint8_t* out8, __half* out16, const HeadNorms& nrm, cudaStream_t s) {
  launch_pdl(attn_rope_paged_kernel<HD>, dim3(unsigned(a.n_head), unsigned(rows)), rope_attn_warps(HD) * 32, 0, s, q, k, v,
             pos, kv, r, a, theta_scale, kc, vc, out, out8, out16, nrm);
}

// What both kernels take, whatever the rows.
bool geometry_ok(const AttentionArgs& a, const RopeArgs& r, int64_t positions, bool head_norms) {
  const bool hd = a.head_dim == 64 || a.head_dim == 96 || a.head_dim == 128 || a.head_dim == 256;
  return hd && a.kv_type == GgmlType::F16 && (a.window == 0 || (positions > 0 && a.window >= positions)) &&
         a.n_head_kv > 0 && a.n_head % a.n_head_kv == 0 && r.n_rot > 0 && r.n_rot % 2 == 0 && r.n_rot <= a.head_dim &&
         (!head_norms || r.n_rot == a.head_dim);
}

}  // namespace

bool attention_decode_rope_paged_supported(const AttentionArgs& a, const RopeArgs& r, int64_t positions, bool head_norms) {
  return geometry_ok(a, r, positions, head_norms);
}

Status attention_decode_rope_paged(float* q, float* k, const float* v, int64_t rows, const int32_t* pos,
                                   const PagedKv& paged, const RopeArgs& r, void* k_cache, void* v_cache,
                                   const AttentionArgs& a, float* out, cudaStream_t s, void* out8, void* out16,
                                   const HeadNorms& norms, int64_t positions) {
  if (bool(norms.q) != bool(norms.k)) return Status::error("attention_decode_rope_paged: head norms need both q and k weights");
  if (!geometry_ok(a, r, positions, norms.q))
    return Status::error("attention_decode_rope_paged: needs an f16 cache, head_dim 64/96/128/256, whole groups of "
                         "query heads per KV head, 0 < n_rot <= head_dim (even; == head_dim with head norms) and no "
                         "sliding window shorter than the positions");
  if (!q || !k || !v || !pos || !k_cache || !v_cache || !out || !paged.row_seq || !paged.tables || paged.block_tokens < 1)
    return Status::error("attention_decode_rope_paged: null pointer or no block tables");
  if (rows < 1 || rows > 65535) return Status::error("attention_decode_rope_paged: 1 to 65535 rows");
  if (out16 && reinterpret_cast<uintptr_t>(out16) % 2) return Status::error("attention_decode_rope_paged: out16 must be 2-byte aligned");
  const float theta_scale = powf(r.base, -2.0f / float(r.n_rot));
  auto* kc = static_cast<__half*>(k_cache);
  auto* vc = static_cast<__half*>(v_cache);
  auto* o8 = static_cast<uint8_t*>(out8);
  auto* o16 = static_cast<__half*>(out16);
  switch (a.head_dim) {
    case 64: launch_paged_hd<64>(q, k, v, rows, pos, paged, r, a, theta_scale, kc, vc, out, o8, o16, norms, s); break;
    case 96: launch_paged_hd<96>(q, k, v, rows, pos, paged, r, a, theta_scale, kc, vc, out, o8, o16, norms, s); break;
    case 128: launch_paged_hd<128>(q, k, v, rows, pos, paged, r, a, theta_scale, kc, vc, out, o8, o16, norms, s); break;
    default: launch_paged_hd<256>(q, k, v, rows, pos, paged, r, a, theta_scale, kc, vc, out, o8, o16, norms, s); break;
  }
  return launch_status("attention_decode_rope_paged");
}

bool attention_decode_rope_supported(const AttentionArgs& a, const RopeArgs& r, int64_t rows, int64_t positions,
                                     bool head_norms) {
  return rows == 1 && geometry_ok(a, r, positions, head_norms);
}

Status attention_decode_rope(float* q, float* k, const float* v, const int32_t* pos, const RopeArgs& r, void* k_cache,
                             void* v_cache, const AttentionArgs& a, float* out, cudaStream_t s, void* out8,
                             const HeadNorms& norms, int64_t positions) {
  if (bool(norms.q) != bool(norms.k)) return Status::error("attention_decode_rope: head norms need both q and k weights");
  if (!attention_decode_rope_supported(a, r, 1, positions, norms.q))
    return Status::error("attention_decode_rope: needs an f16 cache, head_dim 64/96/128/256, whole groups of query "
                         "heads per KV head, 0 < n_rot <= head_dim (even; == head_dim with head norms) and no sliding "
                         "window shorter than the positions");
  if (!q || !k || !v || !pos || !k_cache || !v_cache || !out) return Status::error("attention_decode_rope: null pointer");
  const float theta_scale = powf(r.base, -2.0f / float(r.n_rot));
  auto* kc = static_cast<__half*>(k_cache);
  auto* vc = static_cast<__half*>(v_cache);
  auto* o8 = static_cast<uint8_t*>(out8);
  switch (a.head_dim) {
    case 64: launch_hd<64>(q, k, v, pos, r, a, theta_scale, kc, vc, out, o8, norms, s); break;
    case 96: launch_hd<96>(q, k, v, pos, r, a, theta_scale, kc, vc, out, o8, norms, s); break;
    case 128: launch_hd<128>(q, k, v, pos, r, a, theta_scale, kc, vc, out, o8, norms, s); break;
    default: launch_hd<256>(q, k, v, pos, r, a, theta_scale, kc, vc, out, o8, norms, s); break;
  }
  return launch_status("attention_decode_rope");
}

}  // namespace lamina::kernels
