// Model hyper-parameters read from GGUF metadata ({arch}.* keys, formats.md §1.2).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lamina {

class GgufFile;

struct ModelConfig {
  std::string arch;          // "llama", "qwen2", "qwen2moe", "qwen3", "qwen3moe", "gemma3" or "phi3"
  std::string name;          // general.name, if any
  uint32_t n_ctx_train = 0;  // {arch}.context_length
  uint32_t n_embd = 0;
  uint32_t n_layer = 0;
  uint32_t n_ff = 0;
  uint32_t n_head = 0;
  uint32_t n_head_kv = 0;
  uint32_t head_dim = 0;     // key_length (defaults to n_embd / n_head)
  uint32_t n_rot = 0;        // rope.dimension_count
  uint32_t n_vocab = 0;
  float rms_eps = 1e-5f;
  float rope_base = 10000.f;
  float rope_freq_scale = 1.f;  // 1 / rope.scaling.factor
  std::string rope_scaling = "none";
  // LongRoPE (Phi-3 128k files: rope_factors_long/short tensors): the context the short factors
  // were trained for (rope.scaling.original_context_length; longer contexts take the long
  // factors, as llama.cpp chooses) and the cos/sin scaling (rope.scaling.attn_factor).
  uint32_t n_ctx_orig = 0;
  float rope_attn_factor = 1.f;
  bool rope_neox = false;       // qwen2/qwen3/gemma3/phi3: NEOX pairs (i, i+n/2); llama: adjacent pairs
  float attn_scale = 0.f;       // q.k scale: 1/sqrt(head_dim) (Gemma 3 27B: 1/sqrt(n_embd/n_head))

  // Gemma 3 and Qwen 3 (formats.md §3): what sets them apart from a Llama block.
  float embed_scale = 1.f;      // x = embed(tokens) * embed_scale (gemma3: sqrt(n_embd))
  bool qk_norm = false;         // q and k RMS-normalised per head (attn_q_norm, attn_k_norm [head_dim])
  bool post_norms = false;      // the attention and FFN outputs RMS-normalised before the residual add
  bool gelu_ffn = false;        // FFN gate GELU (tanh form) instead of SiLU
  // phi3: Q, K and V in one tensor (attn_qkv [E, QD + 2 KVD], rows in that order) and gate and
  // up in one (ffn_up [E, 2 F], gate rows first). (Its sliding_window key is ignored, as
  // llama.cpp does.)
  bool fused_qkv_up = false;
  // Mixture of experts (Mixtral-style llama files and qwen3moe: ffn_gate_inp,
  // ffn_{gate,up,down}_exps; n_ff is then the experts' width, expert_feed_forward_length): each
  // token's FFN is the sum of its n_expert_used best experts' SwiGLU FFNs, weighted by their
  // router softmax probabilities renormalised over the chosen ones. 0: a dense FFN.
  uint32_t n_expert = 0, n_expert_used = 0;
  bool moe_norm_topk = true;    // renormalise the chosen experts' probabilities (not qwen2moe)
  // qwen2moe: a shared expert (ffn_{gate,up,down}_shexp of this width) added to every token,
  // weighted by sigmoid(ffn_gate_inp_shexp . h). 0: none.
  uint32_t n_ff_shared = 0;
  // Sliding-window layers (gemma3): a local layer's query at position p attends to positions
  // p - window + 1 .. p and rotates with its own RoPE base (no scaling); every swa_pattern-th
  // layer (l % swa_pattern == swa_pattern - 1) is global.
  uint32_t sliding_window = 0;  // 0: every layer global
  uint32_t swa_pattern = 0;
  float rope_base_local = 10000.f;
  bool is_local(uint32_t layer) const {
    return sliding_window > 0 && swa_pattern > 0 && layer % swa_pattern != swa_pattern - 1;
  }
  // Each layer's window (0: a global layer), as the KV cache is told (Backend::set_kv_windows).
  std::vector<int> layer_windows() const {
    std::vector<int> w(n_layer, 0);
    for (uint32_t l = 0; l < n_layer; ++l)
      if (is_local(l)) w[l] = int(sliding_window);
    return w;
  }

  // Reads and validates the config; throws lamina::Error naming the key that is missing or bad.
  static ModelConfig from_gguf(const GgufFile& f);
};

}  // namespace lamina
