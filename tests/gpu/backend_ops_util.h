// Helpers of the backend conformance tests (test_backend_gpu.cpp, test_backend_attention_gpu.cpp):
// random data, the relative L2 error, weights quantised to each type, and `Both`, one op's inputs on
// the CPU and the CUDA backend.
#pragma once

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"
#include "format/gguf.h"
#include "format/quant.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <span>
#include <vector>

namespace lamina::backend_ops_test {

inline double rel(const std::vector<float>& got, const std::vector<float>& want) {
  double e = 0, n = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    e += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    n += double(want[i]) * want[i];
  }
  return std::sqrt(e / std::max(n, 1e-30));
}

inline std::vector<float> randn(size_t n, std::mt19937& rng, float scale = 1.f) {
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// One op run on both backends: inputs uploaded, outputs compared.
// Options whose matmuls of up to `rows` rows run as GEMVs (the default sends more than 2 to the
// GEMM): the tests of every GEMV path at 3 to 8 rows ask for 8.
inline CudaOptions gemv_rows(int rows) {
  CudaOptions o;
  o.gemv_max_rows = rows;
  return o;
}

struct Both {
  explicit Both(const CudaOptions& o = {}) : gpu(0, false, o) {}
  CpuBackend cpu{4, true};
  CudaBackend gpu;

  Tensor put(Backend& be, const std::vector<float>& h, int64_t rows, int64_t cols) {
    Tensor t = be.alloc(rows, cols);
    if (&be == &cpu) std::copy(h.begin(), h.end(), t.data);
    else gpu.finish(), cudaMemcpy(t.data, h.data(), h.size() * 4, cudaMemcpyHostToDevice), cudaDeviceSynchronize();
    return t;
  }
  std::vector<float> get(Backend& be, Tensor t) {
    std::vector<float> h(size_t(t.rows * t.cols));
    be.read(t, h.data());
    return h;
  }
  // A weight from host bytes (a GgufTensor over them), loaded by both backends. The bytes are
  // kept: the CPU backend recognises a tensor it already holds by its address.
  std::vector<std::unique_ptr<std::vector<uint8_t>>> kept;
  std::pair<Weight, Weight> weight(GgmlType type, int64_t rows, int64_t cols, const std::vector<uint8_t>& src,
                                   WeightUse use = WeightUse::Matmul) {
    kept.push_back(std::make_unique<std::vector<uint8_t>>(src));
    const std::vector<uint8_t>& bytes = *kept.back();
    GgufTensor t;
    t.name = "w";
    t.n_dims = rows > 1 ? 2 : 1;
    t.ne[0] = cols, t.ne[1] = rows;
    t.type = type;
    t.nbytes = bytes.size();
    t.data = bytes.data();
    return {cpu.load_weight(t, use), gpu.load_weight(t, use)};
  }
  // Random q [rows][qd], k and v [rows][kvd], the same values on both backends.
  struct Qkv {
    Tensor qc, qg, kc, kg, vc, vg;
  };
  Qkv put_qkv(int rows, int qd, int kvd, std::mt19937& rng) {
    const auto qh = randn(size_t(rows * qd), rng), kh = randn(size_t(rows * kvd), rng), vh = randn(size_t(rows * kvd), rng);
    return {put(cpu, qh, rows, qd), put(gpu, qh, rows, qd), put(cpu, kh, rows, kvd),
            put(gpu, kh, rows, kvd), put(cpu, vh, rows, kvd), put(gpu, vh, rows, kvd)};
  }
  void begin(std::span<const int32_t> tokens, std::span<const int32_t> pos) {
    cpu.reset_scratch(), gpu.reset_scratch();
    cpu.begin_forward(tokens, pos), gpu.begin_forward(tokens, pos);
  }
};

inline std::vector<uint8_t> quantised(GgmlType t, int64_t rows, int64_t cols, std::mt19937& rng) {
  const std::vector<float> v = randn(size_t(rows * cols), rng);
  std::vector<uint8_t> b(row_bytes(t, cols) * size_t(rows));
  for (int64_t r = 0; r < rows; ++r) quantize_row(t, v.data() + r * cols, b.data() + size_t(r) * row_bytes(t, cols), cols);
  return b;
}

// Random `t` matrices of `rows[i]` x `cols` as GgufTensors over bytes the caller keeps.
inline std::vector<GgufTensor> random_matrices(GgmlType t, std::span<const int64_t> rows, int64_t cols,
                                        std::vector<std::vector<uint8_t>>& bytes, std::mt19937& rng) {
  std::vector<GgufTensor> ts(rows.size());
  bytes.clear();
  for (int64_t r : rows) bytes.push_back(quantised(t, r, cols, rng));
  for (size_t i = 0; i < rows.size(); ++i) {
    GgufTensor& g = ts[i];
    g.name = "w", g.n_dims = 2, g.ne[0] = cols, g.ne[1] = rows[i], g.type = t;
    g.nbytes = bytes[i].size(), g.data = bytes[i].data();
  }
  return ts;
}

inline std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

inline constexpr GgmlType kTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0,   GgmlType::Q4_0,
                           GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q2_K,   GgmlType::Q3_K,
                           GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS};

inline bool int8_x(GgmlType t) { return t != GgmlType::F32 && t != GgmlType::F16 && t != GgmlType::BF16; }

}  // namespace lamina::backend_ops_test
