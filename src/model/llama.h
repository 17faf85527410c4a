// The Llama-family model (arch "llama": Llama 2/3, Mistral, SmolLM2; "qwen2": QKV biases, NEOX
// RoPE; "qwen3": per-head q/k norms; "gemma3": scaled embeddings, q/k norms, norms after attention
// and FFN, GELU gate, sliding-window layers; "phi3": fused QKV and gate/up tensors; Mixtral-style
// llama files: a mixture of experts): weights
// bound to a backend, and one forward pass for prompt and decode.
#pragma once

#include "backend/backend.h"
#include "model/config.h"
#include "model/tensor_parallel.h"

#include <memory>
#include <optional>
#include <span>
#include <vector>

namespace lamina {

class GgufFile;

struct LayerWeights {
  Weight attn_norm, wq, wk, wv, wo, bq, bk, bv, bo;
  Weight q_norm, k_norm, post_attn_norm;  // qwen3, gemma3 (absent elsewhere)
  Weight ffn_norm, w_gate, w_up, w_down;
  Weight post_ffn_norm;                   // gemma3
  // A mixture of experts (instead of w_gate, w_up, w_down): the router and each expert's matrices.
  Weight gate_inp;
  std::vector<Weight> exp_gate, exp_up, exp_down;
  Weight shared_gate_inp, shared_gate, shared_up, shared_down;  // qwen2moe's shared expert
};

class LlamaModel {
 public:
  // A rank of a tensor-parallel group (tensor_parallel.h): its plan and its group's collectives.
  struct TpRank {
    TpPlan plan;
    Communicator* comm = nullptr;
  };
  // Binds every tensor to the backend; throws lamina::Error naming missing or mis-shaped ones.
  // With `tp`, only the rank's share of each weight (sliced from the file's tensors), its KV heads
  // in the cache, and an all-reduce after Wo and after down; the logits are the rank's rows of
  // the vocabulary (tp_argmax picks the greedy id over the group).
  LlamaModel(const GgufFile& file, Backend& backend, const TpRank* tp = nullptr);

  const ModelConfig& config() const { return cfg_; }
  Backend& backend() { return be_; }

  // Sets up the KV cache for n_ctx positions (F16 or F32), for passes of up to pass_rows rows
  // (larger ones still run; the sliding-window layers' cache grows for them on CUDA).
  void init_cache(int n_ctx, GgmlType kv_type, int pass_rows = 512);
  int n_ctx() const { return n_ctx_; }

  enum class Logits { None, Last, All };
  // Runs tokens at positions pos[i] (one sequence, positions increasing) and returns the logits
  // in backend memory ([rows][n_vocab]: every row, the last only, or none), valid until the
  // next forward. A single-token pass with the last row's logits (a decode step) is recorded
  // by backends that can (CUDA graphs) and replayed from then on.
  Tensor forward(std::span<const int32_t> tokens, std::span<const int32_t> pos, Logits mode);
  // A pass over several sequences on the paged cache `layout` describes (the engine's steps): the
  // logits of the rows in logit_rows ([logit_rows.size()][n_vocab], backend memory, valid until
  // the next forward; none when logit_rows is empty). Positions must lie in the blocks the
  // layout gives each row's sequence.
  Tensor forward_batch(std::span<const int32_t> tokens, std::span<const int32_t> pos, const KvLayout& layout,
                       std::span<const int32_t> logit_rows);
  // The same, copying the logits to host memory.
  void forward(std::span<const int32_t> tokens, std::span<const int32_t> pos, bool all_logits,
               std::vector<float>& logits);

 private:
  ModelConfig cfg_;
  Backend& be_;
  Weight tok_embd_, out_norm_, output_;
  std::vector<LayerWeights> layers_;
  std::vector<float> rope_freqs_;  // Llama 3 frequency factors (host copy), empty if none
  std::vector<float> rope_long_, rope_short_;  // LongRoPE's two sets (init_cache picks one), or empty
  const float* rope_factors_ = nullptr;        // the set in use: one of the above, or null
  int n_ctx_ = 0;
  // This rank's dimensions (the whole model's without tensor parallelism).
  std::optional<TpRank> tp_;
  int64_t n_head_ = 0, n_head_kv_ = 0, n_ff_ = 0, n_logits_ = 0;
  struct Slice {  // a rank's share of a file tensor (its bytes copied), or a fused tensor's part (a view: no bytes)
    GgufTensor tensor;
    std::vector<uint8_t> bytes;
  };
  std::vector<std::unique_ptr<Slice>> slices_;  // (stable addresses: backends may keep pointers)
  // x += the token's experts' FFNs of h, weighted (ModelConfig::n_expert), then h = rmsnorm(x) *
  // next when next is given. Where the backend routes (moe_routed_) one row's route stays in its
  // memory; several rows read their route back; otherwise the router's logits are read and
  // routed here. The host groups several rows by expert.
  void moe_ffn(const LayerWeights& w, Tensor h, Tensor x, const Weight* next);
  // Whether the backend routes (route_experts), and a one-row pass's experts go by the route in
  // its memory (no shared expert, no tensor parallelism): such a decode step can be recorded.
  bool moe_routed_ = false;
  // Rows r0 .. r0 + n of a file tensor as a tensor of its own (a fused tensor's parts, an
  // expert's matrix of a stacked [.., .., n_expert] tensor; no copy).
  const GgufTensor& rows_of(const GgufTensor& t, int64_t r0, int64_t n);

  void check_inputs(std::span<const int32_t> tokens, std::span<const int32_t> pos) const;
  // run_layers, recorded and replayed by the backend when key != 0 (a pass repeated with the
  // same shapes: the backend keys it further by the length bucket).
  Tensor recordable_pass(uint64_t key, std::span<const int32_t> tokens, std::span<const int32_t> pos, Logits mode,
                         std::span<const int32_t> pick);
  // The layers, then the logits of `mode`, or of the rows in `pick` when it is not empty.
  Tensor run_layers(std::span<const int32_t> tokens, std::span<const int32_t> pos, Logits mode,
                    std::span<const int32_t> pick = {});
  // x += post_norm(w . in + bias) (all-reduced over the ranks first), then h = rmsnorm(x) * next
  // when next is given: a block's output projection and the residual add; fused where the
  // backend can when there is no bias, post-norm or tensor parallelism.
  void project_add(const Weight& w, Tensor in, const Weight& bias, const Weight& post_norm, Tensor x,
                   const Weight* next, Tensor h);
};

}  // namespace lamina
