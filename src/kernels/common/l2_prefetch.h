// Byte ranges a kernel asks the L2 to fetch for the kernel after it (cp.async.bulk.prefetch.L2,
// sm_90): a decode step's kernels read their weights one after another, and HBM idles at each
// boundary while the next kernel's blocks become resident, wait for their input and send their
// first loads. A kernel whose own loads are all in flight (a GEMV's last pass) or that streams
// almost nothing (decode attention) can fill that gap with the next matrix's first bytes.
//
// A span is `rows` items at base + i * stride, each `take` bytes (the last clipped so that no
// item passes base + extent). Strided spans name the leading bytes of many rows; a contiguous
// range is a span with stride = take. Every address and size is a multiple of 16 bytes.
#pragma once

#include <cstdint>

namespace lamina::kernels {

struct L2Span {
  const void* base = nullptr;
  int64_t rows = 0, stride = 0, extent = 0;
  uint32_t take = 0;
};

struct L2Prefetch {
  static constexpr int kMaxSpans = 4;
  L2Span span[kMaxSpans];
  int count = 0;
  // How the items are issued: one bulk prefetch each (the SM's TMA unit), or one
  // prefetch.global.L2 per 128-byte line from the thread itself (LAMINA_L2_MODE=line, A/B).
  bool lines = false;
  bool empty() const { return count == 0; }
  int64_t bytes() const;  // what the spans cover
  // Appends [base, base + bytes) as chunks of `chunk` bytes; false when no span is left. base
  // must be 16-byte aligned; bytes is rounded down to 16.
  bool add_range(const void* base, int64_t bytes, uint32_t chunk = 4096);
  // Appends the first `take` bytes (a multiple of 16) of `rows` rows `stride` bytes apart.
  bool add_rows(const void* base, int64_t rows, int64_t stride, uint32_t take);
};

}  // namespace lamina::kernels
