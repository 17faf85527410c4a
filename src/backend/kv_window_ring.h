// The arithmetic of a sliding-window layer's ring of chunks (backend/cuda/cuda_kv_memory.h): which
// chunks of the layer's address range a pass must have backed, how many chunks a ring needs, and
// the fewest tokens a sequence may be cut back to and still read its cache. Plain integers, no
// CUDA, so that the CPU test suite checks it (tests/test_kv_window_ring.cpp).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace lamina::kv_ring {

// Rows kept below a window: the prompt kernel reads whole key tiles (of at most 128 rows), the
// first of which may start before the window; and a conversation cut back by a few tokens (a chat
// turn re-tokenised) goes on from its cache instead of being evaluated again (the CPU backend
// keeps the same 256).
inline constexpr int64_t kSlackRows = 256;
inline constexpr int64_t kRewindRows = 256;
// Rows past a pass's last position kept backed (a decode step launched ahead writes the next).
inline constexpr int64_t kAheadRows = 16;

struct Run {
  int64_t c0 = 0, c1 = -1;  // chunks c0 .. c1 (empty while c1 < c0)
};

// The chunks a pass at positions lo .. hi of a layer with this window reads and writes, with the
// slack, the rewind room and the rows ahead; rows of row_bytes, chunks of `chunk` bytes.
inline Run chunks(int64_t lo, int64_t hi, int window, int64_t n_ctx, size_t row_bytes, size_t chunk) {
  const int64_t first = std::max<int64_t>(0, lo + 1 - window - kSlackRows - kRewindRows);
  const int64_t last = std::min<int64_t>(n_ctx - 1, hi + kAheadRows);
  return {int64_t(size_t(first) * row_bytes / chunk), int64_t((size_t(last + 1) * row_bytes - 1) / chunk)};
}

// Chunks a ring needs for passes of up to pass_rows rows: the longest run chunks() returns.
inline size_t ring_chunks(int window, int pass_rows, size_t row_bytes, size_t chunk) {
  const int64_t rows = window + kSlackRows + kRewindRows + std::max(pass_rows, 1) + kAheadRows;
  return (size_t(rows) * row_bytes + chunk - 1) / chunk + 1;  // (+1: a run straddles chunks' ends)
}

// The fewest tokens a sequence whose backed run starts at chunk c0 may be cut back to: the query
// at position n reads from n + 1 - window on, and the prompt kernel a tile below that (masked,
// but a chunk mapped anew holds any bits, NaN among them, which the probabilities' zeros would
// not cancel in P V), so the slack too must lie in rows kept since they were written.
inline int64_t rewind_floor(int64_t c0, int window, size_t row_bytes, size_t chunk) {
  if (c0 <= 0) return 0;
  const int64_t kept = int64_t((size_t(c0) * chunk + row_bytes - 1) / row_bytes);  // the first whole row
  return kept + window - 1 + kSlackRows;
}

}  // namespace lamina::kv_ring
