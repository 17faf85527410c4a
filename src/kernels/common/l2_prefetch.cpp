#include "kernels/common/l2_prefetch.h"

#include <algorithm>

namespace lamina::kernels {

int64_t L2Prefetch::bytes() const {
  int64_t total = 0;
  for (int s = 0; s < count; ++s) {
    const L2Span& sp = span[s];
    total += sp.stride == int64_t(sp.take) ? sp.extent : sp.rows * int64_t(sp.take);
  }
  return total;
}

bool L2Prefetch::add_range(const void* base, int64_t bytes, uint32_t chunk) {
  bytes -= bytes % 16;
  if (bytes <= 0 || chunk == 0 || chunk % 16) return true;  // nothing to add
  if (count == kMaxSpans) return false;
  span[count++] = L2Span{base, (bytes + chunk - 1) / chunk, int64_t(chunk), bytes, chunk};
  return true;
}

bool L2Prefetch::add_rows(const void* base, int64_t rows, int64_t stride, uint32_t take) {
  if (rows <= 0 || take == 0 || take % 16 || stride % 16) return true;
  if (int64_t(take) >= stride) return add_range(base, rows * stride);
  if (count == kMaxSpans) return false;
  span[count++] = L2Span{base, rows, stride, (rows - 1) * stride + take, take};
  return true;
}

}  // namespace lamina::kernels
