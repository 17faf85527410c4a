// The CUDA backend's sliding-window layers on a ring of chunks (backend/cuda/cuda_kv_memory.h):
// attention over a long sequence against the CPU backend, pass by pass, while the ring moves up
// behind it, after a restart from position 0, through a pass longer than the ring was made for,
// and once every row is kept (the batching engine's pages); the memory it holds against the
// whole cache's.
#include "backend_ops_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

using namespace lamina;
using namespace lamina::backend_ops_test;

namespace {

struct Layers {
  int n_head = 8, n_head_kv = 4, head_dim = 256;  // rows of 2 KiB in f16: 1,024 in a 2 MiB chunk
  int kvd() const { return n_head_kv * head_dim; }
  int qd() const { return n_head * head_dim; }
};

// Passes of `sizes` rows from position `past` on, through layer 0 (a window of `window`) and
// layer 1 (global) of both backends; the largest relative L2 error of the outputs.
double run_passes(Both& b, const Layers& s, int window, int& past, std::initializer_list<int> sizes, int repeat,
                  std::mt19937& rng) {
  double worst = 0;
  for (int rep = 0; rep < repeat; ++rep)
    for (int rows : sizes) {
      std::vector<int32_t> pos(static_cast<size_t>(rows)), toks(static_cast<size_t>(rows), 0);
      for (int i = 0; i < rows; ++i) pos[size_t(i)] = past + i;
      b.begin(toks, pos);
      for (int layer : {0, 1}) {
        const AttentionParams ap{s.n_head, s.n_head_kv, s.head_dim, 1.f / std::sqrt(float(s.head_dim)),
                                 layer == 0 ? window : 0};
        const auto [qc, qg, kc, kg, vc, vg] = b.put_qkv(rows, s.qd(), s.kvd(), rng);
        Tensor oc = b.cpu.alloc(rows, s.qd()), og = b.gpu.alloc(rows, s.qd());
        b.cpu.attention(layer, qc, kc, vc, pos, ap, oc), b.gpu.attention(layer, qg, kg, vg, pos, ap, og);
        const double e = rel(b.get(b.gpu, og), b.get(b.cpu, oc));
        EXPECT_LE(e, rows > 8 ? 3e-3 : 1e-4) << "layer " << layer << " rows " << rows << " at " << past;
        worst = std::max(worst, e);
      }
      past += rows;
    }
  return worst;
}

TEST(CudaKvWindow, RingOfChunksAttendsAsTheWholeCache) {
  std::mt19937 rng(17);
  const Layers s;
  const int n_ctx = 8192, window = 300;
  Both b;
  const std::vector<int> windows{window, 0};
  b.gpu.set_kv_windows(windows, 64);
  b.cpu.init_kv_cache(2, n_ctx, s.kvd(), GgmlType::F16), b.gpu.init_kv_cache(2, n_ctx, s.kvd(), GgmlType::F16);
  const size_t whole = size_t(2) * 2 * n_ctx * s.kvd() * 2;  // K and V, two layers, f16
  const size_t held = b.gpu.kv_cache_bytes();
  // The global layer's 32 MiB and a ring of a few chunks (not the window layer's 32 MiB).
  EXPECT_LT(held, whole * 3 / 4) << "held " << held << " of " << whole;
  EXPECT_GE(held, whole / 2);
  EXPECT_EQ(b.gpu.kv_bytes_for(n_ctx, s.kvd(), GgmlType::F16, windows, 64), held) << "the estimate the session checks";

  // A prompt in 64-row passes, decode rows and small batches up to past 6,000 positions: the
  // ring moves about every 1,000 positions.
  int past = 0;
  double worst = run_passes(b, s, window, past, {64}, 30, rng);
  worst = std::max(worst, run_passes(b, s, window, past, {1, 1, 3, 1, 17, 1, 64, 64, 64, 1}, 15, rng));
  std::printf("ring of chunks, %d positions: largest rel. L2 against the CPU %.2e; holds %.1f of %.1f MiB\n", past,
              worst, held / 1048576.0, whole / 1048576.0);
  EXPECT_EQ(b.gpu.kv_cache_bytes(), held) << "passes within the ring's size allocated more";
  const int floor = b.gpu.kv_rewind_floor();
  EXPECT_GT(floor, window) << "the window layer still holds its first rows at " << past;
  EXPECT_LE(floor, past);

  // From position 0 again (the ring moves back down), then one pass longer than the ring's.
  b.cpu.kv_restart(), b.gpu.kv_restart();
  past = 0;
  run_passes(b, s, window, past, {64, 1, 1}, 3, rng);
  EXPECT_EQ(b.gpu.kv_rewind_floor(), 0);
  run_passes(b, s, window, past, {4000, 1, 1}, 1, rng);
  EXPECT_GT(b.gpu.kv_cache_bytes(), held) << "the 4,000-row pass needs more chunks than the ring had";

  // Every row kept from here on: the cache is the whole one (rounded up to chunks).
  b.gpu.kv_keep_rows(n_ctx);
  EXPECT_GE(b.gpu.kv_cache_bytes(), whole);
  EXPECT_EQ(b.gpu.kv_rewind_floor(), 0);
}

// Without window layers, and with the ring switched off, the cache is held whole.
TEST(CudaKvWindow, WholeCacheWithoutARing) {
  const Layers s;
  const int n_ctx = 8192;
  const size_t whole = size_t(2) * 2 * n_ctx * s.kvd() * 2;
  {
    CudaBackend gpu(0, false, CudaOptions{});
    gpu.init_kv_cache(2, n_ctx, s.kvd(), GgmlType::F16);
    EXPECT_EQ(gpu.kv_cache_bytes(), whole);
  }
  CudaOptions off;
  off.window_ring = false;
  CudaBackend gpu(0, false, off);
  const std::vector<int> windows{300, 0};
  gpu.set_kv_windows(windows, 64);
  gpu.init_kv_cache(2, n_ctx, s.kvd(), GgmlType::F16);
  EXPECT_EQ(gpu.kv_cache_bytes(), whole);
}

}  // namespace
