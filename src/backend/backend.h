// The backend op interface. The model's forward pass (model/llama.cpp) is written once against
// it; the CPU backend (backend/cpu) and the CUDA backend implement it.
//
// Conventions: activations are f32, row-major, one row per token ([rows][cols]); memory is the
// backend's (host for CPU, device for CUDA) and the model never dereferences it. Weights are
// GGUF tensors as the backend prepared them (a host mapping, a device copy or a repack).
// A matmul computes out[t][r] = sum_c W[r][c] * x[t][c]: W is [rows=ne1][cols=ne0] as stored.
#pragma once

#include "backend/sampling_params.h"
#include "core/communicator.h"
#include "core/error.h"
#include "format/ggml_type.h"

#include <algorithm>
#include <cstring>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace lamina {

struct GgufTensor;

struct Tensor {            // f32 activations [rows][cols], contiguous, owned by a backend
  float* data = nullptr;
  int64_t rows = 0, cols = 0;
  Tensor rows_view(int64_t first, int64_t n) const { return {data + first * cols, n, cols}; }
};

struct Weight {            // a parameter as a backend holds it
  GgmlType type = GgmlType::F32;
  int64_t cols = 0;        // ne[0]: elements per row (input features)
  int64_t rows = 1;        // ne[1]: output features
  const void* data = nullptr;
  explicit operator bool() const { return data != nullptr; }
};

struct RopeParams {
  int n_rot = 0;             // rotated dimensions per head (pairs: n_rot / 2)
  float base = 10000.f;
  float freq_scale = 1.f;    // 1 / linear scaling factor
  bool neox = false;         // pairs (i, i + n_rot/2) instead of (2i, 2i+1)
  const float* freq_factors = nullptr;  // [n_rot/2] divisors (Llama 3 rope_freqs, LongRoPE), host memory
  float attn_factor = 1.f;              // cos and sin times this (LongRoPE's magnitude scaling, as ggml)
};

enum class Glu { Silu, Gelu };  // the gated FFN's activation (GELU in its tanh form)

// What a weight is used for, so a backend can choose its layout (a GPU repacks matmul weights
// but keeps the embedding table in GGUF blocks for row lookups). A tied output matrix is bound
// twice: as Embedding and as Matmul.
enum class WeightUse { Matmul, Embedding, Vector };


struct AttentionParams {
  int n_head = 0, n_head_kv = 0, head_dim = 0;
  float scale = 1.f;         // 1/sqrt(head_dim)
  int window = 0;            // > 0: a query at position p attends to p - window + 1 .. p only (sliding window)
};

// Per-head RMSNorm of q and k before RoPE (qwen3, gemma3): weights [head_dim] each, or none.
struct QkNorm {
  const Weight* q = nullptr;
  const Weight* k = nullptr;
  float eps = 0.f;
  explicit operator bool() const { return q != nullptr; }
};

// Where a pass's rows keep their keys and values when it runs several sequences on a paged KV
// cache (engine/kv_blocks.h): the cache's positions are slots of blocks of block_tokens; row t
// belongs to sequence row_seq[t] of the pass, whose position p lives in slot
// tables[row_seq[t]][p / block_tokens] * block_tokens + p % block_tokens; it attends to its own
// sequence's positions <= pos[t]. Without a layout, a pass is one sequence and position p is
// slot p. window_tables (one per sequence, or none): the sliding-window layers' own blocks
// (KvBlockManager's window pool), read in place of tables for those layers; the entries of
// positions before a row's window are stale (no kernel reads them).
struct KvLayout {
  int block_tokens = 0;
  std::span<const int32_t> row_seq;
  std::vector<std::span<const int32_t>> tables;
  std::vector<std::span<const int32_t>> window_tables;
  // The tables a layer reads: window_tables for a window layer, where there are some.
  const std::vector<std::span<const int32_t>>& tables_for(int window) const {
    return window > 0 && !window_tables.empty() ? window_tables : tables;
  }
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;

  // Weights: called once per tensor at load time.
  virtual Weight load_weight(const GgufTensor& t, WeightUse use) = 0;
  // Matmul weights that always multiply the same input (Q, K, V) — a backend may store them as
  // one stacked matrix and run matmul_multi over them as one matmul. One Weight per tensor.
  virtual std::vector<Weight> load_stacked(std::span<const GgufTensor* const> ts) {
    std::vector<Weight> w;
    for (const GgufTensor* t : ts) w.push_back(load_weight(*t, WeightUse::Matmul));
    return w;
  }
  // Whether load_weight and load_stacked copy what they need (an upload), so that the host bytes
  // passed may be freed once they return; false where the backend reads them in place.
  virtual bool copies_weights() const { return false; }
  // Bytes the backend can still give to weights, KV cache and activations.
  virtual size_t memory_available() const = 0;
  // Bytes held now (weights, cache, scratch); 0 where not tracked.
  virtual size_t memory_used() const { return 0; }
  // Scratch activations, valid until reset_scratch().
  virtual Tensor alloc(int64_t rows, int64_t cols) = 0;
  virtual void reset_scratch() = 0;
  // The layers' sliding windows (window[l] > 0: layer l attends to its last window[l] positions)
  // and the most rows a pass is expected to hold, told before init_kv_cache: a backend may back
  // a window layer with only the rows its window reads (the CUDA backend, one sequence).
  virtual void set_kv_windows(std::span<const int> window, int pass_rows) {}
  // KV cache: n_layer x n_ctx positions x (n_head_kv * head_dim), F16 or F32.
  virtual void init_kv_cache(int n_layer, int n_ctx, int kv_dim, GgmlType type) = 0;
  // Device memory such a cache would hold at first, with those windows (one per layer) told
  // first: every row of every layer, less what the backend leaves unbacked.
  virtual size_t kv_bytes_for(int n_ctx, int kv_dim, GgmlType type, std::span<const int> window, int pass_rows) const {
    return 2 * window.size() * size_t(n_ctx) * row_bytes(type, kv_dim);
  }
  // Every row of every global layer's cache backed from now on, and the first window_rows rows
  // of each sliding-window layer's (n_ctx or more: every row): the batching engine shares the
  // rows out as pages between sequences (its window pool's pages are those first rows). Throws
  // where the memory for that is not there.
  virtual void kv_keep_rows(int window_rows) {}
  virtual size_t kv_cache_bytes() const = 0;
  // Sliding-window layers may give back the cache of positions before their windows (one
  // sequence: the CPU backend's pages, the CUDA backend's chunks). kv_rewind_floor: the fewest tokens a conversation may be cut back to
  // and go on from its cache (0: any); kv_restart: the conversation starts again from position 0
  // (what was given back is rewritten as it goes).
  virtual int kv_rewind_floor() const { return 0; }
  virtual void kv_restart() {}

  // Called first in every forward pass with its token ids and positions; the ops that take
  // `pos` receive the same span. A GPU backend uploads both here.
  virtual void begin_forward(std::span<const int32_t> tokens, std::span<const int32_t> pos) {}
  // The paged layout of the passes that follow (null: one sequence, slot = position); it must
  // stay valid while they run. Only backends that take layouts run the batching engine.
  virtual bool takes_kv_layout() const { return false; }
  // Whether argmax_rows may start the next pass when given its layout (the caller then reserves
  // the blocks of the next positions for it).
  virtual bool runs_ahead() const { return false; }
  virtual void set_kv_layout(const KvLayout* layout) {
    if (layout) fail("the {} backend does not run several sequences at once yet", name());
  }
  // Whether add_rows_scaled runs here (mixtures of experts).
  virtual bool runs_experts() const { return false; }
  // The batching engine's step budget when none is given (SchedulerOptions::max_step_tokens 0):
  // tokens one forward may take, decode rows first. CUDA takes 2048 (docs/benchmarks.md).
  virtual int engine_step_tokens() const { return 512; }
  // dst[rows[i]] += scale[i] * src[i]: a mixture of experts' weighted expert outputs back into
  // the rows of the tokens routed to that expert (rows distinct). `scale` is host memory.
  virtual void add_rows_scaled(Tensor dst, Tensor src, std::span<const int32_t> rows, std::span<const float> scale) {
    fail("the {} backend does not run mixtures of experts yet", name());
  }
  // A mixture of experts' step with its routing in backend memory (the passes a backend takes,
  // every expert stack indexed: CUDA's decode steps, and its prompts where it has a grouped GEMM
  // for the experts): no host round trip between router and experts, so the step can be recorded.
  // The model calls experts_ffn only where routes_experts(rows, n_expert, k) (k picks of n_expert
  // a row); route_experts where
  // routes_experts(1, n_expert, k) (several rows then read their route back).
  virtual bool routes_experts(int64_t rows, int64_t n_expert, int64_t k) const { return false; }
  // After an expert stack's matrices are loaded (one per expert, one type and shape): lets the
  // backend index them for experts_matmul.
  virtual void index_experts(std::span<const Weight> experts) {}
  // route [rows][2k] from the router's logits [rows][n_expert]: the k picks' ids (int32 bits in
  // the float slots), ascending, then their weights (backend/moe_route.h's route_top_k).
  virtual void route_experts(Tensor logits, int k, bool renorm, Tensor route) {
    fail("the {} backend does not route experts on the device", name());
  }
  // out [rows k][w.rows], pair g = t k + j: expert e_tj's matrix times x's row t (with w_up,
  // glu(W_e x_t, W_up_e x_t); x [rows][w.cols]) or times x's row g (no w_up; x [rows k][w.cols]);
  // e_tj = route row t's pick j. (Here: the route read back, one matmul a pair.)
  virtual void experts_matmul(std::span<const Weight> w, std::span<const Weight> w_up, Glu act, Tensor x, Tensor route,
                              Tensor out) {
    const int64_t k = route.cols / 2;
    const std::vector<float> r = read_route(route, out.rows / std::max<int64_t>(k, 1), k);
    for (int64_t g = 0; g < out.rows; ++g) {
      const size_t e = expert_of(r, g / k * 2 * k + g % k, w.size());
      if (!w_up.empty()) ffn_gate_up(w[e], w_up[e], x.rows_view(g / k, 1), out.rows_view(g, 1), act);
      else matmul(w[e], x.rows_view(g, 1), out.rows_view(g, 1));
    }
  }
  // y[t] += weight_tj d[t k + j] for j = 0..k-1 in order (the picks' ascending ids: the order
  // add_rows_scaled adds them in when the model loops over the experts). (Here: one
  // add_rows_scaled a pair, the same bits.)
  virtual void add_routed(Tensor y, Tensor d, Tensor route) {
    const int64_t k = route.cols / 2;
    const std::vector<float> r = read_route(route, y.rows, k);
    for (int64_t g = 0; g < d.rows; ++g) {
      const int32_t row[] = {int32_t(g / k)};
      add_rows_scaled(y, d.rows_view(g, 1), row, std::span<const float>(&r[size_t(g / k * 2 * k + k + g % k)], 1));
    }
  }
  // A routed expert FFN added into x: x[t] += sum over j of weight_tj down_e(glu(gate_e h_t, up_e
  // h_t)), e = e_tj, as experts_matmul (the gate/up pair), experts_matmul (down) and add_routed
  // give it (here: those three). h [rows][n_embd], x [rows][n_embd], route [rows][2k].
  virtual void experts_ffn(std::span<const Weight> gate, std::span<const Weight> up, std::span<const Weight> down, Glu act,
                           Tensor h, Tensor route, Tensor x) {
    const int64_t k = route.cols / 2;
    const Tensor g = alloc(h.rows * k, gate[0].rows), d = alloc(h.rows * k, down[0].rows);
    experts_matmul(gate, up, act, h, route, g);
    experts_matmul(down, {}, act, g, route, d);
    add_routed(x, d, route);
  }
  // dst[i] = src[rows[i]]: the rows whose logits a pass wants.
  virtual void copy_rows(Tensor src, std::span<const int32_t> rows, Tensor dst) {
    fail("the {} backend does not gather rows", name());
  }

  // Ops. `pos[t]` is the position of row t (one sequence; causal).
  virtual void embed(const Weight& table, std::span<const int32_t> tokens, Tensor out) = 0;
  virtual void rmsnorm(Tensor x, const Weight& w, float eps, Tensor out) = 0;
  // Composed ops, written once in the plain ops above and below. They are not virtual: a backend
  // that fuses (the CUDA backend's step plan, backend/step_plan.h) finds the patterns itself.
  //
  // out = embed(tokens), then h = rmsnorm(out) * norm.
  void embed_norm(const Weight& table, std::span<const int32_t> tokens, Tensor out, const Weight& norm,
                          float eps, Tensor h) {
    embed(table, tokens, out);
    rmsnorm(out, norm, eps, h);
  }
  virtual void matmul(const Weight& w, Tensor x, Tensor out) = 0;
  // Several matmuls of the same input (Q/K/V, gate/up): out[i] = x . w[i]^T. Backends may
  // share the input's conversion and one parallel pass; the default calls matmul per weight.
  virtual void matmul_multi(std::span<const Weight* const> w, Tensor x, std::span<const Tensor> out) {
    for (size_t i = 0; i < w.size(); ++i) matmul(*w[i], x, out[i]);
  }
  // inout += x . w^T (a plain op whose default adds a product in scratch).
  virtual void matmul_add(const Weight& w, Tensor x, Tensor inout) {
    Tensor t = alloc(x.rows, w.rows);
    matmul(w, x, t);
    add(inout, t);
  }
  // inout += x . w^T, then out = rmsnorm(inout) * norm: the residual add and the norm that reads
  // it next.
  void matmul_add_norm(const Weight& w, Tensor x, Tensor inout, const Weight& norm, float eps, Tensor out) {
    matmul_add(w, x, inout);
    rmsnorm(inout, norm, eps, out);
  }
  // out = act(x . gate^T) * (x . up^T), act SiLU (SwiGLU) or GELU (GeGLU).
  void ffn_gate_up(const Weight& gate, const Weight& up, Tensor x, Tensor out, Glu act) {
    Tensor u = alloc(x.rows, up.rows);
    const Weight* w[] = {&gate, &up};
    const Tensor o[] = {out, u};
    matmul_multi(w, x, o);
    if (act == Glu::Gelu) geglu(out, u);
    else swiglu(out, u);
  }
  // x += y (y_norm: x += rmsnorm(y) * y_norm), then h = rmsnorm(x) * norm when norm is given: a
  // block's output joining the residual stream (Gemma's post-norm) and the norm that reads it
  // next.
  void add_norm(Tensor x, Tensor y, const Weight* y_norm, const Weight* norm, float eps, Tensor h) {
    if (y_norm) {
      const Tensor normed = alloc(y.rows, y.cols);
      rmsnorm(y, *y_norm, eps, normed);
      y = normed;
    }
    add(x, y);
    if (norm) rmsnorm(x, *norm, eps, h);
  }
  virtual void add_bias(Tensor x, const Weight& b) = 0;           // x[t] += b
  virtual void add(Tensor x, Tensor y) = 0;                        // x += y
  // t = the element-wise sum of every rank's t (tensor parallelism: a row-parallel matmul's
  // partial sums). Backends that keep activations elsewhere than host memory say so.
  virtual void all_reduce_sum(Tensor t, Communicator& comm) {
    fail("the {} backend does not run tensor parallel yet", name());
  }
  virtual void rope(Tensor x, int n_heads, int head_dim, std::span<const int32_t> pos,
                    const RopeParams& p) = 0;
  // Stores k, v (rows = tokens) at their positions of `layer`, then computes causal attention
  // of q against every cached position <= its own (and inside p.window when it is set):
  // out[t] = concat_h softmax(q_h K^T s) V.
  virtual void attention(int layer, Tensor q, Tensor k, Tensor v, std::span<const int32_t> pos,
                         const AttentionParams& p, Tensor out) = 0;
  // RoPE on q (n_head heads) and k (n_head_kv heads), then attention (which stores k and v):
  // the attention block of a layer. With qk set, each head of q and k is RMS-normalised first.
  // q and k may be overwritten.
  void rope_attention(int layer, Tensor q, Tensor k, Tensor v, std::span<const int32_t> pos,
                              const RopeParams& rope_p, const AttentionParams& p, const QkNorm& qk, Tensor out) {
    if (qk) {  // each head a row of its own
      const int64_t hd = p.head_dim;
      const Tensor qh{q.data, q.rows * p.n_head, hd}, kh{k.data, k.rows * p.n_head_kv, hd};
      const Tensor qn = alloc(qh.rows, hd), kn = alloc(kh.rows, hd);
      rmsnorm(qh, *qk.q, qk.eps, qn);
      rmsnorm(kh, *qk.k, qk.eps, kn);
      q = Tensor{qn.data, q.rows, q.cols}, k = Tensor{kn.data, k.rows, k.cols};
    }
    rope(q, p.n_head, p.head_dim, pos, rope_p);
    rope(k, p.n_head_kv, p.head_dim, pos, rope_p);
    attention(layer, q, k, v, pos, p, out);
  }
  virtual void swiglu(Tensor gate, Tensor up) = 0;                 // gate = silu(gate) * up
  // gate = gelu(gate) * up, GELU in its tanh form: 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))).
  virtual void geglu(Tensor gate, Tensor up) = 0;
  virtual void scale(Tensor x, float s) = 0;                       // x *= s
  virtual void read(Tensor t, float* host) = 0;                    // copy rows to host

  // Step recording (CUDA graphs). The model brackets a forward pass that it may repeat with the
  // same shapes (a decode step) with capture_begin/capture_end(the pass's result); a backend
  // that records returns true from capture_begin when this pass is being recorded, and
  // replay(key, out) later re-runs the recording with the inputs given to begin_forward and sets
  // out to where it leaves its result. capture_abort ends a failed recording.
  virtual bool replay(uint64_t key, Tensor& out) { return false; }
  virtual bool capture_begin(uint64_t key) { return false; }
  virtual void capture_end(Tensor out) {}
  virtual void capture_abort() {}

  // Sampling in backend memory: the host then waits for one token id, not a logits row.
  // `u` is the uniform draw in [0, 1); `penalty_ids` the distinct ids the penalty applies to (the
  // repetition penalty only: a draw with presence or frequency penalties is made on the host).
  // more: the caller will most likely decode the sampled id next, at the next position (a
  // backend may start that step before the host has the id; the logits are then overwritten).
  // Callers draw here what draws_on_device (below) accepts.
  virtual int32_t sample(Tensor logits, const SamplerParams& p, std::span<const int32_t> penalty_ids, double u,
                         bool more = false) {
    fail("the {} backend does not sample in its own memory", name());
  }

  // Draws on several logits rows in backend memory (the engine's sampled rows): draw i on row
  // draws[i].row with its own parameters, distinct penalty ids and uniform u (as sample()); its id
  // to out[i]. draws_on_device(p): whether a draw with these parameters is made there, by exactly
  // the host Sampler's rules (same row and u, same id).
  struct RowDraw {
    int64_t row = 0;
    const SamplerParams* params = nullptr;
    std::span<const int32_t> penalty_ids;
    double u = 0.0;
  };
  virtual bool draws_on_device(const SamplerParams& p) const { return false; }
  virtual void sample_rows(Tensor logits, std::span<const RowDraw> draws, std::span<int32_t> out) {
    fail("the {} backend does not sample rows in its own memory", name());
  }
  // The first half of such draws, for a vocabulary split over ranks: out[i] = draw i's best
  // min(top_k, logits.cols) tokens of this share (one for a greedy draw): (logit after the
  // repetition penalty, column), sorted by logit descending then column ascending. penalty_ids
  // are this share's columns. Sampler::sample_sorted draws from the ranks' lists merged.
  virtual void top_candidates(Tensor logits, std::span<const RowDraw> draws,
                              std::vector<std::vector<std::pair<float, int32_t>>>& out) {
    fail("the {} backend does not rank candidates in its own memory", name());
  }

  // out[r] = the greedy id of logits row r (lowest id among equal maxima, as Sampler's greedy
  // draw): the host then reads one id per row, not a row of logits. max[r], where max is given:
  // that row's largest logit (ranks of a split vocabulary merge their picks by it).
  // next: the caller will most likely run the pass's rows again next (one row per sequence,
  // every row picked), each at its next position with the id found here as its token, on these
  // block tables (blocks for the next positions included); a backend may start that pass before
  // it returns, and the logits are then overwritten (the engine's run-ahead).
  virtual void argmax_rows(Tensor logits, std::span<int32_t> out, std::span<float> max = {},
                           const KvLayout* next = nullptr) {
    std::vector<float> row(size_t(logits.cols));
    for (int64_t r = 0; r < logits.rows; ++r) {
      read(logits.rows_view(r, 1), row.data());
      const auto top = std::max_element(row.begin(), row.end());
      out[size_t(r)] = int32_t(top - row.begin());
      if (!max.empty()) max[size_t(r)] = *top;
    }
  }

  // Per-op timing (--profile): off by default; a report of the ops timed since the last reset.
  virtual void set_profiling(bool on) {}
  virtual std::string profile_report() { return {}; }
  virtual void profile_reset() {}

 protected:
  // A route (route_experts) on the host, checked: rows of k ids, then k weights.
  std::vector<float> read_route(Tensor route, int64_t rows, int64_t k) {
    if (k < 1 || route.rows != rows || route.cols != 2 * k)
      fail("route: {} rows of {} picks expected, got {} x {}", rows, k, route.rows, route.cols);
    std::vector<float> r(size_t(2 * k * rows));
    read(route, r.data());
    return r;
  }
  // The expert id at index i of a route read back.
  static size_t expert_of(const std::vector<float>& r, int64_t i, size_t n_expert) {
    int32_t e = 0;
    std::memcpy(&e, &r[size_t(i)], sizeof e);
    if (e < 0 || size_t(e) >= n_expert) fail("route: expert {} of {}", e, n_expert);
    return size_t(e);
  }
};

}  // namespace lamina
