// The host's int8 blocks of activations (kernels/common/q8_blocks.h), computed from the layout's
// rule independently of the device code: each block of 32 finds its largest |x| a1 (the first of
// equals) and the largest of the other 31, a2; the step is d = max(a2, a1 * kX8StepFloor) / 127;
// every element is round-half-away(x / d), the largest kept apart as the wide integer Q (0 in q).
#pragma once

#include "kernels/common/q8_blocks.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

// The facts of block `blk` of one x8 row, read back from its bytes.
inline lamina::kernels::X8Facts host_x8_facts(const uint8_t* row, int64_t k, int64_t blk) {
  lamina::kernels::X8Facts f;
  std::memcpy(&f, row + k + blk * int64_t(sizeof f), sizeof f);
  return f;
}

// Rows of x [rows][k] as x8 rows. When `rounded` is given, it receives the values the blocks
// stand for: d * q, and d * Q for the largest element.
inline std::vector<uint8_t> host_x8(const std::vector<float>& x, int64_t k, std::vector<float>* rounded = nullptr) {
  const size_t rows = x.size() / size_t(k);
  const int64_t nb = k / 32;
  std::vector<uint8_t> out(rows * lamina::kernels::x8_bytes(k));
  for (size_t blk = 0; blk < x.size() / 32; ++blk) {
    const float* v = &x[blk * 32];
    int m = 0;
    for (int j = 1; j < 32; ++j)
      if (std::fabs(v[j]) > std::fabs(v[m])) m = j;
    float a2 = 0;
    for (int j = 0; j < 32; ++j)
      if (j != m) a2 = std::max(a2, std::fabs(v[j]));
    const float d = std::max(a2, std::fabs(v[m]) * lamina::kernels::kX8StepFloor) / 127.f, id = d != 0.f ? 1.f / d : 0.f;
    const size_t b = blk / size_t(nb), j0 = blk % size_t(nb);
    uint8_t* row = out.data() + b * lamina::kernels::x8_bytes(k);
    lamina::kernels::X8Facts f{d, m, 0, 0};
    for (int j = 0; j < 32; ++j) {
      const int q = int(std::roundf(v[j] * id));
      row[j0 * 32 + size_t(j)] = uint8_t(int8_t(j == m ? 0 : q));
      if (j == m) f.big = q;
      f.sum += q;
      if (rounded) (*rounded)[blk * 32 + size_t(j)] = d * float(q);
    }
    std::memcpy(row + k + int64_t(j0) * int64_t(sizeof f), &f, sizeof f);
  }
  return out;
}
