// Model hyper-parameters read from GGUF metadata ({arch}.* keys, formats.md §1.2).
#pragma once

#include <cstdint>
#include <string>

namespace lamina {

class GgufFile;

struct ModelConfig {
  std::string arch;          // "llama" or "qwen2"
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
  bool rope_neox = false;       // qwen2: NEOX pairs (i, i+n/2); llama: adjacent pairs

  // Reads and validates the config; throws lamina::Error naming the key that is missing or bad.
  static ModelConfig from_gguf(const GgufFile& f);
};

}  // namespace lamina
