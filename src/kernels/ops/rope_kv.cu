// rope_kv_store: the attention block's element-wise prologue as one kernel — RoPE on q and k
// (in place) and the KV-cache append of the rotated k and of v — instead of three launches.
// One thread per work item (up to 4 per thread), a row's items laid out as
//   [n_head][n_rot/2]        q pairs rotated
//   [n_head_kv][head_dim/2]  k pairs: rotated (pair < n_rot/2) or copied, then stored
//   [n_head_kv * head_dim]   v elements stored
// The angles are computed once per row and block (the prompt's rows have 32 heads or more each,
// which all rotate by the same angles), not once per pair and head.
// Values are those of rope() then kv_store(), bit for bit. With head norms (qwen3, gemma3) one
// block takes a whole row: it first finds each head's 1/rms (a warp per head, f64 sums as
// rmsnorm's) before any of its threads rotates in place.
#include "kernels/common/launch_status.h"
#include "kernels/common/pdl.cuh"
#include "kernels/ops/ops.h"
#include "kernels/ops/rope.cuh"

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

namespace lamina::kernels {
namespace {

constexpr int kMaxPairs = 256, kThreads = 256, kPerThread = 4, kMaxNormHeads = 256;

template <class KT>
__device__ __forceinline__ KT to_cache(float v) {
  if constexpr (std::is_same_v<KT, __half>) return __float2half_rn(v);
  else return v;
}

// q: [rows][n_head * hd];  k, v: [rows][n_head_kv * hd];  kc, vc: [n_ctx][n_head_kv * hd]
// grid (blocks per row, rows). Each block first computes its row's n_rot/2 angles into shared
// memory (every head of the row uses the same ones), then takes its share of the row's items.
template <class KT>
__global__ void rope_kv_store_kernel(float* __restrict__ q, float* __restrict__ k, const float* __restrict__ v,
                                     const int32_t* __restrict__ pos, RopeArgs r, AttentionArgs a, float theta_scale,
                                     KT* __restrict__ kc, KT* __restrict__ vc, const int32_t* __restrict__ slots,
                                     HeadNorms nrm) {
  __shared__ float cs_s[kMaxPairs], sn_s[kMaxPairs];
  __shared__ float inv_s[kMaxNormHeads];  // with norms: 1/rms of each q head, then of each k head
  pdl_enter();
  const int64_t t = blockIdx.y;
  const int hd = a.head_dim, half = r.n_rot / 2, position = pos[t];
  const int64_t kvd = int64_t(a.n_head_kv) * hd;
  for (int i = threadIdx.x; i < half; i += blockDim.x) rope_detail::angle(i, position, theta_scale, r, cs_s[i], sn_s[i]);
  if (nrm.q) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int h = warp; h < a.n_head + a.n_head_kv; h += blockDim.x / 32) {
      const float* src = h < a.n_head ? q + (t * a.n_head + h) * hd : k + t * kvd + int64_t(h - a.n_head) * hd;
      double ss = 0;
      for (int i = lane; i < hd; i += 32) ss += double(src[i]) * src[i];
      for (int o = 16; o; o >>= 1) ss += __shfl_xor_sync(~0u, ss, o);
      if (lane == 0) inv_s[h] = float(1.0 / sqrt(ss / double(hd) + double(nrm.eps)));
    }
  }
  __syncthreads();
  const int n_q = a.n_head * half, n_k = a.n_head_kv * (hd / 2), n_v = int(kvd);
  const int64_t slot = slots ? slots[t] : position;  // the cache row (a paged cache: the row's slot)
  KT* kdst = kc + slot * kvd;
  for (int idx = blockIdx.x * blockDim.x + threadIdx.x; idx < n_q + n_k + n_v; idx += gridDim.x * blockDim.x) {
    if (idx < n_q) {
      const int i = idx % half, head = idx / half;
      float* qh = q + (t * a.n_head + head) * hd;
      if (nrm.q) rope_detail::rotate_normed(qh, i, cs_s[i], sn_s[i], r, inv_s[head], nrm.q);
      else rope_detail::rotate(qh, i, cs_s[i], sn_s[i], r);
    } else if (idx < n_q + n_k) {
      const int j = idx - n_q, pair = j % (hd / 2), head = j / (hd / 2);
      float* src = k + t * kvd + int64_t(head) * hd;
      int2 e;
      if (pair < half) {
        e = nrm.k ? rope_detail::rotate_normed(src, pair, cs_s[pair], sn_s[pair], r, inv_s[a.n_head + head], nrm.k)
                  : rope_detail::rotate(src, pair, cs_s[pair], sn_s[pair], r);
      } else {  // past the rotated dimensions: two elements stored as they are
        const int i0 = r.n_rot + 2 * (pair - half);
        e = make_int2(i0, i0 + 1);
      }
      kdst[head * hd + e.x] = to_cache<KT>(src[e.x]);
      kdst[head * hd + e.y] = to_cache<KT>(src[e.y]);
    } else {
      const int i = idx - n_q - n_k;
      vc[slot * kvd + i] = to_cache<KT>(v[t * kvd + i]);
    }
  }
}

}  // namespace

bool head_norms_supported(const AttentionArgs& a, const RopeArgs& r) {
  return r.n_rot == a.head_dim && a.n_head + a.n_head_kv <= kMaxNormHeads;
}

Status rope_kv_store(float* q, float* k, const float* v, int64_t rows, const int32_t* pos, const RopeArgs& r,
                     void* k_cache, void* v_cache, const AttentionArgs& a, cudaStream_t s, const int32_t* slots,
                     const HeadNorms& norms) {
  if (!q || !k || !v || !pos || !k_cache || !v_cache) return Status::error("rope_kv_store: null pointer");
  if (a.n_head <= 0 || a.n_head_kv <= 0 || a.head_dim <= 0 || a.head_dim % 2)
    return Status::error("rope_kv_store: bad head geometry");
  if (r.n_rot <= 0 || r.n_rot % 2 || r.n_rot > a.head_dim) return Status::error("rope_kv_store: bad n_rot");
  if (a.kv_type != GgmlType::F16 && a.kv_type != GgmlType::F32)
    return Status::error("rope_kv_store: KV cache must be f16 or f32");
  if (rows <= 0) return Status::success();
  if (r.n_rot / 2 > kMaxPairs) return Status::error("rope_kv_store: more than 256 rotated pairs");
  if (rows > 65535) return Status::error("rope_kv_store: more than 65535 rows");
  const int64_t items = int64_t(a.n_head) * (r.n_rot / 2) + int64_t(a.n_head_kv) * (a.head_dim / 2) +
                        int64_t(a.n_head_kv) * a.head_dim;  // per row
  if (items > INT32_MAX / 2) return Status::error("rope_kv_store: rows too wide");
  if (norms.q || norms.k) {
    if (!norms.q || !norms.k) return Status::error("rope_kv_store: head norms need both q and k weights");
    if (!head_norms_supported(a, r))
      return Status::error("rope_kv_store: head norms need n_rot == head_dim and at most 256 heads");
  }
  // (with head norms, one block per row: its threads normalise every head before rotating any)
  const unsigned blocks_per_row = norms.q ? 1u : unsigned((items + kThreads * kPerThread - 1) / (kThreads * kPerThread));
  const dim3 grid(blocks_per_row, unsigned(rows));
  const float theta_scale = powf(r.base, -2.0f / float(r.n_rot));
  if (a.kv_type == GgmlType::F16)
    launch_pdl(rope_kv_store_kernel<__half>, grid, kThreads, 0, s, q, k, v, pos, r, a, theta_scale,
               static_cast<__half*>(k_cache), static_cast<__half*>(v_cache), slots, norms);
  else
    launch_pdl(rope_kv_store_kernel<float>, grid, kThreads, 0, s, q, k, v, pos, r, a, theta_scale,
               static_cast<float*>(k_cache), static_cast<float*>(v_cache), slots, norms);
  return launch_status("rope_kv_store");
}

}  // namespace lamina::kernels
