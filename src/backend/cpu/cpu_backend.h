// CPU backend: f32 activations in host memory, weights used in place from the GGUF mapping,
// matmuls on a thread pool with SIMD row dot products (vec_dot.h), an F16 or F32 KV cache.
#pragma once

#include "backend/backend.h"
#include "backend/cpu/thread_pool.h"

#include <memory>
#include <vector>

namespace lamina {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int n_threads);
  std::string name() const override;
  int threads() const { return pool_.size(); }

  Weight load_weight(const GgufTensor& t) override;
  Tensor alloc(int64_t rows, int64_t cols) override;
  void reset_scratch() override;
  void init_kv_cache(int n_layer, int n_ctx, int kv_dim, GgmlType type) override;
  size_t kv_cache_bytes() const override;

  void embed(const Weight& table, std::span<const int32_t> tokens, Tensor out) override;
  void rmsnorm(Tensor x, const Weight& w, float eps, Tensor out) override;
  void matmul(const Weight& w, Tensor x, Tensor out) override;
  void add_bias(Tensor x, const Weight& b) override;
  void add(Tensor x, Tensor y) override;
  void rope(Tensor x, int n_heads, int head_dim, std::span<const int32_t> pos, const RopeParams& p) override;
  void attention(int layer, Tensor q, Tensor k, Tensor v, std::span<const int32_t> pos,
                 const AttentionParams& p, Tensor out) override;
  void swiglu(Tensor gate, Tensor up) override;
  void read(Tensor t, float* host) override;

 private:
  ThreadPool pool_;
  std::vector<std::unique_ptr<float[]>> scratch_;  // blocks handed out by alloc()
  std::vector<uint8_t> act_q_;                      // quantised activations for matmul
  // KV cache: [layer][pos][kv_dim] for K and for V.
  GgmlType kv_type_ = GgmlType::F16;
  int kv_layers_ = 0, kv_ctx_ = 0, kv_dim_ = 0;
  std::vector<uint8_t> k_cache_, v_cache_;
};

}  // namespace lamina
