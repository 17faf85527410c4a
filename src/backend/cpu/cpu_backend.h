// CPU backend: f32 activations in host memory, weights used in place from the GGUF mapping,
// matmuls on a thread pool with SIMD row dot products (vec_dot.h), an F16 or F32 KV cache.
#pragma once

#include "backend/backend.h"
#include "backend/cpu/gemm_amx.h"
#include "backend/cpu/page_buffer.h"
#include "backend/cpu/vec_dot.h"
#include "core/thread_pool.h"

#include <memory>
#include <unordered_map>
#include <vector>

namespace lamina {

class CpuBackend final : public Backend {
 public:
  ~CpuBackend() override;
  // exact_matmul: keep activations in f32 for quantised weights too (dequantise each weight
  // row, then an f32 dot) instead of quantising them to 8 bits; slower, used for checks.
  CpuBackend(int n_threads, bool exact_matmul = false, CpuIsa isa = detect_isa());
  std::string name() const override;
  int threads() const { return pool_.size(); }

  Weight load_weight(const GgufTensor& t, WeightUse use) override;
  size_t memory_available() const override;
  size_t memory_used() const override;  // weights, scratch and the KV cache's pages held now
  Tensor alloc(int64_t rows, int64_t cols) override;
  void reset_scratch() override;
  void init_kv_cache(int n_layer, int n_ctx, int kv_dim, GgmlType type) override;
  size_t kv_cache_bytes() const override;
  // With one sequence a window layer holds its window, the slack, a step and a pass at most.
  size_t kv_bytes_for(int n_ctx, int kv_dim, GgmlType type, std::span<const int> window, int pass_rows) const override;
  // One sequence's sliding-window layers (no KvLayout) give back the cache pages of positions no
  // later query sees: those before the window, less `positions` kept past it so that cutting the
  // conversation back by up to that many tokens (chat's re-rendered last turn) needs no
  // recomputation. Default 256.
  void set_window_slack(int positions) { window_slack_ = positions; }
  int kv_rewind_floor() const override;
  void kv_keep_rows(int window_rows) override;
  void set_kv_windows(std::span<const int> window, int pass_rows) override { kv_windows_.assign(window.begin(), window.end()); }
  void kv_restart() override;
  size_t kv_resident_bytes() const { return k_cache_.resident() + v_cache_.resident(); }  // held in memory now

  void embed(const Weight& table, std::span<const int32_t> tokens, Tensor out) override;
  void rmsnorm(Tensor x, const Weight& w, float eps, Tensor out) override;
  void matmul(const Weight& w, Tensor x, Tensor out) override;
  void matmul_multi(std::span<const Weight* const> w, Tensor x, std::span<const Tensor> out) override;
  void add_bias(Tensor x, const Weight& b) override;
  void add(Tensor x, Tensor y) override;
  void all_reduce_sum(Tensor t, Communicator& comm) override { comm.all_reduce_sum(t.data, size_t(t.rows * t.cols)); }
  void rope(Tensor x, int n_heads, int head_dim, std::span<const int32_t> pos, const RopeParams& p) override;
  void attention(int layer, Tensor q, Tensor k, Tensor v, std::span<const int32_t> pos,
                 const AttentionParams& p, Tensor out) override;
  void swiglu(Tensor gate, Tensor up) override;
  void geglu(Tensor gate, Tensor up) override;
  void scale(Tensor x, float s) override;
  void read(Tensor t, float* host) override;
  bool takes_kv_layout() const override { return true; }
  void set_kv_layout(const KvLayout* layout) override { layout_ = layout; }
  void copy_rows(Tensor src, std::span<const int32_t> rows, Tensor dst) override;
  bool runs_experts() const override { return true; }
  void add_rows_scaled(Tensor dst, Tensor src, std::span<const int32_t> rows, std::span<const float> scale) override;
  // A decode step's experts by a route (one row): the picks as the host computes them.
  bool routes_experts(int64_t rows, int64_t, int64_t) const override { return rows == 1; }
  void route_experts(Tensor logits, int k, bool renorm, Tensor route) override;

 private:
  struct Outliers {  // activations handled in f32 by matmul (see cpu_matmul.cpp)
    int n = 0;
    int32_t index[8];
    float value[8];
  };
  static void split_outliers(const float* x, int64_t n, std::vector<float>& rest, Outliers& o);

  // The cache slot of position p for row t (KvLayout), checked against the cache's size.
  // The cache slot of row t's position p (window: the layer's; a window layer's pages are its
  // window pool's blocks where the layout has them).
  int64_t kv_slot(int64_t t, int32_t p, int window = 0) const;
  // After a pass of one sequence whose last position is `last`: the pages of a window layer's
  // rows before last + 2 - window - window_slack_ go back (in steps of kGiveBackStep positions).
  void give_back_before_window(int layer, int32_t last, int window, size_t row_bytes);

  ThreadPool pool_;
  bool exact_ = false;
  const KvLayout* layout_ = nullptr;
  CpuIsa isa_;  // the dot-product kernels in use
  // Weights live in anonymous memory advised for transparent huge pages (see load_weight).
  struct Arena {
    uint8_t* base = nullptr;
    size_t size = 0, used = 0;
  };
  std::vector<Arena> arenas_;
  std::unordered_map<const void*, uint8_t*> loaded_;  // file bytes -> their copy
  uint8_t* arena_alloc(size_t bytes);
  // Scratch: a bump allocator over chunks kept across forward passes (no page faults per token).
  std::vector<std::vector<float>> scratch_;
  size_t scratch_used_ = 0;  // floats used in scratch_.back()
  std::vector<uint8_t> act_q_;                      // quantised activations for matmul
  std::vector<int32_t> act_corr_;                   // their offset corrections (VecDot::fn4c)
  AmxBuffer amx_tokens_;                            // and packed as AMX tiles (gemm_amx.h)
  std::vector<int32_t> amx_col_slot_;               // their outlier columns, numbered
  std::vector<Outliers> outliers_;                  // per activation row
  // KV cache: [layer][pos][kv_dim] for K and for V.
  GgmlType kv_type_ = GgmlType::F16;
  int kv_layers_ = 0, kv_ctx_ = 0, kv_dim_ = 0;
  PageBuffer k_cache_, v_cache_;  // [layer][n_ctx][kv_dim], pages committed as positions are written
  struct WindowKeep {
    int window = 0;
    int32_t kept_from = 0;  // the rows of positions before it may have been given back
  };
  std::vector<WindowKeep> window_keep_;  // per layer
  std::vector<int> kv_windows_;          // per layer, as set_kv_windows told (0: global)
  int window_slack_ = 256;
  static constexpr int kGiveBackStep = 64;
};

}  // namespace lamina
