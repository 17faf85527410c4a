// KV-cache store and flash-decoding attention.
//
// attn_split_kernel: grid (KV head, split, token), 4 warps. A block owns one KV head and all
// G = n_head / n_head_kv query heads that read it, so each K/V row is loaded once per group.
// The kernel is compiled for at most MAXG = 1, 4 or 8 query heads per KV head: per-head state
// lives in registers, and sizing it for 8 heads held a Llama-2 block (G = 1) to 128 registers
// per thread. Lane l holds elements [l*E, l*E + E) of a head (E = head_dim / 32); a warp takes
// P positions at a time (2P row loads in flight; P = 8 for G = 1, else 4), scores them with
// warp-sum reductions and folds them into its running (max, sum, output) — the online softmax.
// The block's 4 warps are merged through shared memory and written as one split's partial;
// attn_merge_kernel combines the splits:
//   M = max_s m_s,  L = sum_s l_s e^(m_s - M),  out = sum_s o_s e^(m_s - M) / L.
// Each split's share of positions is computed on the device from pos[t], so a captured graph
// replays correctly while the sequence grows.
#include "kernels/common/launch_status.h"
#include "kernels/common/pdl.cuh"
#include "kernels/common/q8_blocks.cuh"
#include "kernels/ops/attention_decode.cuh"
#include "kernels/ops/ops.h"

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <string>

namespace lamina::kernels {
namespace {

using namespace attn_detail;

constexpr int kWarps = 4, kMaxGroup = 8;

// work, per (token, head, split): [m, l, o[head_dim]]
// kPaged: the cache is paged (attention_paged): row t's positions are slots of its sequence's
// blocks (paged.tables row paged.row_seq[t]); otherwise position j is cache row j.
template <class KT, int HD, int MAXG, bool kPaged = false>
__global__ void __launch_bounds__(kWarps * 32) attn_split_kernel(const float* __restrict__ q, const int32_t* __restrict__ pos,
                                                                 const KT* __restrict__ kc, const KT* __restrict__ vc,
                                                                 AttentionArgs a, int splits, float* __restrict__ work,
                                                                 PagedKv paged) {
  pdl_enter();
  constexpr int E = HD / 32, P = MAXG == 1 ? 8 : 4;
  const int kvh = blockIdx.x, sp = blockIdx.y, t = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int G = a.n_head / a.n_head_kv;
  const int64_t kvd = int64_t(a.n_head_kv) * HD;
  const auto [begin, end] = split_range(pos[t], a.window, sp, splits);

  WarpState<E, MAXG> st;
  st.reset();
#pragma unroll
  for (int g = 0; g < MAXG; ++g) {
    if (g >= G) break;
    const float* qh = q + int64_t(t) * a.n_head * HD + int64_t(kvh * G + g) * HD + lane * E;
#pragma unroll
    for (int e = 0; e < E; ++e) st.q[g][e] = qh[e];
  }
  const KT* kb = kc + int64_t(kvh) * HD + lane * E;
  const KT* vb = vc + int64_t(kvh) * HD + lane * E;
  if constexpr (kPaged)
    attend_positions<KT, E, MAXG, P>(st, kb, vb, kvd, begin + warp * P, end, kWarps * P, G, a.scale,
                                     PagedRows{paged.tables + int64_t(paged.row_seq[t]) * paged.max_blocks, paged.block_tokens});
  else
    attend_positions<KT, E, MAXG, P>(st, kb, vb, kvd, begin + warp * P, end, kWarps * P, G, a.scale);
  __shared__ MergeSmem<kWarps, MAXG, HD> sm;
  merge_warps<kWarps>(st, G, sm, [&](int g, int d, float M, float L, float O) {
    float* dst = work + ((int64_t(t) * a.n_head + kvh * G + g) * splits + sp) * (HD + 2);
    if (d == 0) dst[0] = M, dst[1] = L;
    dst[2 + d] = O;
  });
}

// grid (head, token), kMergeThreads threads, dynamic shared memory merge_smem_bytes(splits).
// out: [rows][n_head * head_dim];  out16 (optional): out rounded to f16 (the Wo GEMM's input);
// out8 (optional): [rows][x8_bytes(n_head * head_dim)], each warp quantising the 32-column blocks
// it wrote.
// The splits' maxima, weights e^(m_s - M) and sums l_s are read by the block's threads side by
// side (one load each) into shared memory; each column's thread then walks the splits in order
// with one load a split. A thread walking every split with all three loads (the earlier form)
// waited on memory every few splits: at 8k positions (128 splits) the decode attention took 52
// µs a layer with it, 43 with this (docs/benchmarks.md). The sums add the same terms in the same
// order as that walk: L, O and out keep its bits.
constexpr int kMergeThreads = 128;
constexpr int kMaxMergeSplits = 4096;  // 32 KB of shared memory
size_t merge_smem_bytes(int splits) { return size_t(2 * splits) * sizeof(float); }

__global__ void __launch_bounds__(kMergeThreads) attn_merge_kernel(const float* __restrict__ work, int head_dim,
                                                                   int n_head, int splits, float* __restrict__ out,
                                                                   __half* __restrict__ out16, uint8_t* __restrict__ out8) {
  pdl_enter();
  extern __shared__ float merge_smem[];
  float* fs = merge_smem;           // [splits] e^(m_s - M)
  float* ls = merge_smem + splits;  // [splits] l_s
  __shared__ float warp_max[kMergeThreads / 32];
  const int h = blockIdx.x, t = blockIdx.y, stride = head_dim + 2;
  const float* w = work + (int64_t(t) * n_head + h) * splits * stride;
  float m = kNoScore;
  for (int s = threadIdx.x; s < splits; s += kMergeThreads) m = fmaxf(m, w[s * stride]);
  for (int o = 16; o; o >>= 1) m = fmaxf(m, __shfl_xor_sync(~0u, m, o));
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = m;
  __syncthreads();
  float M = warp_max[0];
#pragma unroll
  for (int i = 1; i < kMergeThreads / 32; ++i) M = fmaxf(M, warp_max[i]);
  for (int s = threadIdx.x; s < splits; s += kMergeThreads) fs[s] = __expf(w[s * stride] - M), ls[s] = w[s * stride + 1];
  __syncthreads();
  const int64_t width = int64_t(n_head) * head_dim;
  // warp-uniform steps over whole 32-column blocks (head_dim is a multiple of 32)
  for (int d0 = threadIdx.x - threadIdx.x % 32; d0 < head_dim; d0 += kMergeThreads) {
    const int d = d0 + threadIdx.x % 32;
    float L = 0.f, O = 0.f;
#pragma unroll 8
    for (int s = 0; s < splits; ++s) {
      const float f = fs[s];
      L += ls[s] * f;
      O += w[s * stride + 2 + d] * f;
    }
    const float o = L > 0.f ? O / L : 0.f;
    const int64_t col = int64_t(h) * head_dim + d;
    out[int64_t(t) * width + col] = o;
    if (out16) out16[int64_t(t) * width + col] = __float2half_rn(o);
    if (out8) quantize_block32(o, width, col / 32, out8 + size_t(t) * x8_bytes(width));
  }
}

template <class KT>
__global__ void kv_store_kernel(const float* __restrict__ k, const float* __restrict__ v, int64_t rows, int64_t kvd,
                                const int32_t* __restrict__ pos, KT* __restrict__ kc, KT* __restrict__ vc) {
  pdl_enter();
  const int64_t n = rows * kvd;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / kvd, c = i % kvd;
    const int64_t dst = int64_t(pos[t]) * kvd + c;
    if constexpr (std::is_same_v<KT, __half>) {
      kc[dst] = __float2half_rn(k[i]);
      vc[dst] = __float2half_rn(v[i]);
    } else {
      kc[dst] = k[i];
      vc[dst] = v[i];
    }
  }
}

Status check_args(const AttentionArgs& a) {
  if (a.n_head <= 0 || a.n_head_kv <= 0 || a.n_head % a.n_head_kv) return Status::error("attention: bad head counts");
  if (a.n_head / a.n_head_kv > kMaxGroup) return Status::error("attention: more than 8 query heads per KV head");
  if (a.window < 0) return Status::error("attention: negative sliding window");
  if (a.kv_type != GgmlType::F16 && a.kv_type != GgmlType::F32) return Status::error("attention: KV cache must be f16 or f32");
  if (a.n_ctx <= 0) return Status::error("attention: empty cache");
  return Status::success();
}

// The split kernel's instance for a (every instance of one cache type has the same signature):
// f32 caches (a debugging option) get the one general instance; f16 caches the one that fits G.
// Null for a head size none is compiled for.
template <class KT>
using SplitKernel = void (*)(const float*, const int32_t*, const KT*, const KT*, AttentionArgs, int, float*, PagedKv);

template <class KT, int HD, bool kPaged>
SplitKernel<KT> split_instance(int G) {
  if constexpr (std::is_same_v<KT, __half>) {
    if (G == 1) return attn_split_kernel<KT, HD, 1, kPaged>;
    if (G <= 4) return attn_split_kernel<KT, HD, 4, kPaged>;
  }
  return attn_split_kernel<KT, HD, kMaxGroup, kPaged>;
}

template <class KT, bool kPaged>
SplitKernel<KT> split_kernel(const AttentionArgs& a) {
  const int G = a.n_head / a.n_head_kv;
  switch (a.head_dim) {
    case 64: return split_instance<KT, 64, kPaged>(G);
    case 96: return split_instance<KT, 96, kPaged>(G);
    case 128: return split_instance<KT, 128, kPaged>(G);
    case 256: return split_instance<KT, 256, kPaged>(G);
    default: return nullptr;
  }
}

template <class KT, bool kPaged>
bool launch_split(const float* q, int64_t rows, const int32_t* pos, const void* kc, const void* vc, const AttentionArgs& a,
                  int splits, float* work, cudaStream_t s, const PagedKv& paged) {
  const SplitKernel<KT> kernel = split_kernel<KT, kPaged>(a);
  if (!kernel) return false;
  const dim3 grid(unsigned(a.n_head_kv), unsigned(splits), unsigned(rows));
  launch_pdl(kernel, grid, kWarps * 32, 0, s, q, pos, static_cast<const KT*>(kc), static_cast<const KT*>(vc), a, splits,
             work, paged);
  return true;
}

// Blocks of the contiguous cache's split kernel for a resident on an SM at once (0: none).
template <class KT>
int split_blocks_per_sm(const AttentionArgs& a) {
  int n = 0;
  const SplitKernel<KT> kernel = split_kernel<KT, false>(a);
  if (kernel) cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kWarps * 32, 0);
  return n;
}

// The split kernels over the cache (paged or not; mma: the paged mma rung instead), then their
// merge into out (and out16, out8).
template <bool kPaged>
Status attend_splits(const char* what, const float* q, int64_t rows, const int32_t* pos, const void* k_cache,
                     const void* v_cache, const AttentionArgs& a, int splits, float* work, float* out, cudaStream_t s,
                     void* out8, const PagedKv& paged, void* out16 = nullptr, bool mma = false) {
  if (Status st = check_args(a); !st) return st;
  if (!q || !pos || !k_cache || !v_cache || !work || !out) return Status::error(std::string(what) + ": null pointer");
  if (splits < 1 || splits > kMaxMergeSplits || rows > 65535) return Status::error(std::string(what) + ": bad split count or rows");
  if (rows <= 0) return Status::success();
  bool ok = true;
  if (mma) launch_paged_mma(q, rows, pos, k_cache, v_cache, a, splits, work, s, paged);
  else if (a.kv_type == GgmlType::F16) ok = launch_split<__half, kPaged>(q, rows, pos, k_cache, v_cache, a, splits, work, s, paged);
  else ok = launch_split<float, kPaged>(q, rows, pos, k_cache, v_cache, a, splits, work, s, paged);
  if (!ok) return Status::error(std::string(what) + ": head_dim " + std::to_string(a.head_dim) + " is not 64, 96, 128 or 256");
  launch_pdl(attn_merge_kernel, dim3(unsigned(a.n_head), unsigned(rows)), kMergeThreads, merge_smem_bytes(splits), s, work,
             a.head_dim, a.n_head, splits, out, static_cast<__half*>(out16), static_cast<uint8_t*>(out8));
  return launch_status(what);
}

}  // namespace

Status kv_store(const float* k, const float* v, int64_t rows, const int32_t* pos, void* k_cache, void* v_cache,
                const AttentionArgs& a, cudaStream_t s) {
  if (Status st = check_args(a); !st) return st;
  if (!k || !v || !pos || !k_cache || !v_cache) return Status::error("kv_store: null pointer");
  if (rows <= 0) return Status::success();
  const int64_t kvd = int64_t(a.n_head_kv) * a.head_dim, n = rows * kvd;
  const unsigned grid = unsigned(std::min<int64_t>((n + 255) / 256, 65535));
  if (a.kv_type == GgmlType::F16)
    launch_pdl(kv_store_kernel<__half>, grid, 256, 0, s, k, v, rows, kvd, pos, static_cast<__half*>(k_cache), static_cast<__half*>(v_cache));
  else
    launch_pdl(kv_store_kernel<float>, grid, 256, 0, s, k, v, rows, kvd, pos, static_cast<float*>(k_cache), static_cast<float*>(v_cache));
  return launch_status("kv_store");
}

size_t attention_work_floats(const AttentionArgs& a, int64_t rows, int splits) {
  return size_t(rows) * size_t(a.n_head) * size_t(splits) * size_t(a.head_dim + 2);
}

Status attention_decode(const float* q, int64_t rows, const int32_t* pos, const void* k_cache, const void* v_cache,
                        const AttentionArgs& a, int splits, float* work, float* out, cudaStream_t s, void* out8) {
  return attend_splits<false>("attention_decode", q, rows, pos, k_cache, v_cache, a, splits, work, out, s, out8, {});
}

Status attention_paged(const float* q, int64_t rows, const int32_t* pos, const PagedKv& paged, const void* k_cache,
                       const void* v_cache, const AttentionArgs& a, int splits, float* work, float* out, cudaStream_t s,
                       void* out8, void* out16, DecodeAttention variant) {
  if (!paged.row_seq || !paged.tables || paged.max_blocks <= 0 || paged.block_tokens <= 0)
    return Status::error("attention_paged: bad block tables");
  if (out16 && reinterpret_cast<uintptr_t>(out16) % 2) return Status::error("attention_paged: out16 must be 2-byte aligned");
  // The mma rung loads q, K and V in 16-byte pieces: elsewhere the split kernels run.
  const bool aligned = (reinterpret_cast<uintptr_t>(q) | reinterpret_cast<uintptr_t>(k_cache) |
                        reinterpret_cast<uintptr_t>(v_cache)) % 16 == 0;
  return attend_splits<true>("attention_paged", q, rows, pos, k_cache, v_cache, a, splits, work, out, s, out8, paged,
                             out16, variant == DecodeAttention::Mma && decode_attention_supported(variant, a) && aligned);
}

int attention_decode_blocks_per_sm(const AttentionArgs& a) {
  if (!check_args(a)) return 0;
  return a.kv_type == GgmlType::F16 ? split_blocks_per_sm<__half>(a) : split_blocks_per_sm<float>(a);
}

const char* decode_attention_name(DecodeAttention v) { return v == DecodeAttention::Mma ? "mma" : "split"; }

bool decode_attention_supported(DecodeAttention v, const AttentionArgs& a) {
  return v == DecodeAttention::Split || paged_mma_supported(a);
}

}  // namespace lamina::kernels
