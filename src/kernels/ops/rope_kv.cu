// rope_kv_store: the attention block's element-wise prologue as one kernel — RoPE on q and k
// (in place) and the KV-cache append of the rotated k and of v — instead of three launches.
// One thread per work item, items laid out as
//   [rows][n_head][n_rot/2]        q pairs rotated
//   [rows][n_head_kv][head_dim/2]  k pairs: rotated (pair < n_rot/2) or copied, then stored
//   [rows][n_head_kv * head_dim]   v elements stored
// Values are those of rope() then kv_store(), bit for bit.
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

template <class KT>
__device__ __forceinline__ KT to_cache(float v) {
  if constexpr (std::is_same_v<KT, __half>) return __float2half_rn(v);
  else return v;
}

// q: [rows][n_head * hd];  k, v: [rows][n_head_kv * hd];  kc, vc: [n_ctx][n_head_kv * hd]
template <class KT>
__global__ void rope_kv_store_kernel(float* __restrict__ q, float* __restrict__ k, const float* __restrict__ v,
                                     int64_t rows, const int32_t* __restrict__ pos, RopeArgs r, AttentionArgs a,
                                     float theta_scale, KT* __restrict__ kc, KT* __restrict__ vc) {
  pdl_enter();
  const int hd = a.head_dim, half = r.n_rot / 2;
  const int64_t kvd = int64_t(a.n_head_kv) * hd;
  const int64_t n_q = rows * a.n_head * half, n_k = rows * a.n_head_kv * (hd / 2), n_v = rows * kvd;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < n_q + n_k + n_v;
       idx += int64_t(gridDim.x) * blockDim.x) {
    if (idx < n_q) {
      const int64_t th = idx / half;  // row * n_head + head
      rope_detail::rotate_pair(q + th * hd, int(idx % half), pos[th / a.n_head], theta_scale, r);
    } else if (idx < n_q + n_k) {
      const int64_t j = idx - n_q;
      const int pair = int(j % (hd / 2));
      const int64_t th = j / (hd / 2);  // row * n_head_kv + head
      const int64_t t = th / a.n_head_kv;
      float* head = k + th * hd;
      int2 e;
      if (pair < half) {
        e = rope_detail::rotate_pair(head, pair, pos[t], theta_scale, r);
      } else {  // past the rotated dimensions: two elements stored as they are
        const int i0 = r.n_rot + 2 * (pair - half);
        e = make_int2(i0, i0 + 1);
      }
      KT* dst = kc + int64_t(pos[t]) * kvd + (th % a.n_head_kv) * hd;
      dst[e.x] = to_cache<KT>(head[e.x]);
      dst[e.y] = to_cache<KT>(head[e.y]);
    } else {
      const int64_t i = idx - n_q - n_k;
      vc[int64_t(pos[i / kvd]) * kvd + i % kvd] = to_cache<KT>(v[i]);
    }
  }
}

}  // namespace

Status rope_kv_store(float* q, float* k, const float* v, int64_t rows, const int32_t* pos, const RopeArgs& r,
                     void* k_cache, void* v_cache, const AttentionArgs& a, cudaStream_t s) {
  if (!q || !k || !v || !pos || !k_cache || !v_cache) return Status::error("rope_kv_store: null pointer");
  if (a.n_head <= 0 || a.n_head_kv <= 0 || a.head_dim <= 0 || a.head_dim % 2)
    return Status::error("rope_kv_store: bad head geometry");
  if (r.n_rot <= 0 || r.n_rot % 2 || r.n_rot > a.head_dim) return Status::error("rope_kv_store: bad n_rot");
  if (a.kv_type != GgmlType::F16 && a.kv_type != GgmlType::F32)
    return Status::error("rope_kv_store: KV cache must be f16 or f32");
  if (rows <= 0) return Status::success();
  const int64_t items = rows * (int64_t(a.n_head) * (r.n_rot / 2) + int64_t(a.n_head_kv) * (a.head_dim / 2) +
                                int64_t(a.n_head_kv) * a.head_dim);
  const unsigned grid = unsigned(std::clamp<int64_t>((items + 255) / 256, 1, 65535));
  const float theta_scale = powf(r.base, -2.0f / float(r.n_rot));
  if (a.kv_type == GgmlType::F16)
    launch_pdl(rope_kv_store_kernel<__half>, grid, 256, 0, s, q, k, v, rows, pos, r, a, theta_scale,
               static_cast<__half*>(k_cache), static_cast<__half*>(v_cache));
  else
    launch_pdl(rope_kv_store_kernel<float>, grid, 256, 0, s, q, k, v, rows, pos, r, a, theta_scale,
               static_cast<float*>(k_cache), static_cast<float*>(v_cache));
  return launch_status("rope_kv_store");
}

}  // namespace lamina::kernels
