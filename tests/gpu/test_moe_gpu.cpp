// A mixture of experts' decode kernels: the router (moe_route) against the host's route_top_k,
// the experts' GEMVs by route (gemv_experts) against a CPU fp64 reference on every weight type,
// and the weighted sum (add_routed) against the host's fmaf chain, outputs poisoned.
#include "backend/moe_route.h"
#include "gemv_test_util.h"
#include "gpu_test_util.h"
#include "format/quant.h"
#include "kernels/common/q8_blocks.h"
#include "kernels/gemv/gemv.h"
#include "kernels/gemv/gemv_experts_grouped.h"
#include "kernels/ops/ops.h"
#include "x8_host.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <tuple>
#include <random>

using namespace lamina;
using namespace lamina::kernels;
using namespace lamina::gemv_test;

namespace {

// Routes of random logits (some rows with ties, one row all equal) for expert counts up to 256
// and picks up to 32: the same ids as the host, weights within a rounding of expf.
TEST(MoeRoute, MatchesTheHostRoute) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.f, 2.f);
  struct Shape { int n_expert, k; };
  for (const Shape s : {Shape{4, 2}, Shape{8, 2}, Shape{60, 4}, Shape{128, 8}, Shape{256, 32}, Shape{33, 32}, Shape{1, 1}})
    for (bool renorm : {true, false}) {
      SCOPED_TRACE(testing::Message() << s.n_expert << " experts, " << s.k << " picks, renorm " << renorm);
      const int64_t rows = 5;
      std::vector<float> logits(size_t(rows * s.n_expert));
      for (auto& v : logits) v = nd(rng);
      for (int e = 0; e < s.n_expert; e += 3) logits[size_t(s.n_expert + e)] = 0.5f;  // row 1: ties
      for (int e = 0; e < s.n_expert; ++e) logits[size_t(2 * s.n_expert + e)] = -1.f;  // row 2: all equal
      DeviceBuf dl(logits), dout(size_t(rows * 2 * s.k + 8) * 4);
      CUDA_OK(cudaMemset(dout.p, 0xFF, dout.n));
      const Status st = moe_route(dl.as<float>(), rows, s.n_expert, s.k, renorm, dout.as<float>(), nullptr);
      ASSERT_TRUE(st.ok) << st.message;
      std::vector<float> got(dout.n / 4);
      CUDA_OK(cudaMemcpy(got.data(), dout.p, dout.n, cudaMemcpyDeviceToHost));
      std::vector<int32_t> ids(size_t(s.k));
      std::vector<float> w(size_t(s.k));
      for (int64_t r = 0; r < rows; ++r) {
        route_top_k(&logits[size_t(r * s.n_expert)], s.n_expert, s.k, renorm, ids.data(), w.data());
        const float* o = &got[size_t(r * 2 * s.k)];
        for (int j = 0; j < s.k; ++j) {
          int32_t id = 0;
          std::memcpy(&id, &o[j], 4);
          ASSERT_EQ(id, ids[size_t(j)]) << "row " << r << " pick " << j;
          ASSERT_NEAR(o[s.k + j], w[size_t(j)], 1e-6 * w[size_t(j)] + 1e-12) << "row " << r << " pick " << j;
        }
      }
      for (size_t i = size_t(rows * 2 * s.k); i < got.size(); ++i) ASSERT_TRUE(std::isnan(got[i])) << "wrote past the route";
    }
  // NaN logits (a broken file): still k distinct experts of the row, so that no expert matmul reads
  // outside its table.
  for (const int n_expert : {8, 128}) {
    const int k = 8;
    std::vector<float> logits(static_cast<size_t>(n_expert), std::nanf(""));
    logits[3] = 1.f;
    DeviceBuf dl(logits), dout(size_t(2 * k) * 4);
    ASSERT_TRUE(moe_route(dl.as<float>(), 1, n_expert, k, true, dout.as<float>(), nullptr).ok);
    std::vector<int32_t> ids(static_cast<size_t>(2 * k));
    CUDA_OK(cudaMemcpy(ids.data(), dout.p, dout.n, cudaMemcpyDeviceToHost));
    for (int j = 0; j < k; ++j) {
      EXPECT_GE(ids[size_t(j)], 0);
      EXPECT_LT(ids[size_t(j)], n_expert);
      if (j) EXPECT_LT(ids[size_t(j - 1)], ids[size_t(j)]) << "ascending and distinct";
    }
  }
  EXPECT_FALSE(moe_route(nullptr, 1, 8, 2, true, nullptr, nullptr).ok);
  DeviceBuf d(4096);
  EXPECT_FALSE(moe_route(d.as<float>(), 1, 300, 2, true, d.as<float>(), nullptr).ok) << "more than 256 experts";
  EXPECT_FALSE(moe_route(d.as<float>(), 1, 64, 40, true, d.as<float>(), nullptr).ok) << "more than 32 picks";
}

// y[g] = W_{ids[g]} x_g (or the gate/up pair's silu(W x) * (W_up x)) for picks in any order, an
// expert picked twice by one token, n not a multiple of a block's 16 or 32 rows, k = 512 and 1536
// (one matrix: the short rows' shape and the long), ids in route rows of
// 2 picks (2 tokens x 2 picks), one token of 4, and 7 tokens x 3 picks that all pick expert 2
// (more pairs than the grouped kernel multiplies at once): the fp64 reference of the same
// int8-rounded x, within q_dp4a's bound, from both launches (gemv_experts, a block row a pair;
// gemv_experts_grouped, a block row an expert), whose outputs are also the same bits.
TEST(GemvExperts, MatchesFp64ReferenceOnePerPairAndGrouped) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.f, 1.f);
  const int n_expert = 5;
  struct Layout {
    int tokens, picks;
    std::vector<int32_t> route;  // tokens rows of [picks ids | picks slots the kernel does not read]
  };
  const Layout layouts[] = {{1, 4, {4, 0, 2, 4, -1, -1, -1, -1}},
                            {2, 2, {3, 1, -1, -1, 4, 3, -1, -1}},
                            {7, 3, {2, 0, 1, -1, -1, -1, 4, 2, 3, -1, -1, -1, 2, 1, 0, -1, -1, -1, 3, 4, 2, -1, -1, -1,
                                    0, 2, 4, -1, -1, -1, 2, 3, 1, -1, -1, -1, 1, 0, 2, -1, -1, -1}}};
  for (const Layout& lay : layouts)
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::IQ4_NL,
                     GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ4_XS})
    for (bool gate_up : {true, false})
    for (int64_t k : {int64_t(512), int64_t(1536)}) {  // (one matrix: rows of <= 32 chunks take 4 rows a warp)
      const int64_t n = 72;
      const int groups = lay.tokens * lay.picks;
      const auto id_of = [&](int g) { return lay.route[size_t(g / lay.picks * 2 * lay.picks + g % lay.picks)]; };
      SCOPED_TRACE(testing::Message() << type_name(t) << (gate_up ? " gate/up" : " one matrix") << ", k " << k << ", " << lay.tokens
                                      << " tokens x " << lay.picks << " picks");
      ASSERT_TRUE(gemv_experts_supports(t, k));
      // Each expert's matrices, repacked on the device; the tables of their addresses.
      std::vector<std::vector<uint8_t>> w, wu;
      std::vector<std::unique_ptr<DeviceBuf>> dw, dwu;
      std::vector<const void*> tw, twu;
      for (int e = 0; e < n_expert; ++e) {
        w.push_back(random_matrix(t, n, k, rng));
        wu.push_back(random_matrix(t, n, k, rng));
        for (auto [host, dev, table] : {std::tuple{&w.back(), &dw, &tw}, std::tuple{&wu.back(), &dwu, &twu}}) {
          DeviceBuf raw(*host);
          dev->push_back(std::make_unique<DeviceBuf>(gemv_repacked_bytes(t, n, k)));
          ASSERT_TRUE(gemv_repack(t, raw.p, n, k, dev->back()->p, nullptr).ok);
          table->push_back(dev->back()->p);
        }
      }
      CUDA_OK(cudaDeviceSynchronize());
      // x: a row a token for the pair, one a (token, pick) otherwise; outliers as models have them.
      const int xrows = gate_up ? lay.tokens : groups;
      std::vector<float> x(size_t(xrows * k));
      for (size_t i = 0; i < x.size(); ++i) x[i] = nd(rng) * (i % 37 == 5 ? 30.f : 1.f);
      std::vector<float> xr = x;  // (host_x8 writes the rounded values in place)
      host_x8(x, k, &xr);
      DeviceBuf dx(x), dids(lay.route), dtw(tw), dtwu(twu);
      GemvExperts p;
      p.wtype = t;
      p.w = dtw.as<const void*>();
      p.w_up = gate_up ? dtwu.as<const void*>() : nullptr;
      p.ids = dids.as<int32_t>();
      p.groups = groups, p.picks = lay.picks, p.ids_stride = 2 * lay.picks;
      p.n = n, p.k = k;
      p.x = dx.as<float>(), p.x_share = gate_up ? lay.picks : 1, p.x_stride = k;
      std::vector<float> outs[2];
      for (int grouped = 0; grouped < 2; ++grouped) {
        SCOPED_TRACE(grouped ? "grouped" : "a block row a pair");
        DeviceBuf dy(size_t(groups * n + 32) * 4);
        CUDA_OK(cudaMemset(dy.p, 0xFF, dy.n));
        p.y = dy.as<float>();
        const Status st = grouped ? gemv_experts_grouped(p, n_expert, nullptr) : gemv_experts(p, nullptr);
        ASSERT_TRUE(st.ok) << st.message;
        CUDA_OK(cudaDeviceSynchronize());
        std::vector<float>& got = outs[grouped];
        got.resize(dy.n / 4);
        CUDA_OK(cudaMemcpy(got.data(), dy.p, dy.n, cudaMemcpyDeviceToHost));
        std::vector<float> wd(static_cast<size_t>(k)), wud(static_cast<size_t>(k));
        const size_t rb = row_bytes(t, k);
        for (int g = 0; g < groups; ++g) {
          const float* xg = &xr[size_t((gate_up ? g / lay.picks : g) * k)];
          for (int64_t r = 0; r < n; ++r) {
            dequantize_row(t, w[size_t(id_of(g))].data() + size_t(r) * rb, wd.data(), k);
            dequantize_row(t, wu[size_t(id_of(g))].data() + size_t(r) * rb, wud.data(), k);
            double a = 0, u = 0, m = 0;
            for (int64_t i = 0; i < k; ++i) {
              a += double(wd[size_t(i)]) * xg[i], u += double(wud[size_t(i)]) * xg[i];
              m += std::fabs(double(wd[size_t(i)]) * xg[i]) + std::fabs(double(wud[size_t(i)]) * xg[i]);
            }
            const double want = gate_up ? a / (1.0 + std::exp(-a)) * u : a;
            const double mag = gate_up ? m * (1.0 + std::fabs(u)) : m;
            ASSERT_NEAR(got[size_t(g * n + r)], want, 2e-5 * mag + 1e-5) << "pick " << g << " row " << r;
          }
        }
        for (size_t i = size_t(groups * n); i < got.size(); ++i) ASSERT_TRUE(std::isnan(got[i])) << "wrote past y";
      }
      for (size_t i = 0; i < size_t(groups * n); ++i)
        ASSERT_EQ(std::memcmp(&outs[0][i], &outs[1][i], 4), 0) << "pair " << i / size_t(n) << " row " << i % size_t(n)
                                                               << ": " << outs[0][i] << " one a pair, " << outs[1][i]
                                                               << " grouped";
    }
  GemvExperts bad;
  EXPECT_FALSE(gemv_experts(bad, nullptr).ok);
  EXPECT_FALSE(gemv_experts_grouped(bad, 8, nullptr).ok);
  EXPECT_FALSE(gemv_experts_supports(GgmlType::F16, 512));
  EXPECT_FALSE(gemv_experts_supports(GgmlType::Q4_K, 128)) << "K-quants need k a multiple of 256";
}

// Many tokens over many experts (Qwen3-30B-A3B's 128 experts, 8 picks; 48 tokens, each picking
// expert 0 and 7 of experts 1..39: those picked several times, 40..127 by none, expert 0 by every
// token): the grouped launch writes every output and gives the one-a-pair launch's bits, q4_0 and
// q4_K, gate/up and one matrix.
TEST(GemvExperts, GroupedGivesTheOnePerPairBitsAtScale) {
  std::mt19937 rng(17);
  std::normal_distribution<float> nd(0.f, 1.f);
  const int n_expert = 128, picked = 40, picks = 8, tokens = 48, groups = tokens * picks;
  const int64_t n = 96, k = 768;
  std::vector<int32_t> route(size_t(tokens * 2 * picks), -1);
  std::vector<int32_t> others(static_cast<size_t>(picked - 1));
  for (int e = 1; e < picked; ++e) others[size_t(e - 1)] = e;
  for (int t = 0; t < tokens; ++t) {
    std::shuffle(others.begin(), others.end(), rng);
    int32_t* ids = &route[size_t(t * 2 * picks)];
    ids[0] = 0;
    std::copy_n(others.begin(), picks - 1, ids + 1);
    std::sort(ids, ids + picks);
  }
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q4_K})
    for (bool gate_up : {true, false}) {
      SCOPED_TRACE(testing::Message() << type_name(t) << (gate_up ? " gate/up" : " one matrix"));
      std::vector<std::unique_ptr<DeviceBuf>> mats;
      std::vector<const void*> tw, twu;
      for (int e = 0; e < 2 * picked; ++e) {
        DeviceBuf raw(random_matrix(t, n, k, rng));
        mats.push_back(std::make_unique<DeviceBuf>(gemv_repacked_bytes(t, n, k)));
        ASSERT_TRUE(gemv_repack(t, raw.p, n, k, mats.back()->p, nullptr).ok);
        CUDA_OK(cudaDeviceSynchronize());
      }
      for (int e = 0; e < n_expert; ++e) {  // (experts past `picked` are never read)
        tw.push_back(mats[size_t(e % picked)]->p);
        twu.push_back(mats[size_t(picked + e % picked)]->p);
      }
      std::vector<float> x(size_t((gate_up ? tokens : groups) * k));
      for (auto& v : x) v = nd(rng);
      DeviceBuf dx(x), dids(route), dtw(tw), dtwu(twu);
      GemvExperts p;
      p.wtype = t;
      p.w = dtw.as<const void*>();
      p.w_up = gate_up ? dtwu.as<const void*>() : nullptr;
      p.ids = dids.as<int32_t>();
      p.groups = groups, p.picks = picks, p.ids_stride = 2 * picks;
      p.n = n, p.k = k;
      p.x = dx.as<float>(), p.x_share = gate_up ? picks : 1, p.x_stride = k;
      std::vector<float> outs[2];
      for (int grouped = 0; grouped < 2; ++grouped) {
        DeviceBuf dy(size_t(groups * n) * 4);
        CUDA_OK(cudaMemset(dy.p, 0xFF, dy.n));
        p.y = dy.as<float>();
        const Status st = grouped ? gemv_experts_grouped(p, n_expert, nullptr) : gemv_experts(p, nullptr);
        ASSERT_TRUE(st.ok) << st.message;
        outs[grouped].resize(dy.n / 4);
        CUDA_OK(cudaMemcpy(outs[grouped].data(), dy.p, dy.n, cudaMemcpyDeviceToHost));
      }
      for (size_t i = 0; i < outs[0].size(); ++i) {
        ASSERT_FALSE(std::isnan(outs[1][i])) << "pair " << i / size_t(n) << " row " << i % size_t(n) << " not written";
        ASSERT_EQ(std::memcmp(&outs[0][i], &outs[1][i], 4), 0) << "pair " << i / size_t(n) << " row " << i % size_t(n);
      }
    }
}

// y[t] += w_tj d[t k + j] in pick order, one fmaf each: the host's chain, bit for bit, for 3 rows.
TEST(AddRouted, IsTheFmafChainInOrder) {
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.f, 1.f);
  const int k = 8;
  const int64_t rows = 3, cols = 2049;
  std::vector<float> y(static_cast<size_t>(rows * cols)), d(static_cast<size_t>(rows * k * cols)),
      route(static_cast<size_t>(rows * 2 * k));
  for (auto& v : y) v = nd(rng);
  for (auto& v : d) v = nd(rng);
  for (auto& v : route) v = std::fabs(nd(rng));  // (the ids are not read)
  DeviceBuf dy(y), dd(d), dr(route);
  const Status st = add_routed(dy.as<float>(), dd.as<float>(), rows, cols, dr.as<float>(), k, nullptr);
  ASSERT_TRUE(st.ok) << st.message;
  std::vector<float> got(y.size());
  CUDA_OK(cudaMemcpy(got.data(), dy.p, dy.n, cudaMemcpyDeviceToHost));
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t c = 0; c < cols; ++c) {
      float v = y[size_t(t * cols + c)];
      for (int j = 0; j < k; ++j) v = std::fmaf(route[size_t(t * 2 * k + k + j)], d[size_t((t * k + j) * cols + c)], v);
      ASSERT_EQ(got[size_t(t * cols + c)], v) << "row " << t << " column " << c;
    }
  EXPECT_FALSE(add_routed(nullptr, dd.as<float>(), rows, cols, dr.as<float>(), k, nullptr).ok);
}

}  // namespace
