// Helpers shared by the GEMV tests (test_gemv_gpu.cpp, test_gemv_epilogue_gpu.cpp): random
// weights of a type, and the host RMSNorm the fused prologues are checked against.
#pragma once

#include "format/quant.h"

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace lamina::gemv_test {

inline std::vector<uint8_t> random_matrix(GgmlType t, int64_t n, int64_t k, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> row(static_cast<size_t>(k));
  const size_t rb = row_bytes(t, k);
  std::vector<uint8_t> out(rb * size_t(n));
  for (int64_t r = 0; r < n; ++r) {
    for (auto& v : row) v = nd(rng);
    quantize_row(t, row.data(), out.data() + size_t(r) * rb, k);  // (every type the tests list has a quantiser)
  }
  return out;
}

// rmsnorm(x) * w per row of k, as ops' rmsnorm and the GEMVs' fused prologue compute it (sum of
// squares in f64, scale = 1 / sqrt(mean + eps) rounded to f32, v = x * scale * w in f32).
inline std::vector<float> host_rmsnorm(const std::vector<float>& x, const std::vector<float>& w, int64_t k, float eps) {
  std::vector<float> out(x.size());
  for (size_t r = 0; r < x.size() / size_t(k); ++r) {
    double ss = 0;
    for (int64_t i = 0; i < k; ++i) ss += double(x[r * size_t(k) + size_t(i)]) * x[r * size_t(k) + size_t(i)];
    const float scale = float(1.0 / std::sqrt(ss / double(k) + double(eps)));
    for (int64_t i = 0; i < k; ++i) out[r * size_t(k) + size_t(i)] = x[r * size_t(k) + size_t(i)] * scale * w[size_t(i)];
  }
  return out;
}

}  // namespace lamina::gemv_test
