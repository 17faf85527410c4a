// The CUDA backend's RoPE and attention: the KV cache store, decode attention (one kernel at
// short context, flash-decoding splits by length bucket), prompt attention.
#include "backend/cuda/cuda_backend.h"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_op.h"
#include "kernels/ops/ops.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

namespace lamina {

namespace kn = kernels;
using plan::Node;

kn::RopeArgs CudaBackend::rope_args(int n_heads, int head_dim, const RopeParams& p) {
  kn::RopeArgs a;
  a.n_heads = n_heads, a.head_dim = head_dim, a.n_rot = p.n_rot;
  a.base = p.base, a.freq_scale = p.freq_scale, a.neox = p.neox, a.attn_factor = p.attn_factor;
  if (p.freq_factors) {
    auto [it, fresh] = freq_factors_.try_emplace(p.freq_factors, nullptr);
    if (fresh) {
      const size_t bytes = size_t(p.n_rot / 2) * sizeof(float);
      it->second = static_cast<float*>(dev_alloc(bytes, "rope factors"));
      upload(it->second, p.freq_factors, bytes);
    }
    a.freq_factors = it->second;
  }
  return a;
}

void CudaBackend::exec_rope(const Node& n) {
  const kn::RopeArgs a = rope_args(n.n_heads, n.head_dim, n.rope);
  run_op("rope", double(n.x.rows * n.x.cols) * 8.0, 0, [&] { return kn::rope(n.x.data, n.x.rows, dev_pos(), a, stream_); });
}

// The layer's cache and the kernels' attention arguments.
CudaBackend::LayerCache CudaBackend::layer_cache(const Node& n) const {
  const AttentionParams& p = n.attn;
  LayerCache c;
  c.a.n_head = p.n_head, c.a.n_head_kv = p.n_head_kv, c.a.head_dim = p.head_dim, c.a.scale = p.scale;
  c.a.kv_type = kv_type_, c.a.n_ctx = kv_ctx_, c.a.window = p.window;
  c.k = kv_mem_.k(n.layer);
  c.v = kv_mem_.v(n.layer);
  return c;
}

// The cache store of k and v (rows at their positions, or their paged slots), then attention.
void CudaBackend::exec_attention(const Node& n, Made& m) {
  const LayerCache c = layer_cache(n);
  const Tensor k = n.y;
  const int32_t* rows_at = layout_ ? paged_pass().slots_for(c.a.window) : dev_pos();  // kv_store writes row t at rows_at[t]
  run_op("kv_store", double(k.rows * k.cols) * (8.0 + 2 * kv_elem_bytes()), 0,
         [&] { return kn::kv_store(k.data, n.z.data, k.rows, rows_at, c.k, c.v, c.a, stream_); });
  if (layout_) attend_paged(c, n, m);
  else attend(c, n, m);
}

// RoPE of q (x) and k (y), with their head norms (norm, norm2) where fuse() put them in, and the
// cache store in one kernel, then the attention kernels. One decode token at short context (the
// smallest length bucket, where a sliding window of that length or more cuts nothing): the head
// norms, RoPE, the cache store and the attention in one kernel.
void CudaBackend::exec_rope_attention(const Node& n, Made& m) {
  const LayerCache c = layer_cache(n);
  const Tensor q = n.x, k = n.y, v = n.z;
  const kn::RopeArgs r = rope_args(n.attn.n_head, n.attn.head_dim, n.rope);
  const bool qk = bool(n.norm);
  kn::HeadNorms norms;
  if (qk) norms = {static_cast<const float*>(n.norm.data), static_cast<const float*>(n.norm2.data), n.eps};
  const double bytes = double(q.rows * q.cols) * 8.0 + double(k.rows * k.cols) * (8.0 + 2 * kv_elem_bytes());
  if (layout_) {  // several sequences on the paged cache: each row's k and v go to its slot
    if (paged_one_kernel(n, c, r, qk)) {  // a few decode rows at short context: one kernel
      const PagedPass& pp = paged_pass();
      const auto [kv_read, flops] = attention_cost(n);
      m.x8 = x8_scratch(n, n.out);
      const bool f16 = n.x16_out && act16_ == GgmlType::F16;  // the Wo GEMM's f16 input, where the plan marked it
      auto* h = f16 ? scratch_bytes(size_t(q.rows * n.out.cols) * 2) : nullptr;
      m.x16 = static_cast<uint16_t*>(h);
      run_op(qk ? "qk_norm+rope+attention (paged decode)" : "rope+attention (paged decode)",
             bytes + kv_read + double(q.rows * n.out.cols) * 4.0, flops, [&] {
               return kn::attention_decode_rope_paged(q.data, k.data, v.data, q.rows, dev_pos(), pp.kv_for(c.a.window), r, c.k, c.v, c.a,
                                                      n.out.data, stream_, m.x8, h, norms, kMinBucket);
             });
      return;
    }
    const int32_t* slots = paged_pass().slots_for(c.a.window);
    run_op(qk ? "qk_norm+rope+kv_store" : "rope+kv_store", bytes, 0, [&] {
      return kn::rope_kv_store(q.data, k.data, v.data, q.rows, dev_pos(), r, c.k, c.v, c.a, stream_, slots, norms);
    });
    return attend_paged(c, n, m);
  }
  if (kv_bucket_ == kMinBucket && single_pass_attention_ && kn::attention_decode_rope_supported(c.a, r, q.rows, kMinBucket, qk)) {
    const auto [kv_read, flops] = attention_cost(n);
    m.x8 = x8_scratch(n, n.out);
    run_op(qk ? "qk_norm+rope+attention (decode)" : "rope+attention (decode)", bytes + kv_read + double(n.out.cols) * 4.0, flops, [&] {
      return kn::attention_decode_rope(q.data, k.data, v.data, dev_pos(), r, c.k, c.v, c.a, n.out.data, stream_, m.x8, norms,
                                       kMinBucket);
    });
    return;
  }
  run_op(qk ? "qk_norm+rope+kv_store" : "rope+kv_store", bytes, 0,
         [&] { return kn::rope_kv_store(q.data, k.data, v.data, q.rows, dev_pos(), r, c.k, c.v, c.a, stream_, nullptr, norms); });
  attend(c, n, m);
}

// The paged pass's rows through attention_decode_rope_paged: at most kPagedOneKernelRows rows, each
// its sequence's only row (decode rows, no prompt chunk), in the smallest length bucket, and their
// blocks (one per row and query head) within one wave: past it (8 rows of Llama-3-8B, 256 blocks
// on 132 SMs) the rope + store and paged attention kernels were faster.
bool CudaBackend::paged_one_kernel(const Node& n, const LayerCache& c, const kn::RopeArgs& r, bool qk) const {
  if (!single_pass_attention_ || kv_bucket_ != kMinBucket || n.x.rows > kPagedOneKernelRows || !layout_ ||
      n.x.rows * c.a.n_head > sm_count_ ||
      !kn::attention_decode_rope_paged_supported(c.a, r, kMinBucket, qk))
    return false;
  const std::span<const int32_t> seq = layout_->row_seq;
  if (int64_t(seq.size()) < n.x.rows) return false;
  for (int64_t i = 0; i < n.x.rows; ++i)
    for (int64_t j = 0; j < i; ++j)
      if (seq[size_t(i)] == seq[size_t(j)]) return false;
  return true;
}

// Attention reads K and V of every position up to the last one (the host knows the positions);
// flops: QK^T and PV over every (query, key) pair (the prompt path counts causal pairs only).
std::pair<double, double> CudaBackend::attention_cost(const Node& n) const {
  const AttentionParams& p = n.attn;
  const double len = double(p.window > 0 ? std::min(n.pos_last + 1, p.window) : n.pos_last + 1);
  return {2.0 * len * double(kv_dim_) * double(kv_elem_bytes()), 4.0 * double(n.x.rows) * len * double(p.n_head) * p.head_dim};
}

// The attention kernels over the stored cache: the prompt kernel (which also writes the 16-bit
// copy of out the Wo GEMM reads), or flash-decoding (which also writes out's int8 blocks for the
// Wo GEMV), as fuse() marked.
void CudaBackend::attend(const LayerCache& c, const Node& n, Made& m) {
  const Tensor q = n.x, out = n.out;
  const auto [kv_read, flops] = attention_cost(n);
  if (q.rows > kn::kGemvMaxBatch && kn::attention_prefill_supported(c.a) && n.pos_last - n.pos_first + 1 == q.rows) {
    // causal: each query reads on average half of the new keys plus every earlier one
    const double causal = flops / 2 + flops * n.pos_first / (2.0 * (n.pos_last + 1));
    void* h = n.x16_out ? scratch_bytes(size_t(out.rows * out.cols) * 2) : nullptr;
    m.x16 = h;
    run_op("attention (prefill)", kv_read + double(q.rows * q.cols) * (h ? 10.0 : 8.0), causal, [&] {
      return kn::attention_prefill(q.data, q.rows, dev_pos(), c.k, c.v, c.a, out.data, stream_, h, act16_,
                                   prefill_attention_);
    });
    return;
  }
  const int splits = decode_splits(c.a, q.rows);
  float* work = static_cast<float*>(scratch_bytes(kn::attention_work_floats(c.a, q.rows, splits) * sizeof(float)));
  m.x8 = x8_scratch(n, out);
  run_op("attention (decode)", kv_read + double(q.rows * q.cols) * 8.0, flops, [&] {
    return kn::attention_decode(q.data, q.rows, dev_pos(), c.k, c.v, c.a, splits, work, out.data, stream_, m.x8);
  });
}

// Flash-decoding splits per (KV head, row): enough blocks for two waves over the SMs, with at
// least 16 positions of the length bucket (the last position + 1 rounded up to a power of two,
// kv_bucket_) and 64 of the cache per split; past 1024 positions, one split per 128 positions of
// the bucket, up to eight waves, so that a long context keeps enough rows in flight. A decode
// graph is recorded per bucket (graph_key), so it only changes at 256, 512, 1024, 2048, ...
// positions. (Without the bucket's cap, one KV head — Gemma 3 270M — took 264 splits of a
// 128-position sequence, and merging them cost more than the attention: docs/benchmarks.md.)
// Past one wave of the split kernel's resident blocks, a last wave under three quarters full
// gives its blocks' positions to the whole waves before it: each block walks its positions in
// rounds that wait on memory, so a half-empty wave costs a whole one (Llama-3-8B at 8k
// positions: 1,024 blocks on 660 places, now 656).
int CudaBackend::decode_splits(const kn::AttentionArgs& a, int64_t rows) const {
  const int64_t blocks = int64_t(a.n_head_kv) * rows;
  const int64_t cap = split_cap();
  const int64_t base = std::clamp<int64_t>((2 * sm_count_ + blocks - 1) / blocks, 1, cap);
  const int64_t most = std::max<int64_t>(base, (8 * sm_count_ + blocks - 1) / blocks);
  int64_t splits = std::clamp<int64_t>(std::max<int64_t>(kv_bucket_, 1024) / 128, base, most);
  const int64_t places = int64_t(kn::attention_decode_blocks_per_sm(a)) * sm_count_, total = blocks * splits;
  if (places > 0 && total > places && total % places > 0 && total % places < places * 3 / 4)
    splits = std::max<int64_t>(base, total / places * places / blocks);
  return int(splits);
}

}  // namespace lamina
