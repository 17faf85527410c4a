// The CUDA backend's side of the batching engine (engine/engine.h): passes over the rows of
// several sequences on a paged KV cache (Backend::KvLayout). Each row's k and v go to the slot
// its sequence's block table gives (rope_kv_store with slots), and attention reads each row's own
// sequence through its table (kernels::attention_paged: the flash-decoding split kernels with a
// block-table lookup per position, then their merge). The pass's slots and tables are staged with
// its inputs and uploaded with them. The greedy rows' ids are made on the device (argmax_rows).
#include "backend/cuda/cuda_backend.h"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_op.h"
#include "kernels/ops/ops.h"

#include <cuda_runtime.h>

#include <algorithm>

namespace lamina {

using plan::Node;

void CudaBackend::set_kv_layout(const KvLayout* layout) {
  if (layout && layout->block_tokens <= 0) fail("paged KV cache: block size {} is not positive", layout->block_tokens);
  if (layout != layout_) flush();  // the ops recorded so far run on the layout they were recorded under
  if (layout) kv_mem_.keep_rows(kv_ctx_, stream_);  // (the engine asks first, for its pools' rows: then a no-op)
  layout_ = layout;
  // A single-sequence step running ahead (launch_ahead) is not this pass: begin_forward must
  // not take it for one. That step simply runs first on the stream. (The engine's step running
  // ahead, of several rows, is checked by begin_forward.)
  if (layout && !ahead_rows_) ahead_ = false;
}

namespace {

// Sequence s's block table into dst (stride entries, zeros past its end), checked against the
// cache. (A window pool's stale entries are ids of its blocks too, so they pass the same check.)
void stage_table(std::span<const int32_t> table, size_t s, size_t stride, int64_t n_blocks, int32_t* dst) {
  std::fill(dst, dst + stride, 0);
  for (size_t b = 0; b < std::min(stride, table.size()); ++b) {
    const int32_t id = table[b];
    if (id < 0 || id >= n_blocks) fail("paged KV cache: block {} of sequence {} is outside the cache's {} blocks", id, s, n_blocks);
    dst[b] = id;
  }
}

}  // namespace

// [slots | row_seq | tables (| window slots | window tables)] built in the pinned staging
// (stage_inputs has waited until the last upload read it), checked against the cache. Each table
// takes the blocks of the length bucket (kv_bucket_ / block_tokens: every position of the pass
// lies below the bucket), so that a recorded decode pass copies the same number of words on
// every replay.
void CudaBackend::stage_paged(std::span<const int32_t> pos) {
  const KvLayout& l = *layout_;
  const int64_t rows = int64_t(pos.size());
  check("paged attention", int64_t(l.row_seq.size()) == rows, "the layout's rows differ from the pass's");
  const bool windows = !l.window_tables.empty();
  check("paged attention", !windows || l.window_tables.size() == l.tables.size(), "a window table per sequence");
  const int64_t n_blocks = kv_ctx_ / l.block_tokens;
  const size_t stride = size_t(std::min<int64_t>((kv_bucket_ + l.block_tokens - 1) / l.block_tokens, std::max<int64_t>(1, n_blocks)));
  const size_t words = size_t(2 * rows) + l.tables.size() * stride + (windows ? size_t(rows) + l.tables.size() * stride : 0);
  if (words > paged_capacity_) {
    cuda_check(cudaStreamSynchronize(stream_), "paged KV tables");
    cudaFree(dev_paged_);
    cudaFreeHost(host_paged_);
    paged_capacity_ = std::max<size_t>(words, 4096);
    cuda_check(cudaMallocHost(&host_paged_, paged_capacity_ * sizeof(int32_t)), "cudaMallocHost");
    dev_paged_ = static_cast<int32_t*>(dev_alloc(paged_capacity_ * sizeof(int32_t), "paged KV tables"));
    ++generation_;
  }
  int32_t* slots = host_paged_;
  int32_t* row_seq = slots + rows;
  int32_t* tables = row_seq + rows;
  int32_t* wslots = tables + l.tables.size() * stride;  // (window pool only)
  int32_t* wtables = wslots + rows;
  for (size_t s = 0; s < l.tables.size(); ++s) {
    stage_table(l.tables[s], s, stride, n_blocks, tables + s * stride);
    if (windows) stage_table(l.window_tables[s], s, stride, n_blocks, wtables + s * stride);
  }
  auto slot = [&](const std::span<const int32_t> table, int32_t s, int32_t p) {
    if (p < 0 || size_t(p / l.block_tokens) >= table.size()) fail("paged KV cache: position {} of sequence {} has no block", p, s);
    return table[size_t(p / l.block_tokens)] * l.block_tokens + p % l.block_tokens;
  };
  for (int64_t t = 0; t < rows; ++t) {
    const int32_t s = l.row_seq[size_t(t)], p = pos[size_t(t)];
    if (s < 0 || size_t(s) >= l.tables.size()) fail("paged KV cache: row {} names sequence {} of {}", t, s, l.tables.size());
    row_seq[t] = s;
    slots[t] = slot(l.tables[size_t(s)], s, p);
    if (windows) wslots[t] = slot(l.window_tables[size_t(s)], s, p);
  }
  paged_words_ = words;
  paged_.slots = dev_paged_;
  paged_.kv.row_seq = dev_paged_ + rows;
  paged_.kv.tables = dev_paged_ + 2 * rows;
  paged_.kv.max_blocks = int(stride);
  paged_.kv.block_tokens = l.block_tokens;
  paged_.wslots = windows ? dev_paged_ + (wslots - host_paged_) : paged_.slots;
  paged_.wkv = paged_.kv;
  if (windows) paged_.wkv.tables = dev_paged_ + (wtables - host_paged_);
}

const CudaBackend::PagedPass& CudaBackend::paged_pass() {
  check("paged attention", paged_words_ > 0, "the pass's inputs were staged without the layout");
  upload_inputs();
  return paged_;
}

// A pass's rows by kind: a run of at least kPrefillRows rows of one sequence at consecutive
// positions (a prompt chunk) goes to the tensor-core prefill kernel over its blocks
// (attention_prefill_paged); the rows between such runs (decode rows, short chunks) to the
// flash-decoding splits (attend_paged_rows), a range at a time. The chunks run the prompt pass's
// rung (v3/v4 bring a tile as one TMA box per block of the table; where they cannot, v2);
// v1_mma sends every row to the splits.
void CudaBackend::attend_paged(const LayerCache& c, const Node& n, Made& m) {
  constexpr int64_t kPrefillRows = 16;
  const Tensor q = n.x;
  const PagedPass& pp = paged_pass();
  m.x8 = x8_scratch(n, n.out);
  // The Wo GEMM's f16 input, where the plan marked it (every range writes its rows of it).
  const bool f16 = n.x16_out && act16_ == GgmlType::F16;
  auto* h = f16 ? static_cast<uint16_t*>(scratch_bytes(size_t(q.rows * n.out.cols) * 2)) : nullptr;
  m.x16 = h;
  const std::span<const int32_t> seq = layout_->row_seq;
  const bool chunks = paged_prefill_ && !m.x8 && prefill_attention_ != kn::PrefillAttention::V1Mma &&
                      kn::attention_prefill_supported(c.a) && n.ids.size() == size_t(q.rows);
  const auto run_end = [&](int64_t r) {  // the end of the run of seq[r]'s consecutive positions
    int64_t e = r + 1;
    while (e < q.rows && seq[size_t(e)] == seq[size_t(r)] && n.ids[size_t(e)] == n.ids[size_t(e - 1)] + 1) ++e;
    return e;
  };
  for (int64_t r = 0; r < q.rows;) {
    int64_t e = chunks ? run_end(r) : q.rows;
    if (chunks && e - r >= kPrefillRows) {
      const kn::PagedKv& kv = pp.kv_for(c.a.window);
      const int32_t* table = kv.tables + int64_t(seq[size_t(r)]) * kv.max_blocks;
      double flops = 0;
      for (int64_t i = r; i < e; ++i) flops += 4.0 * (n.ids[size_t(i)] + 1) * double(n.attn.n_head) * n.attn.head_dim;
      const double bytes = 2.0 * (n.ids[size_t(e - 1)] + 1) * double(kv_dim_) * double(kv_elem_bytes()) + double((e - r) * q.cols) * 8.0;
      run_op("attention (paged prefill)", bytes, flops, [&] {
        return kn::attention_prefill_paged(q.data + r * q.cols, e - r, dev_pos() + r, table, kv.block_tokens, c.k, c.v,
                                           c.a, n.out.data + r * n.out.cols, stream_, h ? h + r * n.out.cols : nullptr,
                                           prefill_attention_);
      });
      r = e;
      continue;
    }
    while (chunks && e < q.rows) {  // the short runs up to the next chunk
      const int64_t f = run_end(e);
      if (f - e >= kPrefillRows) break;
      e = f;
    }
    attend_paged_rows(c, n, r, e, m.x8, h ? h + r * n.out.cols : nullptr);
    r = e;
  }
}

// Rows r0 .. r1 - 1 through the flash-decoding splits. Splits per (KV head, row): two waves of
// blocks over the SMs, at least 16 positions a split of the pass's length bucket (the bucket, not
// the longest row: a recorded pass keeps its launch shape), as decode_splits' base. (With 64
// positions a split, one row of Llama-3-8B's 8 KV heads at 128-255 positions took 4 splits and
// its attention 17 us a layer against the single stream's 13: docs/benchmarks.md.) The merge also
// writes out's int8 blocks where the Wo GEMV reads them (fuse() marked n.x8_out; then r0 .. r1
// are all the rows), or its f16 copy for the Wo GEMM (out16: these rows' part of it).
void CudaBackend::attend_paged_rows(const LayerCache& c, const Node& n, int64_t r0, int64_t r1, void* out8, void* out16) {
  const Tensor q = n.x;
  const PagedPass& pp = paged_pass();
  const AttentionParams& p = n.attn;
  const int64_t rows = r1 - r0;
  check("paged attention", !out8 || (r0 == 0 && r1 == q.rows), "int8 blocks of part of the rows");
  const int64_t blocks = int64_t(p.n_head_kv) * rows;
  const int64_t cap = split_cap();
  const int splits = int(std::clamp<int64_t>((2 * sm_count_ + blocks - 1) / blocks, 1, cap));
  float* work = static_cast<float*>(scratch_bytes(kn::attention_work_floats(c.a, rows, splits) * sizeof(float)));
  double kv_read = 0, flops = 0;  // every row reads its own positions
  for (size_t i = size_t(r0); i < size_t(r1) && i < n.ids.size(); ++i) {
    kv_read += 2.0 * (n.ids[i] + 1) * double(kv_dim_) * double(kv_elem_bytes());
    flops += 4.0 * (n.ids[i] + 1) * double(p.n_head) * p.head_dim;
  }
  kn::PagedKv kv = pp.kv_for(c.a.window);
  kv.row_seq += r0;
  run_op("attention (paged)", kv_read + double(rows * q.cols) * 8.0, flops, [&] {
    return kn::attention_paged(q.data + r0 * q.cols, rows, dev_pos() + r0, kv, c.k, c.v, c.a, splits, work,
                               n.out.data + r0 * n.out.cols, stream_, out8, out16, decode_attention_);
  });
}

void CudaBackend::exec_copy_rows(const Node& n) {
  auto* idx = static_cast<int32_t*>(scratch_bytes(n.ids.size() * sizeof(int32_t)));
  cuda_check(cudaMemcpyAsync(idx, n.ids.data(), n.ids.size() * sizeof(int32_t), cudaMemcpyHostToDevice, stream_), "copy_rows");
  run_op("copy_rows", double(n.out.rows * n.out.cols) * 8.0, 0,
         [&] { return kn::gather_rows(n.x.data, n.x.cols, idx, n.out.rows, n.out.data, stream_); });
}

void CudaBackend::argmax_rows(Tensor logits, std::span<int32_t> out, std::span<float> max, const KvLayout* next) {
  flush(logits, true);  // (one row: the logits GEMV leaves its argmax, as for sample())
  check("argmax_rows", int64_t(out.size()) == logits.rows && (max.empty() || max.size() == out.size()),
        "one id (and maximum) per row");
  // The ids go to dev_sampled_ (where a step running ahead takes its tokens) and pinned memory.
  const bool pinned = int64_t(out.size()) <= kSampledRows;
  auto* ids = pinned ? dev_sampled_ : static_cast<int32_t*>(scratch_bytes(out.size() * sizeof(int32_t)));
  auto* vals = max.empty() ? nullptr : static_cast<float*>(scratch_bytes(out.size() * sizeof(float)));
  // A one-row pass whose logits GEMV made the argmax (fuse() marked it) has left the id in
  // dev_sampled_[0] (GemvArgmax::id2): no kernel.
  const bool made = logits.rows == 1 && pinned && !vals && argmax_of_ == logits.data;
  if (!made)
    run_op("argmax rows", double(logits.rows * logits.cols) * 4.0, 0,
           [&] { return kn::argmax_rows(logits.data, logits.rows, logits.cols, ids, stream_, vals); });
  cuda_check(cudaMemcpyAsync(pinned ? host_ids_ : out.data(), ids, out.size() * sizeof(int32_t), cudaMemcpyDeviceToHost, stream_),
             "argmax_rows");
  if (vals)
    cuda_check(cudaMemcpyAsync(max.data(), vals, max.size() * sizeof(float), cudaMemcpyDeviceToHost, stream_), "argmax_rows");
  const bool ahead = next && pinned && !vals && launch_ahead_rows(*next);
  // (sampled_ is recorded before the step ahead)
  cuda_check(ahead ? cudaEventSynchronize(sampled_) : cudaStreamSynchronize(stream_), "argmax_rows");
  if (graph_timing_) graph_timing_->id_arrived();  // (the engine's steps, as sample() for the single stream)
  if (pinned) std::copy(host_ids_, host_ids_ + out.size(), out.begin());
  if (ahead) ahead_tokens_.assign(out.begin(), out.end());
  collect_profile();
}

// After the argmax of a recorded pass of one row per sequence, every row picked: the same graph
// for each row's next position (while it stays in the pass's length bucket and its block is in
// `next`), the tokens those ids. Records sampled_ first, for the host to wait on.
bool CudaBackend::launch_ahead_rows(const KvLayout& next) {
  const int64_t rows = n_in_;
  if (!last_graph_ || paged_words_ == 0 || rows > kSampledRows || int64_t(next.row_seq.size()) != rows ||
      int64_t(next.tables.size()) != rows)
    return false;
  const auto it = graphs_.find(last_graph_);
  if (it == graphs_.end() || !it->second.exec || it->second.generation != generation_) return false;
  std::vector<int32_t> tokens(static_cast<size_t>(rows)), pos(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    tokens[size_t(r)] = int32_t(-1 - r);
    pos[size_t(r)] = host_in_[in_capacity_ + size_t(r)] + 1;
    const size_t b = size_t(pos[size_t(r)] / next.block_tokens);
    if (pos[size_t(r)] >= kv_bucket_ || pos[size_t(r)] >= kv_ctx_ || b >= next.tables[size_t(r)].size() ||
        (!next.window_tables.empty() && b >= next.window_tables[size_t(r)].size()))
      return false;  // another bucket (another graph), or the caller has no block for it
  }
  cuda_check(cudaEventRecord(sampled_, stream_), "argmax_rows");
  const KvLayout* was = layout_;
  layout_ = &next;
  const int64_t bucket = kv_bucket_;
  stage_inputs(tokens, pos);
  layout_ = was;
  check("run-ahead", kv_bucket_ == bucket, "the step ahead left its length bucket");
  launch_graph(it->second.exec);
  ahead_ = ahead_rows_ = true;
  ahead_graph_ = last_graph_;
  ahead_pos_rows_ = std::move(pos);
  ahead_row_seq_.assign(next.row_seq.begin(), next.row_seq.end());
  ahead_tables_.clear();
  for (const auto& t : next.tables) ahead_tables_.emplace_back(t.begin(), t.end());
  for (const auto& t : next.window_tables) ahead_tables_.emplace_back(t.begin(), t.end());
  ++ahead_rows_launched_;
  return true;
}

// Whether a pass of these rows, on the layout set now, is the step running ahead.
bool CudaBackend::ahead_rows_match(std::span<const int32_t> tokens, std::span<const int32_t> pos) const {
  if (!layout_ || tokens.size() != ahead_tokens_.size() || pos.size() != ahead_pos_rows_.size()) return false;
  if (!std::equal(tokens.begin(), tokens.end(), ahead_tokens_.begin()) ||
      !std::equal(pos.begin(), pos.end(), ahead_pos_rows_.begin()) ||
      !std::equal(layout_->row_seq.begin(), layout_->row_seq.end(), ahead_row_seq_.begin(), ahead_row_seq_.end()) ||
      layout_->tables.size() + layout_->window_tables.size() != ahead_tables_.size())
    return false;
  // (the main tables, then the window pool's, as launch_ahead_rows kept them)
  const size_t n = layout_->tables.size();
  for (size_t s = 0; s < ahead_tables_.size(); ++s) {
    const std::span<const int32_t> t = s < n ? layout_->tables[s] : layout_->window_tables[s - n];
    if (!std::equal(t.begin(), t.end(), ahead_tables_[s].begin(), ahead_tables_[s].end())) return false;
  }
  return true;
}

}  // namespace lamina
