// CpuBackend::attention on every tier (the portable per-head path and the SIMD kernels of
// attention_cpu.h) against an fp64 softmax(q k^T) v over the cache's stored (rounded) K and V:
// f16 and f32 caches, head sizes the SIMD widths divide and ones they do not, groups of 1 to 10
// query heads per KV head (10: two kernel calls), a sliding window; and each token's result the
// same bits when it runs alone (one head per job) as in its prompt (a group per job), and on
// AVX2 as on AVX-512 (and on the scalar tier, where hd is a multiple of 8).
#include "backend/cpu/cpu_backend.h"
#include "core/half.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

using namespace lamina;

namespace {

struct Case {
  int n_head, n_head_kv, hd, window;
  GgmlType kv;
};

// The value the cache stores for x.
double stored(float x, GgmlType kv) { return kv == GgmlType::F16 ? double(f16_to_f32(f32_to_f16(x))) : double(x); }

}  // namespace

TEST(CpuAttention, EveryTierMatchesFp64AndTokensAlone) {
  const Case cases[] = {{9, 3, 64, 0, GgmlType::F16},  {8, 2, 128, 0, GgmlType::F32}, {10, 1, 32, 5, GgmlType::F16},
                        {4, 4, 72, 0, GgmlType::F16},  {6, 2, 36, 0, GgmlType::F32},  {16, 2, 80, 0, GgmlType::F16}};
  const int T = 13;
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (const Case& c : cases) {
    const int kv_dim = c.n_head_kv * c.hd, q_dim = c.n_head * c.hd;
    std::vector<float> q(size_t(T * q_dim)), k(size_t(T * kv_dim)), v(size_t(T * kv_dim));
    for (auto& x : q) x = nd(rng);
    for (auto& x : k) x = nd(rng);
    for (auto& x : v) x = nd(rng);
    std::vector<int32_t> pos(T);
    for (int t = 0; t < T; ++t) pos[size_t(t)] = t;
    AttentionParams p;
    p.n_head = c.n_head, p.n_head_kv = c.n_head_kv, p.head_dim = c.hd, p.window = c.window;
    p.scale = 1.f / std::sqrt(float(c.hd));
    // fp64 reference
    std::vector<double> ref(size_t(T * q_dim));
    const int group = c.n_head / c.n_head_kv;
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < c.n_head; ++h) {
        const int g = h / group, j0 = c.window > 0 ? std::max(0, t + 1 - c.window) : 0;
        std::vector<double> s;
        double mx = -INFINITY, sum = 0;
        for (int j = j0; j <= t; ++j) {
          double d = 0;
          for (int i = 0; i < c.hd; ++i)
            d += double(q[size_t(t * q_dim + h * c.hd + i)]) * stored(k[size_t(j * kv_dim + g * c.hd + i)], c.kv);
          s.push_back(d * p.scale), mx = std::max(mx, s.back());
        }
        for (auto& x : s) sum += (x = std::exp(x - mx));
        for (int i = 0; i < c.hd; ++i) {
          double o = 0;
          for (int j = j0; j <= t; ++j) o += s[size_t(j - j0)] / sum * stored(v[size_t(j * kv_dim + g * c.hd + i)], c.kv);
          ref[size_t(t * q_dim + h * c.hd + i)] = o;
        }
      }
    std::vector<float> simd;  // the first SIMD tier's outputs: the others give the same bits
    std::vector<float> scalar;  // the scalar tier's, where hd is a multiple of 8
    for (CpuIsa isa : {CpuIsa::Scalar, CpuIsa::Avx2, CpuIsa::Avx512}) {
      if (!cpu_runs(isa)) continue;
      // The prompt at once, then the same tokens one at a time on a fresh cache.
      std::vector<float> batch(size_t(T * q_dim), std::nanf("")), alone(size_t(T * q_dim), std::nanf(""));
      for (const bool one_by_one : {false, true}) {
        CpuBackend be(3, false, isa);
        be.init_kv_cache(1, 32, kv_dim, c.kv);
        std::vector<float>& out = one_by_one ? alone : batch;
        for (int t0 = 0; t0 < T; t0 += one_by_one ? 1 : T) {
          const int n = one_by_one ? 1 : T;
          Tensor tq{q.data() + t0 * q_dim, n, q_dim}, tk{k.data() + t0 * kv_dim, n, kv_dim},
              tv{v.data() + t0 * kv_dim, n, kv_dim}, to{out.data() + t0 * q_dim, n, q_dim};
          be.attention(0, tq, tk, tv, std::span<const int32_t>(pos.data() + t0, size_t(n)), p, to);
        }
      }
      double err = 0, ref2 = 0;
      for (size_t i = 0; i < ref.size(); ++i) err += (batch[i] - ref[i]) * (batch[i] - ref[i]), ref2 += ref[i] * ref[i];
      EXPECT_LT(std::sqrt(err / ref2), 1e-6) << isa_name(isa) << " hd=" << c.hd << " heads " << c.n_head << "/" << c.n_head_kv;
      EXPECT_EQ(std::memcmp(batch.data(), alone.data(), batch.size() * 4), 0)
          << isa_name(isa) << " hd=" << c.hd << ": a token alone differs from its prompt";
      // The portable kernel keeps the SIMD kernels' orders: their bits where hd is a multiple of 8.
      if (isa == CpuIsa::Scalar) {
        if (c.hd % 8 == 0) scalar = batch;
        continue;
      }
      if (simd.empty()) simd = batch;
      else EXPECT_EQ(std::memcmp(batch.data(), simd.data(), batch.size() * 4), 0) << isa_name(isa) << " hd=" << c.hd << ": not avx2's bits";
      if (!scalar.empty()) {
        EXPECT_EQ(std::memcmp(batch.data(), scalar.data(), batch.size() * 4), 0) << isa_name(isa) << " hd=" << c.hd << ": not the scalar tier's bits";
      }
    }
  }
}

// One sequence's window layer gives back the cache pages of the positions before its window
// (CpuBackend::set_window_slack 0): after 2,048 positions, layer 0 (window 8) holds a few pages
// and layer 1 (no window) all of its rows; the outputs are the bits of a backend that keeps every
// page (slack past the context), and the rewind floor follows the last position.
TEST(CpuAttention, WindowLayersGiveBackThePagesBeforeTheirWindow) {
  const int hd = 64, n_head = 4, n_head_kv = 2, kv_dim = n_head_kv * hd, q_dim = n_head * hd, T = 2048, window = 8;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> q(static_cast<size_t>(q_dim)), k(static_cast<size_t>(kv_dim)), v(static_cast<size_t>(kv_dim));
  CpuBackend keep(2), give(2);
  for (CpuBackend* be : {&keep, &give}) be->init_kv_cache(2, T, kv_dim, GgmlType::F16);
  keep.set_window_slack(T), give.set_window_slack(0);
  AttentionParams p;
  p.n_head = n_head, p.n_head_kv = n_head_kv, p.head_dim = hd, p.scale = 0.125f;
  std::vector<float> a(static_cast<size_t>(q_dim)), b(static_cast<size_t>(q_dim));
  for (int32_t t = 0; t < T; ++t) {
    for (auto* x : {&q, &k, &v})
      for (float& f : *x) f = nd(rng);
    for (int layer = 0; layer < 2; ++layer) {
      p.window = layer == 0 ? window : 0;
      const std::span<const int32_t> pos(&t, 1);
      keep.attention(layer, Tensor{q.data(), 1, q_dim}, Tensor{k.data(), 1, kv_dim}, Tensor{v.data(), 1, kv_dim}, pos, p,
                     Tensor{a.data(), 1, q_dim});
      give.attention(layer, Tensor{q.data(), 1, q_dim}, Tensor{k.data(), 1, kv_dim}, Tensor{v.data(), 1, kv_dim}, pos, p,
                     Tensor{b.data(), 1, q_dim});
      ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << "position " << t << " layer " << layer;
    }
  }
  const size_t layer_bytes = size_t(T) * size_t(kv_dim) * 2;  // one layer's K (or V) rows, f16
  EXPECT_GE(keep.kv_resident_bytes(), 4 * layer_bytes);
  EXPECT_GE(give.kv_resident_bytes(), 2 * layer_bytes);  // layer 1's K and V
  EXPECT_LE(give.kv_resident_bytes(), 2 * layer_bytes + 2 * size_t(window + 64 + 32) * size_t(kv_dim) * 2);
  EXPECT_LE(give.memory_used() + 2 * layer_bytes - 2 * size_t(window + 64 + 32) * size_t(kv_dim) * 2, keep.memory_used());
  // What the session's --ctx check counts (Backend::kv_bytes_for, one-row passes): the window
  // layer's rows as held (within a page of each end of K's and V's runs), every row when the
  // slack covers the context.
  const std::vector<int> windows{window, 0};
  EXPECT_LE(give.kv_resident_bytes(), give.kv_bytes_for(T, kv_dim, GgmlType::F16, windows, 1) + 4 * 4096);
  EXPECT_LT(give.kv_bytes_for(T, kv_dim, GgmlType::F16, windows, 1), 3 * layer_bytes);
  EXPECT_EQ(keep.kv_bytes_for(T, kv_dim, GgmlType::F16, windows, 1), 4 * layer_bytes);
  EXPECT_EQ(keep.kv_rewind_floor(), 0);
  EXPECT_GE(give.kv_rewind_floor(), T - 64);
  EXPECT_LE(give.kv_rewind_floor(), T);
  give.kv_restart();  // the sequence starts again: nothing given back counts any more
  EXPECT_EQ(give.kv_rewind_floor(), 0);
}
