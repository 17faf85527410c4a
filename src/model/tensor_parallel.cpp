#include "model/tensor_parallel.h"

#include "core/error.h"
#include "format/ggml_type.h"
#include "model/sampler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

namespace lamina {

namespace {

// Rank `rank`'s share of `rows` FFN rows over n ranks (TpPlan::make: even where that falls on
// whole blocks, else whole blocks as evenly as they go).
TpRange ff_share(int64_t rows, int64_t n, int rank, int64_t block, const char* what) {
  if (rows % n == 0 && (rows / n) % block == 0) return {rank * rows / n, rows / n};
  if (block == 1 || rows % block || rows / block < n)
    fail("tensor parallel: {} {} rows do not split over {} ranks{}", what, rows, n,
         block == 1 ? std::string() : fmt::format(" on the down projection's {}-element blocks", block));
  const int64_t units = rows / block, u0 = rank * units / n, u1 = (rank + 1) * units / n;
  return {u0 * block, (u1 - u0) * block};
}

}  // namespace

int64_t tp_ff_block(const GgufFile& f) {
  int64_t block = 1;
  for (const GgufTensor& t : f.tensors()) {
    const std::string_view name = t.name;
    if (name.ends_with(".ffn_down.weight") || name.ends_with(".ffn_down_exps.weight") ||
        name.ends_with(".ffn_down_shexp.weight"))
      block = std::max<int64_t>(block, traits(t.type).block_elems);
  }
  return block;
}

TpPlan TpPlan::make(const ModelConfig& c, int ranks, int rank, int64_t ff_block) {
  if (ranks < 1) fail("tensor parallel: {} ranks", ranks);
  if (rank < 0 || rank >= ranks) fail("tensor parallel: rank {} of {}", rank, ranks);
  const int64_t hq = c.n_head, hkv = c.n_head_kv, n = ranks;
  if (hq % n) fail("tensor parallel: {} query heads do not split over {} ranks", hq, n);
  if (hkv < 1 || hq % hkv) fail("tensor parallel: {} query heads do not group over {} KV heads", hq, hkv);
  if (hkv % n && n % hkv)
    fail("tensor parallel: {} KV heads do not split over {} ranks, nor {} ranks over them", hkv, n, n);
  if (ff_block < 1) fail("tensor parallel: a down projection block of {} elements", ff_block);
  TpPlan p;
  p.ranks = ranks, p.rank = rank;
  p.q_heads = {rank * hq / n, hq / n};
  // With more ranks than KV heads, a rank's query heads all read one KV head (n % hkv == 0).
  p.kv_heads = n <= hkv ? TpRange{rank * hkv / n, hkv / n} : TpRange{p.q_heads.first / (hq / hkv), 1};
  p.ff = ff_share(c.n_ff, n, rank, ff_block, "the FFN's");
  if (c.n_ff_shared) p.ff_shared = ff_share(c.n_ff_shared, n, rank, ff_block, "the shared expert's");
  const int64_t per = (int64_t(c.n_vocab) + n - 1) / n;
  const int64_t v0 = std::min<int64_t>(rank * per, c.n_vocab);
  p.vocab = {v0, std::min<int64_t>(per, c.n_vocab - v0)};
  return p;
}

TpSlice tp_slice(const TpPlan& p, const ModelConfig& c, std::string_view name) {
  using K = TpSlice::Kind;
  const int64_t hd = c.head_dim;
  const auto heads = [&](TpRange h) { return TpRange{h.first * hd, h.count * hd}; };
  if (name == "output.weight") return {K::Rows, p.vocab};
  // QKV biases (qwen2) split with their matrices' rows: a 1-D tensor's columns.
  if (name.ends_with(".attn_q.bias")) return {K::Cols, heads(p.q_heads)};
  if (name.ends_with(".attn_k.bias") || name.ends_with(".attn_v.bias")) return {K::Cols, heads(p.kv_heads)};
  if (name.ends_with(".attn_q.weight")) return {K::Rows, heads(p.q_heads)};
  if (name.ends_with(".attn_k.weight") || name.ends_with(".attn_v.weight")) return {K::Rows, heads(p.kv_heads)};
  if (name.ends_with(".attn_output.weight")) return {K::Cols, heads(p.q_heads)};
  if (name.ends_with(".ffn_gate.weight") || name.ends_with(".ffn_up.weight")) return {K::Rows, p.ff};
  if (name.ends_with(".ffn_down.weight")) return {K::Cols, p.ff};
  if (name.ends_with(".ffn_gate_shexp.weight") || name.ends_with(".ffn_up_shexp.weight")) return {K::Rows, p.ff_shared};
  if (name.ends_with(".ffn_down_shexp.weight")) return {K::Cols, p.ff_shared};
  return {};  // norms, embeddings, the routers, biases added after an all-reduce: every rank holds them
}

std::pair<int64_t, int64_t> tp_held_shape(const TpPlan& p, const ModelConfig& c, const GgufTensor& t) {
  const std::string_view name = t.name;
  const int64_t cols = t.ne[0], rows = t.nrows(), hd = c.head_dim;
  if (name.ends_with(".attn_qkv.weight")) return {cols, (p.q_heads.count + 2 * p.kv_heads.count) * hd};
  if (name.ends_with(".ffn_up.weight") && rows == 2 * int64_t(c.n_ff)) return {cols, 2 * p.ff.count};  // phi3: gate and up
  if (name.ends_with(".ffn_gate_exps.weight") || name.ends_with(".ffn_up_exps.weight")) return {cols, p.ff.count * (rows / int64_t(c.n_ff))};
  if (name.ends_with(".ffn_down_exps.weight")) return {p.ff.count, rows};
  const TpSlice s = tp_slice(p, c, name);
  return {s.kind == TpSlice::Kind::Cols ? s.range.count : cols, s.kind == TpSlice::Kind::Rows ? s.range.count : rows};
}

std::vector<uint8_t> tp_slice_bytes(const GgufTensor& t, const TpSlice& s) {
  const int64_t cols = t.ne[0], rows = t.nrows();
  const TypeTraits& tr = traits(t.type);
  const size_t row = row_bytes(t.type, cols);
  if (s.kind == TpSlice::Kind::Whole) return std::vector<uint8_t>(t.data, t.data + size_t(rows) * row);
  const int64_t limit = s.kind == TpSlice::Kind::Rows ? rows : cols;
  if (s.range.first < 0 || s.range.count < 0 || s.range.end() > limit)
    fail("tensor parallel: {} [{}, {}) is outside {} {} of tensor '{}'", s.kind == TpSlice::Kind::Rows ? "rows" : "columns",
         s.range.first, s.range.end(), limit, s.kind == TpSlice::Kind::Rows ? "rows" : "columns", t.name);
  if (s.kind == TpSlice::Kind::Rows) {
    const uint8_t* from = t.data + size_t(s.range.first) * row;
    return std::vector<uint8_t>(from, from + size_t(s.range.count) * row);
  }
  if (s.range.first % tr.block_elems || s.range.count % tr.block_elems)
    fail("tensor parallel: columns [{}, {}) of tensor '{}' do not fall on its {}-element {} blocks", s.range.first,
         s.range.end(), t.name, tr.block_elems, type_name(t.type));
  const size_t skip = row_bytes(t.type, s.range.first), take = row_bytes(t.type, s.range.count);
  std::vector<uint8_t> out(size_t(rows) * take);
  for (int64_t r = 0; r < rows; ++r) std::memcpy(out.data() + size_t(r) * take, t.data + size_t(r) * row + skip, take);
  return out;
}

int32_t tp_argmax(Communicator& comm, const float* logits, int64_t n, int64_t vocab0) {
  // (An id travels as a float: exact below 2^24.)
  if (vocab0 < 0 || n < 0 || vocab0 + n > (int64_t(1) << 24)) fail("tensor parallel argmax: ids [{}, {})", vocab0, vocab0 + n);
  float best[2] = {-std::numeric_limits<float>::infinity(), -1.f};  // (logit, id); id -1: no rows
  for (int64_t i = 0; i < n; ++i)
    if (best[1] < 0 || logits[i] > best[0]) best[0] = logits[i], best[1] = float(vocab0 + i);
  std::vector<float> all(size_t(comm.ranks()) * 2);
  comm.all_gather(best, 2, all.data());
  std::vector<TpPick> picks;
  for (int r = 0; r < comm.ranks(); ++r) picks.emplace_back(all[size_t(2 * r)], int32_t(all[size_t(2 * r + 1)]));
  const int32_t id = tp_merge_picks(picks).second;
  if (id < 0) fail("tensor parallel argmax: no rank holds any logits");
  return id;
}

TpPick tp_merge_picks(std::span<const TpPick> picks) {
  TpPick top{-std::numeric_limits<float>::infinity(), -1};
  for (const TpPick& p : picks)
    if (p.second >= 0 && (top.second < 0 || Sampler::before(p, top)))
      top = p;
  return top;
}

std::vector<TpPick> tp_merge_candidates(std::span<const std::vector<TpPick>> lists, size_t keep) {
  std::vector<TpPick> out;
  std::vector<size_t> at(lists.size(), 0);
  while (out.size() < keep) {
    size_t from = lists.size();
    for (size_t r = 0; r < lists.size(); ++r)
      if (at[r] < lists[r].size() && (from == lists.size() || Sampler::before(lists[r][at[r]], lists[from][at[from]]))) from = r;
    if (from == lists.size()) break;
    out.push_back(lists[from][at[from]++]);
  }
  return out;
}

}  // namespace lamina
