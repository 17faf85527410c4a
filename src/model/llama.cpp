// The forward pass, written once against the backend interface (formats.md §3.1):
//
//   x = embed(tokens) (* sqrt(n_embd): gemma3)
//   per layer:  h = rmsnorm(x) * attn_norm;  q,k,v = Wq h (+bq), Wk h (+bk), Wv h (+bv)
//               (qwen3, gemma3: q, k RMS-normalised per head)
//               rope(q), rope(k);  o = attention(q, k, v, cache) (gemma3 local layers: a window)
//               x += Wo o                   (gemma3: x += rmsnorm(Wo o) * post_attention_norm)
//               h = rmsnorm(x) * ffn_norm;  x += Wdown (silu(Wgate h) * Wup h)
//               (gemma3: gelu instead of silu, and the sum RMS-normalised by post_ffw_norm)
//   logits = Wout (rmsnorm(x) * out_norm)      (Wout = token_embd when tied)
#include "model/llama.h"
#include "backend/moe_route.h"

#include "core/error.h"
#include "format/gguf.h"

#include <cmath>
#include <cstring>
#include <algorithm>
#include <iterator>
#include <string_view>
#include <initializer_list>
#include <numeric>
#include <tuple>
#include <unordered_set>

namespace lamina {

namespace {

// Finds and checks the file's tensors for the model, remembering which ones it took so that
// tensors the model does not use (a wrong block_count, an unsupported variant) are refused
// instead of silently ignored.
class Binder {
 public:
  Binder(const GgufFile& f, Backend& be) : f_(f), be_(be) {}

  // The tensor `name` after checking its shape (and type, for vectors); nullptr if absent and
  // not required.
  const GgufTensor* checked(const std::string& name, std::vector<int64_t> shape, bool required = true) {
    const GgufTensor* t = f_.find_tensor(name);
    if (!t) {
      if (required) fail("{}: missing tensor '{}'", f_.path(), name);
      return nullptr;
    }
    bool ok = t->n_dims <= int(shape.size()) || (t->n_dims == 2 && shape.size() == 1 && t->ne[1] == 1);
    for (size_t d = 0; d < shape.size() && ok; ++d) ok = t->ne[d] == shape[d];
    for (size_t d = shape.size(); d < 4 && ok; ++d) ok = t->ne[d] == 1;
    if (!ok) {
      std::string want = "[";
      for (size_t d = 0; d < shape.size(); ++d) want += (d ? ", " : "") + std::to_string(shape[d]);
      fail("{}: tensor '{}' has shape {}, expected {}]", f_.path(), name, t->shape_string(), want);
    }
    if (shape.size() == 1 && t->type != GgmlType::F32)
      fail("{}: tensor '{}' has type {}, expected f32", f_.path(), name, type_name(t->type));
    used_.insert(name);
    return t;
  }

  Weight bind(const std::string& name, std::vector<int64_t> shape, bool required = true,
              WeightUse use = WeightUse::Matmul) {
    const GgufTensor* t = checked(name, shape, required);
    if (!t) return {};
    return be_.load_weight(*t, shape.size() == 1 ? WeightUse::Vector : use);
  }

  // Throws naming the first tensor of the file that no bind/checked call took.
  void require_all_used(const ModelConfig& c) const {
    for (const auto& t : f_.tensors())
      if (!used_.contains(t.name))
        fail("{}: tensor '{}' is not used by a {}-layer {} model (block_count or the architecture does not match "
             "the file's tensors)", f_.path(), t.name, c.n_layer, c.arch);
  }

 private:
  const GgufFile& f_;
  Backend& be_;
  std::unordered_set<std::string> used_;
};

}  // namespace

LlamaModel::LlamaModel(const GgufFile& f, Backend& be, const TpRank* tp) : cfg_(ModelConfig::from_gguf(f)), be_(be) {
  const int64_t E = cfg_.n_embd, V = cfg_.n_vocab, F = cfg_.n_ff;
  n_head_ = cfg_.n_head, n_head_kv_ = cfg_.n_head_kv, n_ff_ = F, n_logits_ = V;
  if (tp) {
    if (!tp->comm || tp->comm->ranks() != tp->plan.ranks || tp->comm->rank() != tp->plan.rank)
      fail("tensor parallel: the group does not match rank {} of {}", tp->plan.rank, tp->plan.ranks);
    static constexpr std::string_view kArchs[] = {"llama", "qwen2", "qwen3", "gemma3", "phi3", "qwen2moe", "qwen3moe"};
    if (std::find(std::begin(kArchs), std::end(kArchs), cfg_.arch) == std::end(kArchs))
      fail("{}: tensor parallel runs arch llama, qwen2, qwen3, gemma3, phi3, qwen2moe and qwen3moe (this file: {})", f.path(),
           cfg_.arch);
    tp_ = *tp;
    n_head_ = tp->plan.q_heads.count, n_head_kv_ = tp->plan.kv_heads.count, n_ff_ = tp->plan.ff.count;
    n_logits_ = tp->plan.vocab.count;
  }
  const int64_t QD = int64_t(cfg_.n_head) * cfg_.head_dim, KVD = int64_t(cfg_.n_head_kv) * cfg_.head_dim;
  if (V == 0) fail("{}: vocabulary size unknown (no tokenizer.ggml.tokens or {}.vocab_size)", f.path(), cfg_.arch);
  Binder b(f, be);
  // Every tensor is checked before any is loaded: a file that does not match fails fast.
  b.checked("token_embd.weight", {E, V});
  b.checked("output_norm.weight", {E});
  b.checked("output.weight", {E, V}, false);
  b.checked("rope_freqs.weight", {cfg_.n_rot / 2}, false);
  const bool qwen = cfg_.arch == "qwen2" || cfg_.arch == "qwen2moe", qk = cfg_.qk_norm, post = cfg_.post_norms, fused = cfg_.fused_qkv_up;
  const int64_t NE = cfg_.n_expert, FS = cfg_.n_ff_shared;
  const bool moe = NE > 0, dense = !moe;
  if (moe && !be.runs_experts()) fail("{}: the {} backend does not run mixtures of experts yet", f.path(), be.name());
  b.checked("rope_factors_long.weight", {cfg_.n_rot / 2}, false);
  b.checked("rope_factors_short.weight", {cfg_.n_rot / 2}, false);
  if (bool(f.find_tensor("rope_factors_long.weight")) != bool(f.find_tensor("rope_factors_short.weight")))
    fail("{}: LongRoPE needs both rope_factors_long.weight and rope_factors_short.weight", f.path());
  const int64_t HD = cfg_.head_dim;
  // (name, shape, required, allowed): a tensor not allowed for the architecture is left out, so
  // that require_all_used refuses a file that has it.
  for (uint32_t l = 0; l < cfg_.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    for (const auto& [name, shape, required, allowed] :
         std::initializer_list<std::tuple<const char*, std::vector<int64_t>, bool, bool>>{
             {"attn_norm.weight", {E}, true, true}, {"attn_q.weight", {E, QD}, !fused, !fused},
             {"attn_k.weight", {E, KVD}, !fused, !fused}, {"attn_v.weight", {E, KVD}, !fused, !fused},
             {"attn_qkv.weight", {E, QD + 2 * KVD}, fused, fused},
             {"attn_output.weight", {QD, E}, true, true}, {"attn_q.bias", {QD}, qwen, qwen},
             {"attn_k.bias", {KVD}, qwen, qwen}, {"attn_v.bias", {KVD}, qwen, qwen},
             {"attn_output.bias", {E}, false, true}, {"attn_q_norm.weight", {HD}, qk, qk},
             {"attn_k_norm.weight", {HD}, qk, qk}, {"post_attention_norm.weight", {E}, post, post},
             {"ffn_norm.weight", {E}, true, true}, {"ffn_gate.weight", {E, F}, dense && !fused, dense && !fused},
             {"ffn_up.weight", {E, fused ? 2 * F : F}, dense, dense}, {"ffn_down.weight", {F, E}, dense, dense},
             {"ffn_gate_inp.weight", {E, NE}, moe, moe}, {"ffn_gate_exps.weight", {E, F, NE}, moe, moe},
             {"ffn_up_exps.weight", {E, F, NE}, moe, moe}, {"ffn_down_exps.weight", {F, E, NE}, moe, moe},
             {"ffn_gate_inp_shexp.weight", {E}, FS > 0, FS > 0}, {"ffn_gate_shexp.weight", {E, FS}, FS > 0, FS > 0},
             {"ffn_up_shexp.weight", {E, FS}, FS > 0, FS > 0}, {"ffn_down_shexp.weight", {FS, E}, FS > 0, FS > 0},
             {"post_ffw_norm.weight", {E}, post, post}})
      if (allowed) b.checked(p + name, shape, required);
  }
  b.require_all_used(cfg_);

  // A rank's share of a matrix (the whole of it without tensor parallelism), by the role of
  // `as` (the tied output takes the output's rows of the embeddings).
  const auto share = [&](const GgufTensor* t, std::string_view as) -> const GgufTensor* {
    if (!tp_ || !t) return t;
    const TpSlice sl = tp_slice(tp_->plan, cfg_, as);
    if (sl.kind == TpSlice::Kind::Whole) return t;
    auto& c = *slices_.emplace_back(std::make_unique<Slice>(Slice{*t, tp_slice_bytes(*t, sl)}));
    (sl.kind == TpSlice::Kind::Rows ? c.tensor.ne[1] : c.tensor.ne[0]) = sl.range.count;
    c.tensor.data = c.bytes.data(), c.tensor.nbytes = c.bytes.size();
    return &c.tensor;
  };
  const auto matrix = [&](const std::string& name, std::vector<int64_t> shape, bool required = true) -> Weight {
    const GgufTensor* t = share(b.checked(name, shape, required), name);
    return t ? be.load_weight(*t, WeightUse::Matmul) : Weight{};
  };
  // A rank's entries of a bias that splits with its matrix's rows (the whole of it otherwise).
  const auto vector = [&](const std::string& name, int64_t len, bool required) -> Weight {
    const GgufTensor* t = share(b.checked(name, {len}, required), name);
    return t ? be.load_weight(*t, WeightUse::Vector) : Weight{};
  };
  tok_embd_ = b.bind("token_embd.weight", {E, V}, true, WeightUse::Embedding);
  out_norm_ = b.bind("output_norm.weight", {E});
  output_ = matrix("output.weight", {E, V}, false);
  if (!output_)  // tied embeddings, as a matmul weight
    output_ = be.load_weight(*share(b.checked("token_embd.weight", {E, V}), "output.weight"), WeightUse::Matmul);
  for (uint32_t l = 0; l < cfg_.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    LayerWeights w;
    w.attn_norm = b.bind(p + "attn_norm.weight", {E});
    std::vector<const GgufTensor*> qkv;
    if (fused) {  // one tensor: its Q, K and V rows as tensors of their own, each split as its own would be
      const GgufTensor* t = b.checked(p + "attn_qkv.weight", {E, QD + 2 * KVD});
      qkv = {share(&rows_of(*t, 0, QD), p + "attn_q.weight"), share(&rows_of(*t, QD, KVD), p + "attn_k.weight"),
             share(&rows_of(*t, QD + KVD, KVD), p + "attn_v.weight")};
    } else {
      qkv = {share(b.checked(p + "attn_q.weight", {E, QD}), p + "attn_q.weight"),
             share(b.checked(p + "attn_k.weight", {E, KVD}), p + "attn_k.weight"),
             share(b.checked(p + "attn_v.weight", {E, KVD}), p + "attn_v.weight")};
    }
    const std::vector<Weight> wqkv = be.load_stacked(qkv);
    w.wq = wqkv[0], w.wk = wqkv[1], w.wv = wqkv[2];
    w.wo = matrix(p + "attn_output.weight", {QD, E});
    w.bq = vector(p + "attn_q.bias", QD, qwen);
    w.bk = vector(p + "attn_k.bias", KVD, qwen);
    w.bv = vector(p + "attn_v.bias", KVD, qwen);
    w.bo = b.bind(p + "attn_output.bias", {E}, false);
    if (qk) w.q_norm = b.bind(p + "attn_q_norm.weight", {HD}), w.k_norm = b.bind(p + "attn_k_norm.weight", {HD});
    if (post) w.post_attn_norm = b.bind(p + "post_attention_norm.weight", {E});
    if (post) w.post_ffn_norm = b.bind(p + "post_ffw_norm.weight", {E});
    w.ffn_norm = b.bind(p + "ffn_norm.weight", {E});
    if (moe) {  // expert e: rows e * F .. of the gate and up stacks, e * E .. of the down stack
      w.gate_inp = be.load_weight(*b.checked(p + "ffn_gate_inp.weight", {E, NE}), WeightUse::Matmul);
      const GgufTensor* g = b.checked(p + "ffn_gate_exps.weight", {E, F, NE});
      const GgufTensor* u = b.checked(p + "ffn_up_exps.weight", {E, F, NE});
      const GgufTensor* d = b.checked(p + "ffn_down_exps.weight", {F, E, NE});
      for (int64_t e = 0; e < NE; ++e) {  // (a rank's share of each as of a dense FFN's matrices)
        w.exp_gate.push_back(be.load_weight(*share(&rows_of(*g, e * F, F), p + "ffn_gate.weight"), WeightUse::Matmul));
        w.exp_up.push_back(be.load_weight(*share(&rows_of(*u, e * F, F), p + "ffn_up.weight"), WeightUse::Matmul));
        w.exp_down.push_back(be.load_weight(*share(&rows_of(*d, e * E, E), p + "ffn_down.weight"), WeightUse::Matmul));
      }
      for (const auto* stack : {&w.exp_gate, &w.exp_up, &w.exp_down}) be.index_experts(*stack);
      if (FS) {  // the shared expert's gate: one output row
        GgufTensor gi = *b.checked(p + "ffn_gate_inp_shexp.weight", {E});
        gi.n_dims = 2, gi.ne[1] = 1;
        w.shared_gate_inp = be.load_weight(gi, WeightUse::Matmul);
        w.shared_gate = matrix(p + "ffn_gate_shexp.weight", {E, FS});
        w.shared_up = matrix(p + "ffn_up_shexp.weight", {E, FS});
        w.shared_down = matrix(p + "ffn_down_shexp.weight", {FS, E});
      }
    } else if (fused) {  // gate rows first, then up (each split as its own tensor would be)
      const GgufTensor* t = b.checked(p + "ffn_up.weight", {E, 2 * F});
      w.w_gate = be.load_weight(*share(&rows_of(*t, 0, F), p + "ffn_gate.weight"), WeightUse::Matmul);
      w.w_up = be.load_weight(*share(&rows_of(*t, F, F), p + "ffn_up.weight"), WeightUse::Matmul);
    } else {
      w.w_gate = matrix(p + "ffn_gate.weight", {E, F});
      w.w_up = matrix(p + "ffn_up.weight", {E, F});
    }
    if (dense) w.w_down = matrix(p + "ffn_down.weight", {F, E});
    layers_.push_back(w);
  }
  auto factors = [&](const char* name) {  // (shape and type checked above)
    std::vector<float> v;
    if (const GgufTensor* rf = f.find_tensor(name)) {
      v.resize(size_t(rf->nelements()));
      std::memcpy(v.data(), rf->data, v.size() * sizeof(float));
      for (float x : v)
        if (!std::isfinite(x) || x <= 0.f) fail("{}: tensor '{}' holds {:g}; its factors must be positive", f.path(), name, x);
    }
    return v;
  };
  moe_routed_ = moe && !FS && !tp_ && be.routes_experts(1, NE, cfg_.n_expert_used);
  rope_freqs_ = factors("rope_freqs.weight");
  rope_long_ = factors("rope_factors_long.weight");
  rope_short_ = factors("rope_factors_short.weight");
  rope_factors_ = !rope_short_.empty() ? rope_short_.data() : rope_freqs_.empty() ? nullptr : rope_freqs_.data();
  // A rank's shares were copied out of the mapping; a backend that uploaded them needs them no more.
  if (be.copies_weights())
    for (auto& sl : slices_)
      if (!sl->bytes.empty()) sl->bytes = {}, sl->tensor.data = nullptr;
}

void LlamaModel::moe_ffn(const LayerWeights& w, Tensor h, Tensor x, const Weight* next) {
  Backend& be = be_;
  const int64_t T = h.rows, NE = cfg_.n_expert, K = cfg_.n_expert_used;
  const Tensor logits = be.alloc(T, NE);
  be.matmul(w.gate_inp, h, logits);
  // The route: in backend memory where the backend routes (one row, or as many as the backend
  // takes, stays there; more are read back, 2k values a row instead of the n_expert logits, and the
  // device's rows run at once), else made here from the logits (backend/moe_route.h).
  std::vector<int32_t> ids(size_t(T * K));
  std::vector<float> weights(size_t(T * K));
  if (moe_routed_) {
    const Tensor route = be.alloc(T, 2 * K);
    be.route_experts(logits, int(K), cfg_.moe_norm_topk, route);
    if (be.routes_experts(T, NE, K)) {  // the rows the backend takes: no host round trip
      be.experts_ffn(w.exp_gate, w.exp_up, w.exp_down, Glu::Silu, h, route, x);
      if (next) be.rmsnorm(x, *next, cfg_.rms_eps, h);
      return;
    }
    std::vector<float> r(size_t(T * 2 * K));
    be.read(route, r.data());
    for (int64_t t = 0; t < T; ++t) {
      std::memcpy(&ids[size_t(t * K)], &r[size_t(t * 2 * K)], size_t(K) * sizeof(int32_t));
      std::copy_n(&r[size_t(t * 2 * K + K)], K, &weights[size_t(t * K)]);
    }
  } else {
    std::vector<float> p(size_t(T * NE));
    be.read(logits, p.data());
    for (int64_t t = 0; t < T; ++t)
      route_top_k(p.data() + t * NE, NE, K, cfg_.moe_norm_topk, &ids[size_t(t * K)], &weights[size_t(t * K)]);
  }
  // Grouped by expert, in token order.
  std::vector<std::vector<int32_t>> rows(static_cast<size_t>(NE));
  std::vector<std::vector<float>> scale(static_cast<size_t>(NE));
  for (int64_t i = 0; i < T * K; ++i) {
    const int32_t e = ids[size_t(i)];
    if (e < 0 || e >= NE) fail("moe: the route picked expert {} of {}", e, NE);
    rows[size_t(e)].push_back(int32_t(i / K));
    scale[size_t(e)].push_back(weights[size_t(i)]);
  }
  // Tensor parallelism: a rank's expert FFNs give partial sums of their outputs (its FFN range, as
  // a dense FFN's). They gather in y, zero to begin with (x less itself: exact for finite x, with
  // the ops every backend has), which one all-reduce per layer sums over the ranks before it joins
  // x: the ranks' collectives do not depend on how each routed.
  const int64_t E = cfg_.n_embd, F = n_ff_;
  std::vector<int32_t> all(static_cast<size_t>(T));
  std::iota(all.begin(), all.end(), 0);
  Tensor y = x;
  if (tp_) {
    y = be.alloc(T, E);
    be.copy_rows(x, all, y);
    be.add_rows_scaled(y, x, all, std::vector<float>(static_cast<size_t>(T), -1.f));
  }
  for (int64_t e = 0; e < NE; ++e) {
    const auto& r = rows[size_t(e)];
    if (r.empty()) continue;
    const int64_t n = int64_t(r.size());
    const Tensor g = be.alloc(n, F), d = be.alloc(n, E);
    Tensor hs = h;  // an expert every token chose (all of decode's) takes h as it is: rows 0..T-1 in order
    if (n < T) hs = be.alloc(n, E), be.copy_rows(h, r, hs);
    be.ffn_gate_up(w.exp_gate[size_t(e)], w.exp_up[size_t(e)], hs, g, Glu::Silu);
    be.matmul(w.exp_down[size_t(e)], g, d);
    be.add_rows_scaled(y, d, r, scale[size_t(e)]);
  }
  if (w.shared_gate_inp) {  // every token: sigmoid(gate . h) * the shared expert's FFN of h
    const int64_t FS = tp_ ? tp_->plan.ff_shared.count : int64_t(cfg_.n_ff_shared);
    const Tensor gl = be.alloc(T, 1), g = be.alloc(T, FS), d = be.alloc(T, E);
    be.matmul(w.shared_gate_inp, h, gl);
    std::vector<float> s(static_cast<size_t>(T));
    be.read(gl, s.data());
    for (float& v : s) v = 1.f / (1.f + std::exp(-v));
    be.ffn_gate_up(w.shared_gate, w.shared_up, h, g, Glu::Silu);
    be.matmul(w.shared_down, g, d);
    be.add_rows_scaled(y, d, all, s);
  }
  if (tp_) {
    be.all_reduce_sum(y, *tp_->comm);
    be.add(x, y);
  }
  if (next) be.rmsnorm(x, *next, cfg_.rms_eps, h);
}

const GgufTensor& LlamaModel::rows_of(const GgufTensor& t, int64_t r0, int64_t n) {
  const size_t rb = row_bytes(t.type, t.ne[0]);
  auto& v = *slices_.emplace_back(std::make_unique<Slice>(Slice{t, {}}));
  v.tensor.ne[1] = n, v.tensor.ne[2] = v.tensor.ne[3] = 1, v.tensor.n_dims = 2;
  v.tensor.data = t.data + size_t(r0) * rb, v.tensor.nbytes = size_t(n) * rb;
  return v.tensor;
}

void LlamaModel::init_cache(int n_ctx, GgmlType kv_type, int pass_rows) {
  n_ctx_ = n_ctx;
  // LongRoPE: the long factors for a context past the one the short factors were trained for
  // (Each set keeps its own buffer: a backend may cache factors by their address.)
  if (!rope_long_.empty()) rope_factors_ = uint32_t(n_ctx) > cfg_.n_ctx_orig ? rope_long_.data() : rope_short_.data();
  be_.set_kv_windows(cfg_.layer_windows(), pass_rows);
  be_.init_kv_cache(int(cfg_.n_layer), n_ctx, int(n_head_kv_ * cfg_.head_dim), kv_type);
}

void LlamaModel::forward(std::span<const int32_t> tokens, std::span<const int32_t> pos, bool all_logits,
                         std::vector<float>& logits) {
  const Tensor out = forward(tokens, pos, all_logits ? Logits::All : Logits::Last);
  logits.resize(size_t(out.rows * out.cols));
  be_.read(out, logits.data());
}

void LlamaModel::check_inputs(std::span<const int32_t> tokens, std::span<const int32_t> pos) const {
  if (tokens.empty()) fail("forward: no tokens");
  if (pos.size() != tokens.size()) fail("forward: {} tokens but {} positions", tokens.size(), pos.size());
  if (n_ctx_ == 0) fail("forward: KV cache not initialised");
  for (int32_t tk : tokens)
    if (tk < 0 || uint32_t(tk) >= cfg_.n_vocab) fail("token id {} is outside the vocabulary of {}", tk, cfg_.n_vocab);
}

// A pass the backend may record (key != 0) and replay: a decode step of one sequence, or of
// several sequences with one row each.
Tensor LlamaModel::recordable_pass(uint64_t key, std::span<const int32_t> tokens, std::span<const int32_t> pos,
                                   Logits mode, std::span<const int32_t> pick) {
  Tensor out;
  if (key && be_.replay(key, out)) return out;
  const bool recording = key && be_.capture_begin(key);
  try {
    out = run_layers(tokens, pos, mode, pick);
    if (recording) be_.capture_end(out);
    return out;
  } catch (...) {
    if (recording) be_.capture_abort();
    throw;
  }
}

Tensor LlamaModel::forward_batch(std::span<const int32_t> tokens, std::span<const int32_t> pos, const KvLayout& layout,
                                 std::span<const int32_t> logit_rows) {
  check_inputs(tokens, pos);
  const size_t T = tokens.size();
  if (layout.row_seq.size() != T) fail("forward: {} tokens but {} row sequences", T, layout.row_seq.size());
  // Logits of every row in order (each sequence's decode row, or a whole pass) need no gather.
  bool every_row = logit_rows.size() == T, one_row_each = layout.tables.size() == T;
  for (size_t i = 0; i < T; ++i) {
    every_row = every_row && logit_rows[i] == int32_t(i);
    one_row_each = one_row_each && layout.row_seq[i] == int32_t(i);
  }
  // A decode step of T sequences: recorded per row count (the backend adds the length bucket), and
  // apart with a window pool's tables (the staging holds them after the others). A mixture of
  // experts whose rows the backend does not route (moe_ffn reads the route back mid-pass): never.
  const uint64_t windows = layout.window_tables.empty() ? 0 : 4;
  const bool experts_ok = cfg_.n_expert == 0 || (moe_routed_ && be_.routes_experts(int64_t(T), cfg_.n_expert, cfg_.n_expert_used));
  const uint64_t key = every_row && one_row_each && experts_ok ? uint64_t(T) << 8 | 2 | windows : 0;
  be_.set_kv_layout(&layout);
  try {
    be_.begin_forward(tokens, pos);
    const Tensor out = logit_rows.empty() ? run_layers(tokens, pos, Logits::None)
                       : every_row        ? recordable_pass(key, tokens, pos, Logits::All, {})
                                          : run_layers(tokens, pos, Logits::All, logit_rows);
    be_.set_kv_layout(nullptr);
    return out;
  } catch (...) {
    be_.set_kv_layout(nullptr);
    throw;
  }
}

Tensor LlamaModel::forward(std::span<const int32_t> tokens, std::span<const int32_t> pos, Logits mode) {
  const int64_t T = int64_t(tokens.size());
  check_inputs(tokens, pos);
  if (pos.front() < 0) fail("forward: negative position {}", pos.front());
  if (pos.back() >= n_ctx_) fail("position {} exceeds the context size {}", pos.back(), n_ctx_);

  be_.begin_forward(tokens, pos);
  constexpr uint64_t kDecodeStep = 1;
  const bool experts_ok = cfg_.n_expert == 0 || moe_routed_;  // (one row: routed in backend memory)
  return recordable_pass(T == 1 && mode == Logits::Last && experts_ok ? kDecodeStep : 0, tokens, pos, mode, {});
}

Tensor LlamaModel::run_layers(std::span<const int32_t> tokens, std::span<const int32_t> pos, Logits mode,
                              std::span<const int32_t> pick) {
  const int64_t T = int64_t(tokens.size());
  const int64_t E = cfg_.n_embd, F = n_ff_;
  const int64_t QD = n_head_ * cfg_.head_dim, KVD = n_head_kv_ * cfg_.head_dim;
  Backend& be = be_;
  be.reset_scratch();
  Tensor x = be.alloc(T, E), h = be.alloc(T, E), q = be.alloc(T, QD), k = be.alloc(T, KVD),
         v = be.alloc(T, KVD), att = be.alloc(T, QD), gate = be.alloc(T, F);
  const RopeParams rope{int(cfg_.n_rot), cfg_.rope_base, cfg_.rope_freq_scale, cfg_.rope_neox,
                        rope_factors_, cfg_.rope_attn_factor};
  const AttentionParams ap{int(n_head_), int(n_head_kv_), int(cfg_.head_dim), cfg_.attn_scale};

  // One row (decode): the last W_down's matmul_add_norm makes the output norm (xs = x, hs = h).
  const bool final_norm_fused = T == 1 && mode != Logits::None && pick.empty();
  if (cfg_.embed_scale != 1.f) {
    be.embed(tok_embd_, tokens, x);
    be.scale(x, cfg_.embed_scale);
    be.rmsnorm(x, layers_[0].attn_norm, cfg_.rms_eps, h);
  } else {
    be.embed_norm(tok_embd_, tokens, x, layers_[0].attn_norm, cfg_.rms_eps, h);
  }
  for (size_t l = 0; l < layers_.size(); ++l) {
    const LayerWeights& w = layers_[l];  // h = rmsnorm(x) * attn_norm here
    // x += Wo attention(rope(Wq h + bq), rope(Wk h + bk), Wv h + bv) (+ bo); h = rmsnorm(x) * ffn_norm
    const Weight* qkv_w[] = {&w.wq, &w.wk, &w.wv};
    const Tensor qkv[] = {q, k, v};
    be.matmul_multi(qkv_w, h, qkv);
    if (w.bq) be.add_bias(q, w.bq);
    if (w.bk) be.add_bias(k, w.bk);
    if (w.bv) be.add_bias(v, w.bv);
    const QkNorm qk = cfg_.qk_norm ? QkNorm{&w.q_norm, &w.k_norm, cfg_.rms_eps} : QkNorm{};
    RopeParams rl = rope;
    AttentionParams al = ap;
    if (cfg_.is_local(uint32_t(l))) {  // a sliding-window layer: its own RoPE base, unscaled
      rl.base = cfg_.rope_base_local, rl.freq_scale = 1.f, rl.freq_factors = nullptr, rl.attn_factor = 1.f;
      al.window = int(cfg_.sliding_window);
    }
    be.rope_attention(int(l), q, k, v, pos, rl, al, qk, att);
    project_add(w.wo, att, w.bo, w.post_attn_norm, x, &w.ffn_norm, h);
    // x += Wdown act(Wgate h) * (Wup h); h = rmsnorm(x) * the next layer's attn_norm (or the output norm)
    const Weight* next = l + 1 < layers_.size() ? &layers_[l + 1].attn_norm : final_norm_fused ? &out_norm_ : nullptr;
    if (cfg_.n_expert) {
      moe_ffn(w, h, x, next);
      continue;
    }
    be.ffn_gate_up(w.w_gate, w.w_up, h, gate, cfg_.gelu_ffn ? Glu::Gelu : Glu::Silu);
    project_add(w.w_down, gate, Weight{}, w.post_ffn_norm, x, next, h);
  }
  if (mode == Logits::None) return Tensor{nullptr, 0, n_logits_};
  // Logits for every row, or only the last (prompt processing needs only the last), or the
  // rows picked (a pass over several sequences: the last row of each that samples next).
  const bool all = mode == Logits::All;
  Tensor xs = all ? x : x.rows_view(T - 1, 1);
  Tensor hs = all ? h : h.rows_view(T - 1, 1);
  if (!pick.empty()) {
    xs = be.alloc(int64_t(pick.size()), E), hs = be.alloc(int64_t(pick.size()), E);
    be.copy_rows(x, pick, xs);
  }
  if (!final_norm_fused) be.rmsnorm(xs, out_norm_, cfg_.rms_eps, hs);
  Tensor out = be.alloc(xs.rows, n_logits_);
  be.matmul(output_, hs, out);  // (a one-row pass: the CUDA plan also takes its greedy id)
  return out;
}

void LlamaModel::project_add(const Weight& w, Tensor in, const Weight& bias, const Weight& post_norm, Tensor x,
                             const Weight* next, Tensor h) {
  Backend& be = be_;
  if (!bias && !post_norm && !tp_) {
    if (next) be.matmul_add_norm(w, in, x, *next, cfg_.rms_eps, h);
    else be.matmul_add(w, in, x);
    return;
  }
  Tensor proj = be.alloc(x.rows, x.cols);
  be.matmul(w, in, proj);
  if (tp_) be.all_reduce_sum(proj, *tp_->comm);  // each rank's matmul gives partial sums
  if (bias) be.add_bias(proj, bias);
  be.add_norm(x, proj, post_norm ? &post_norm : nullptr, next, cfg_.rms_eps, h);
}

}  // namespace lamina
