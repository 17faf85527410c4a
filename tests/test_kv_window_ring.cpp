// The arithmetic of the CUDA backend's rings of chunks (backend/kv_window_ring.h), simulated on the
// CPU: a sequence of prompt passes and decode steps backs and drops chunks as CudaKvMemory::prepare
// does, and each row is marked written or lost. Every row a pass's kernels read (its keys from a
// prompt tile of up to 128 rows below the window on) must be backed and written since it was
// backed; no run is longer than the ring; a conversation cut back to its floor or above reads only
// written rows, and a cut of up to 256 tokens after any step stays above the floor.
#include "backend/kv_window_ring.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

using namespace lamina;

namespace {

struct Layer {
  int window;
  size_t row_bytes, chunk;
  int64_t n_ctx;
};

struct Sim {
  Layer l;
  std::vector<bool> backed;   // per chunk
  std::vector<bool> written;  // per row: written while its chunks stayed backed
  kv_ring::Run run;

  explicit Sim(const Layer& x)
      : l(x), backed(size_t((size_t(x.n_ctx) * x.row_bytes + x.chunk - 1) / x.chunk), false), written(size_t(x.n_ctx), false) {}

  int64_t chunk_of(int64_t byte) const { return int64_t(size_t(byte) / l.chunk); }
  bool row_backed(int64_t r) const {
    for (int64_t c = chunk_of(r * int64_t(l.row_bytes)); c <= chunk_of((r + 1) * int64_t(l.row_bytes) - 1); ++c)
      if (!backed[size_t(c)]) return false;
    return true;
  }
  // prepare(lo, hi): chunks outside the run dropped (their rows lost), the run's backed.
  void prepare(int64_t lo, int64_t hi) {
    run = kv_ring::chunks(lo, hi, l.window, l.n_ctx, l.row_bytes, l.chunk);
    for (int64_t c = 0; c < int64_t(backed.size()); ++c) {
      const bool want = c >= run.c0 && c <= run.c1;
      if (backed[size_t(c)] && !want)
        for (int64_t r = 0; r < l.n_ctx; ++r)
          if (chunk_of(r * int64_t(l.row_bytes)) <= c && chunk_of((r + 1) * int64_t(l.row_bytes) - 1) >= c) written[size_t(r)] = false;
      backed[size_t(c)] = want;
    }
  }
  // A pass at lo .. hi: its rows written, then every query's keys read (from a 128-row tile below
  // its window on, as the prompt kernel may).
  void pass(int64_t lo, int64_t hi) {
    prepare(lo, hi);
    for (int64_t r = lo; r <= hi; ++r) {
      ASSERT_TRUE(row_backed(r)) << "row " << r << " written unbacked";
      written[size_t(r)] = true;
    }
    const int64_t from = std::max<int64_t>(0, lo + 1 - l.window - 127);
    for (int64_t r = from; r <= hi; ++r) ASSERT_TRUE(written[size_t(r)] && row_backed(r)) << "pass " << lo << ".." << hi << " reads row " << r;
    ASSERT_LE(size_t(run.c1 - run.c0 + 1), kv_ring::ring_chunks(l.window, 512, l.row_bytes, l.chunk));
  }
};

TEST(KvWindowRing, PassesReadOnlyRowsWrittenSinceBackedAndCutsBackAboveTheFloor) {
  // Gemma 3 270M (512 B rows, window 512), Gemma 3 12B (4 KiB rows, 1,024), a row size that does
  // not divide the chunk (1,536 B), and a window wider than a chunk.
  for (const Layer& l : {Layer{512, 512, 2 << 20, 16384}, Layer{1024, 4096, 2 << 20, 12288}, Layer{300, 1536, 2 << 20, 12288},
                         Layer{3000, 2048, 2 << 20, 16384}}) {
    Sim s(l);
    int64_t pos = 0;
    const int64_t prompt = l.n_ctx / 2;
    for (; pos < prompt; pos += 512) s.pass(pos, std::min(pos + 511, prompt - 1));
    pos = prompt;
    int64_t floor_seen = 0;
    for (int step = 0; step < 3000 && pos < l.n_ctx - 1; ++step, ++pos) {
      s.pass(pos, pos);
      const int64_t floor = kv_ring::rewind_floor(s.run.c0, l.window, l.row_bytes, l.chunk);
      floor_seen = std::max(floor_seen, floor);
      ASSERT_LE(floor, pos + 1 - 256) << "window " << l.window << ": a cut of 256 tokens after " << pos;
    }
    EXPECT_GT(floor_seen, 0) << "window " << l.window << ": the ring never moved";
    // Cut back to the floor: the next query's keys (and a prompt tile below them) were all
    // written while backed; a pass there leaves the run where it was or lower.
    const int64_t n = kv_ring::rewind_floor(s.run.c0, l.window, l.row_bytes, l.chunk);
    ASSERT_GT(n, 0);
    s.pass(n, n);
    // From the start again (the run moves back down): every read is of rows written anew.
    for (int64_t p = 0; p < 2048; p += 512) s.pass(p, p + 511);
  }
}

TEST(KvWindowRing, ARingIsShorterThanTheLayerOnlyPastItsWindow) {
  // Gemma 3 270M's local layer: a 2 MiB chunk holds 4,096 rows; window 512, passes of 512: 2 chunks.
  EXPECT_EQ(kv_ring::ring_chunks(512, 512, 512, 2 << 20), 2u);
  // Gemma 3 12B's: 512 rows a chunk, (1,024 + 256 + 256 + 512 + 16) rows: 4.03 chunks, 6 with the
  // one a run straddles.
  EXPECT_EQ(kv_ring::ring_chunks(1024, 512, 4096, 2 << 20), 6u);
  EXPECT_EQ(kv_ring::rewind_floor(0, 512, 512, 2 << 20), 0);
  EXPECT_EQ(kv_ring::rewind_floor(1, 512, 512, 2 << 20), 4096 + 511 + kv_ring::kSlackRows);
}

}  // namespace
