#include "model/config.h"

#include "core/error.h"
#include "format/gguf.h"

#include <cmath>
#include <optional>

namespace lamina {

ModelConfig ModelConfig::from_gguf(const GgufFile& f) {
  ModelConfig c;
  c.arch = f.require_string("general.architecture");
  if (c.arch != "llama" && c.arch != "qwen2" && c.arch != "qwen2moe" && c.arch != "qwen3" && c.arch != "qwen3moe" &&
      c.arch != "gemma3" && c.arch != "phi3")
    fail("{}: architecture '{}' is not supported (supported: llama, qwen2, qwen2moe, qwen3, qwen3moe, gemma3, phi3)",
         f.path(), c.arch);
  c.name = f.get_string("general.name").value_or("");
  const std::string a = c.arch + ".";
  auto u32 = [&](const std::string& key) -> uint32_t {
    const uint64_t v = f.require_uint(a + key);
    if (v == 0 || v > UINT32_MAX) fail("{}: key '{}{}' = {} is out of range", f.path(), a, key, v);
    return uint32_t(v);
  };
  // Per-layer arrays (head counts, ffn sizes) are accepted when every layer agrees.
  auto u32_or_array = [&](const std::string& key) -> uint32_t {
    const GgufValue* v = f.find(a + key);
    if (v && v->type == GgufType::ARRAY) {
      auto arr = f.get_int_array(a + key);
      if (!arr || arr->empty()) fail("{}: key '{}{}' is an empty array", f.path(), a, key);
      for (int64_t x : *arr)
        if (x != (*arr)[0]) fail("{}: key '{}{}' varies per layer, which is not supported", f.path(), a, key);
      if ((*arr)[0] <= 0 || (*arr)[0] > int64_t(UINT32_MAX)) fail("{}: key '{}{}' = {} is out of range", f.path(), a, key, (*arr)[0]);
      return uint32_t((*arr)[0]);
    }
    return u32(key);
  };
  c.n_ctx_train = u32("context_length");
  c.n_embd = u32("embedding_length");
  c.n_layer = u32("block_count");
  if (c.n_layer == 0) fail("{}: block_count is 0", f.path());
  c.n_ff = u32_or_array("feed_forward_length");
  c.n_head = u32_or_array("attention.head_count");
  c.n_head_kv = f.find(a + "attention.head_count_kv") ? u32_or_array("attention.head_count_kv") : c.n_head;
  if (c.n_head % c.n_head_kv != 0)
    fail("{}: head_count {} is not a multiple of head_count_kv {}", f.path(), c.n_head, c.n_head_kv);
  c.head_dim = f.find(a + "attention.key_length") ? u32("attention.key_length") : c.n_embd / c.n_head;
  if (c.head_dim == 0)
    fail("{}: embedding_length {} is smaller than head_count {} (no attention.key_length)", f.path(), c.n_embd, c.n_head);
  if (f.find(a + "attention.value_length") && u32("attention.value_length") != c.head_dim)
    fail("{}: value_length differs from key_length, which is not supported", f.path());
  c.n_rot = f.find(a + "rope.dimension_count") ? u32("rope.dimension_count") : c.head_dim;
  if (c.n_rot > c.head_dim || c.n_rot % 2)
    fail("{}: rope.dimension_count {} does not fit head_dim {}", f.path(), c.n_rot, c.head_dim);
  // Real-valued hyper-parameters: NaN, infinities and values outside what the forward pass can
  // use are refused here (they would otherwise run and print NaN or nothing).
  auto real = [&](const std::string& key, double lo, double hi, bool lo_open, const char* want) -> std::optional<double> {
    const auto v = f.get_float(a + key);
    if (v && (!std::isfinite(*v) || *v < lo || (lo_open && *v == lo) || *v > hi))
      fail("{}: key '{}{}' = {:g} is out of range ({})", f.path(), a, key, *v, want);
    return v;
  };
  const auto eps = real("attention.layer_norm_rms_epsilon", 0.0, 1.0, true, "a small positive number such as 1e-5");
  if (!eps) fail("{}: missing required key '{}attention.layer_norm_rms_epsilon'", f.path(), a);
  c.rms_eps = float(*eps);
  if (c.rms_eps <= 0.f) fail("{}: key '{}attention.layer_norm_rms_epsilon' = {:g} underflows float32", f.path(), a, *eps);
  c.rope_base = float(real("rope.freq_base", 0.0, 1e12, true, "a positive number such as 10000").value_or(10000.0));
  // A scaling factor of 0 means none (llama.cpp's convention); negative ones are refused.
  const auto factor = real("rope.scaling.factor", 0.0, 1e6, false, "1 or more, or 0 for none");
  const auto lin = real("rope.scale_linear", 0.0, 1e6, false, "1 or more, or 0 for none");
  const std::string scaling_type = f.get_string(a + "rope.scaling.type").value_or("");
  if (!scaling_type.empty() && scaling_type != "none" && scaling_type != "linear")
    fail("{}: rope scaling '{}' is not supported (supported: none, linear)", f.path(), scaling_type);
  if (factor && *factor > 0 && scaling_type != "none") {
    c.rope_freq_scale = float(1.0 / *factor);
    c.rope_scaling = "linear";
  } else if (lin && *lin > 0) {
    c.rope_freq_scale = float(1.0 / *lin);
    c.rope_scaling = "linear";
  }
  c.n_ctx_orig = f.find(a + "rope.scaling.original_context_length") ? u32("rope.scaling.original_context_length") : c.n_ctx_train;
  c.rope_attn_factor = float(real("rope.scaling.attn_factor", 0.0, 100.0, true, "a positive number near 1").value_or(1.0));
  c.rope_neox = c.arch != "llama";
  c.attn_scale = 1.f / std::sqrt(float(c.head_dim));
  c.qk_norm = c.arch == "qwen3" || c.arch == "qwen3moe" || c.arch == "gemma3";
  c.fused_qkv_up = c.arch == "phi3";
  if ((c.arch == "qwen3moe" || c.arch == "qwen2moe") && !f.find(a + "expert_count"))
    fail("{}: arch {} without {}expert_count", f.path(), c.arch, a);
  if (f.find(a + "expert_count") && f.require_uint(a + "expert_count") > 0) {
    if (c.arch != "llama" && c.arch != "qwen2moe" && c.arch != "qwen3moe")
      fail("{}: mixtures of experts run for archs llama, qwen2moe and qwen3moe only (this file: {})", f.path(), c.arch);
    c.n_expert = u32("expert_count");
    // qwen3moe: the experts' FFN width (there is no dense FFN beside them)
    if (f.find(a + "expert_feed_forward_length")) c.n_ff = u32("expert_feed_forward_length");
    // qwen2moe: a shared expert beside the routed ones, and the routed weights not renormalised
    c.moe_norm_topk = c.arch != "qwen2moe";
    if (c.arch == "qwen2moe") c.n_ff_shared = u32("expert_shared_feed_forward_length");
    c.n_expert_used = f.find(a + "expert_used_count") ? u32("expert_used_count") : 0;
    if (c.n_expert > 256 || c.n_expert_used == 0 || c.n_expert_used > c.n_expert)
      fail("{}: expert_count {} and expert_used_count {} must satisfy 0 < used <= count <= 256", f.path(), c.n_expert,
           c.n_expert_used);
  }
  if (c.arch == "gemma3") {
    // llama.cpp's reading of a gemma3 file (the file holds RMSNorm weights with Gemma's +1 already added).
    c.embed_scale = std::sqrt(float(c.n_embd));
    c.post_norms = c.gelu_ffn = true;
    if (f.find(a + "attention.sliding_window")) {
      c.sliding_window = u32("attention.sliding_window");
      c.swa_pattern = f.find(a + "attention.sliding_window_pattern") ? u32("attention.sliding_window_pattern") : 6;
    }
    if (c.n_layer == 62) c.attn_scale = 1.f / std::sqrt(float(c.n_embd / c.n_head));  // 27B: query_pre_attn_scalar
  }
  if (f.find(a + "vocab_size")) c.n_vocab = u32("vocab_size");
  else if (const auto* toks = f.get_string_array("tokenizer.ggml.tokens")) c.n_vocab = uint32_t(toks->size());
  return c;
}

}  // namespace lamina
