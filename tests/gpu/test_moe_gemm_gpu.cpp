// A mixture of experts' prompt kernels: the router's matmul over many rows (router_matmul)
// against an fp64 reference, the route's pairs sorted by expert (moe_sort) against a host sort,
// and the grouped GEMM over every expert's rows (gemm_experts, with gather_rows_f16
// and scatter_rows around it) against a CPU fp64 reference, outputs poisoned.
#include "gemv_test_util.h"
#include "gpu_test_util.h"
#include "format/quant.h"
#include "kernels/gemm/gemm.h"
#include "kernels/gemm/gemm_experts.h"
#include "kernels/gemv/gemv.h"
#include "kernels/ops/ops.h"
#include "kernels/ops/moe_router.h"
#include "kernels/ops/moe_slots.h"

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <tuple>

using namespace lamina;
using namespace lamina::kernels;
using namespace lamina::gemv_test;

namespace {

// A route [tokens][2 picks] as moe_route writes it: the ids' int32 bits, then weights (unread here).
std::vector<float> route_rows(const std::vector<int32_t>& ids, int picks) {
  const size_t tokens = ids.size() / size_t(picks);
  std::vector<float> r(tokens * 2 * size_t(picks), 0.25f);
  for (size_t t = 0; t < tokens; ++t)
    for (int j = 0; j < picks; ++j) std::memcpy(&r[t * 2 * size_t(picks) + size_t(j)], &ids[t * size_t(picks) + size_t(j)], 4);
  return r;
}

// Random distinct picks a token among n_expert, some experts crowded (every token picks expert
// 1 when `crowd`) and some never picked.
std::vector<int32_t> random_ids(int tokens, int picks, int n_expert, bool crowd, std::mt19937& rng) {
  std::vector<int32_t> ids;
  std::vector<int32_t> all(static_cast<size_t>(n_expert));
  for (int e = 0; e < n_expert; ++e) all[size_t(e)] = e;
  for (int t = 0; t < tokens; ++t) {
    std::shuffle(all.begin() + 2, all.end(), rng);  // (experts 0 never, 1 only by the crowd)
    std::vector<int32_t> row(all.begin() + 2, all.begin() + 2 + picks);
    if (crowd) row[0] = 1;
    std::sort(row.begin(), row.end());
    ids.insert(ids.end(), row.begin(), row.end());
  }
  return ids;
}

struct Sorted {
  std::vector<int32_t> slot_pair, tiles;
  int32_t count = -1;
};

// moe_sort on the device, read back; its outputs poisoned before.
Sorted sort_on_device(const std::vector<float>& route, int tokens, int picks, int n_expert, int tile_rows) {
  const int64_t pairs = int64_t(tokens) * picks, max_tiles = pairs / tile_rows + n_expert;
  DeviceBuf dr(route), dsp(size_t(pairs) * 4), dt(size_t(max_tiles) * 16), dc(4);
  cudaMemset(dsp.p, 0xFF, dsp.n), cudaMemset(dt.p, 0xFF, dt.n), cudaMemset(dc.p, 0xFF, dc.n);
  Sorted s;
  const Status st = moe_sort(dr.as<float>(), tokens, picks, n_expert, tile_rows, dsp.as<int32_t>(), dt.as<int32_t>(),
                             dc.as<int32_t>(), nullptr);
  EXPECT_TRUE(st.ok) << st.message;
  s.slot_pair.resize(size_t(pairs)), s.tiles.resize(size_t(max_tiles) * 4);
  cudaMemcpy(s.slot_pair.data(), dsp.p, dsp.n, cudaMemcpyDeviceToHost);
  cudaMemcpy(s.tiles.data(), dt.p, dt.n, cudaMemcpyDeviceToHost);
  cudaMemcpy(&s.count, dc.p, 4, cudaMemcpyDeviceToHost);
  return s;
}

// out = x W^T in f32 for row counts of a decode step to a long prompt, expert counts up to 256 and
// k not a multiple of the kernel's K chunk: the fp64 reference within f32 rounding, with one K
// split and with router_matmul_splits' count, the same bits run twice, nothing written past out.
TEST(RouterMatmul, MatchesFp64Reference) {
  std::mt19937 rng(13);
  std::normal_distribution<float> nd(0.f, 1.f);
  int dev = 0, sms = 0;
  CUDA_OK(cudaGetDevice(&dev));
  CUDA_OK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  struct Shape { int64_t rows; int n; int64_t k; };
  for (const Shape sh : {Shape{2, 8, 256}, Shape{5, 128, 2048}, Shape{33, 200, 1000}, Shape{64, 128, 2048},
                         Shape{512, 128, 2048}, Shape{700, 256, 4096}, Shape{3, 60, 100}}) {
    SCOPED_TRACE(testing::Message() << sh.rows << " x " << sh.n << " x " << sh.k);
    std::vector<float> x(size_t(sh.rows * sh.k)), w(size_t(int64_t(sh.n) * sh.k));
    for (auto& v : x) v = nd(rng);
    for (auto& v : w) v = nd(rng) * 0.05f;
    std::vector<double> want(size_t(sh.rows * sh.n)), mag(want.size());
    for (int64_t r = 0; r < sh.rows; ++r)
      for (int c = 0; c < sh.n; ++c) {
        double a = 0, m = 0;
        for (int64_t i = 0; i < sh.k; ++i) {
          const double t = double(x[size_t(r * sh.k + i)]) * w[size_t(c * sh.k + i)];
          a += t, m += std::fabs(t);
        }
        want[size_t(r * sh.n + c)] = a, mag[size_t(r * sh.n + c)] = m;
      }
    const int most = router_matmul_splits(sh.rows, sh.n, sh.k, sms);
    ASSERT_GE(most, 1);
    DeviceBuf dx(x), dw(w), dout(size_t(sh.rows * sh.n + 16) * 4), dparts(size_t(most * sh.rows * sh.n) * 4);
    std::vector<float> first;
    for (int splits : {1, most, most}) {
      CUDA_OK(cudaMemset(dout.p, 0xFF, dout.n));
      const Status st = router_matmul(dx.as<float>(), sh.rows, sh.k, dw.as<float>(), sh.n, dout.as<float>(), dparts.as<float>(),
                                      splits, nullptr);
      ASSERT_TRUE(st.ok) << st.message;
      std::vector<float> got(dout.n / 4);
      CUDA_OK(cudaMemcpy(got.data(), dout.p, dout.n, cudaMemcpyDeviceToHost));
      for (size_t i = 0; i < want.size(); ++i)
        ASSERT_NEAR(got[i], want[i], 1e-5 * mag[i] + 1e-6) << splits << " splits, row " << i / size_t(sh.n) << " col " << i % size_t(sh.n);
      for (size_t i = want.size(); i < got.size(); ++i) ASSERT_TRUE(std::isnan(got[i])) << "wrote past out";
      if (splits == most && !first.empty()) ASSERT_EQ(std::memcmp(first.data(), got.data(), want.size() * 4), 0) << "the same bits";
      if (splits == most) first = got;
    }
  }
  DeviceBuf d(4096);
  EXPECT_FALSE(router_matmul(d.as<float>(), 2, 102, d.as<float>(), 8, d.as<float>(), nullptr, 1, nullptr).ok) << "k % 4";
  EXPECT_FALSE(router_matmul(d.as<float>(), 2, 256, d.as<float>(), 300, d.as<float>(), nullptr, 1, nullptr).ok) << "n > 256";
}

// The pairs in expert order, each expert's in pair order (a stable sort on the host), and its tiles
// of tile_rows: what moe_sort must give, exactly.
TEST(MoeSort, MatchesAStableSortOnTheHost) {
  std::mt19937 rng(3);
  struct Case { int tokens, picks, n_expert; bool crowd; int tile_rows; };
  for (const Case c : {Case{1, 8, 128, false, 64}, Case{300, 8, 128, true, 64}, Case{2500, 2, 8, false, 64},
                       Case{37, 3, 6, true, 16}, Case{1200, 32, 256, true, 64}}) {
    SCOPED_TRACE(testing::Message() << c.tokens << " tokens x " << c.picks << " of " << c.n_expert);
    const std::vector<int32_t> ids = random_ids(c.tokens, c.picks, c.n_expert, c.crowd, rng);
    const Sorted s = sort_on_device(route_rows(ids, c.picks), c.tokens, c.picks, c.n_expert, c.tile_rows);
    std::vector<int32_t> want(ids.size());
    for (size_t p = 0; p < ids.size(); ++p) want[p] = int32_t(p);
    std::stable_sort(want.begin(), want.end(), [&](int32_t a, int32_t b) { return ids[size_t(a)] < ids[size_t(b)]; });
    ASSERT_EQ(s.slot_pair, want);
    std::vector<int32_t> tiles;
    for (size_t b = 0; b < want.size();) {
      size_t e = b;
      while (e < want.size() && ids[size_t(want[e])] == ids[size_t(want[b])]) ++e;
      for (size_t t = b; t < e; t += size_t(c.tile_rows))
        tiles.insert(tiles.end(), {ids[size_t(want[b])], int32_t(t), int32_t(std::min(e, t + size_t(c.tile_rows))), 0});
      b = e;
    }
    ASSERT_EQ(s.count, int32_t(tiles.size() / 4));
    ASSERT_EQ(std::vector<int32_t>(s.tiles.begin(), s.tiles.begin() + std::ptrdiff_t(tiles.size())), tiles);
    for (size_t i = tiles.size(); i < s.tiles.size(); ++i) ASSERT_EQ(s.tiles[i], -1) << "wrote past the tiles";
  }
  DeviceBuf d(64);
  EXPECT_FALSE(moe_sort(d.as<float>(), 1, 2, 300, 64, d.as<int32_t>(), d.as<int32_t>(), d.as<int32_t>(), nullptr).ok)
      << "more than 256 experts";
}

// gather_rows_f16 and scatter_rows against the host: rows in slot order and back, f16 rounding
// (__float2half_rn) the gather's only change; widths of whole 8-column runs (a thread's vector of
// 8) and odd widths (one element a thread), more slots than the grid's rows, outputs poisoned.
TEST(MoeRows, GatherAndScatterMoveTheSlotsRows) {
  std::mt19937 rng(5);
  for (const auto [rows, share, cols] : {std::tuple{300, 8, 2048}, std::tuple{2500, 1, 16}, std::tuple{37, 3, 13},
                                         std::tuple{5, 2, 2056}, std::tuple{700, 4, 4100}}) {
    SCOPED_TRACE(testing::Message() << rows << " x rows, share " << share << ", " << cols << " columns");
    const int slots = rows * share;
    std::vector<int32_t> slot_pair(size_t(slots), 0);
    for (int i = 0; i < slots; ++i) slot_pair[size_t(i)] = i;
    std::shuffle(slot_pair.begin(), slot_pair.end(), rng);
    std::vector<float> x(size_t(rows) * size_t(cols)), src(size_t(slots) * size_t(cols));
    std::normal_distribution<float> nd(0.f, 3.f);
    for (float& v : x) v = nd(rng);
    for (float& v : src) v = nd(rng);
    DeviceBuf dx(x), dsrc(src), dsp(slot_pair), dout(size_t(slots) * size_t(cols) * 2), ddst(size_t(slots) * size_t(cols) * 4);
    CUDA_OK(cudaMemset(dout.p, 0xFF, dout.n));
    CUDA_OK(cudaMemset(ddst.p, 0xFF, ddst.n));
    ASSERT_TRUE(gather_rows_f16(dx.as<float>(), share, dsp.as<int32_t>(), slots, cols, dout.p, nullptr).ok);
    ASSERT_TRUE(scatter_rows(dsrc.as<float>(), dsp.as<int32_t>(), slots, cols, ddst.as<float>(), nullptr).ok);
    std::vector<__half> out(size_t(slots) * size_t(cols));
    std::vector<float> dst(size_t(slots) * size_t(cols));
    CUDA_OK(cudaMemcpy(out.data(), dout.p, dout.n, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(dst.data(), ddst.p, ddst.n, cudaMemcpyDeviceToHost));
    for (int sl = 0; sl < slots; ++sl) {
      const size_t pr = size_t(slot_pair[size_t(sl)]);
      for (int c = 0; c < cols; ++c) {
        const size_t o = size_t(sl) * size_t(cols) + size_t(c);
        const float want = __half2float(__float2half_rn(x[pr / size_t(share) * size_t(cols) + size_t(c)]));
        ASSERT_EQ(__half2float(out[o]), want) << "gather slot " << sl << " column " << c;
        ASSERT_EQ(dst[pr * size_t(cols) + size_t(c)], src[o]) << "scatter slot " << sl << " column " << c;
      }
    }
  }
}

// y[pair] = W_e x_t (or SiLU(W_e x_t) * (U_e x_t)) for each pair (t, e) of a route, through
// moe_sort, gather_rows_f16, gemm_experts and scatter_rows: an fp64 reference of the same
// f16-rounded x within the f16 rounding of W's values; experts with no pair, one expert with more
// pairs than a tile (the crowd), n not a multiple of 128, several types.
TEST(GemmExperts, MatchesFp64ReferenceThroughTheSortedPairs) {
  if (!sm90_device()) GTEST_SKIP() << "gemm_experts runs on Hopper (sm_90) only";
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.f, 1.f);
  const int n_expert = 6, tokens = 90, picks = 3;
  const int64_t n = 200, k = 512, pairs = int64_t(tokens) * picks;
  const std::vector<int32_t> ids = random_ids(tokens, picks, n_expert, true, rng);
  const std::vector<float> route = route_rows(ids, picks);
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q5_0})
    for (bool gated : {true, false}) {
      SCOPED_TRACE(testing::Message() << type_name(t) << (gated ? " gate/up" : " one matrix"));
      ASSERT_TRUE(gemm_experts_supports(t, n, k));
      std::vector<std::vector<uint8_t>> w, wu;
      std::vector<std::unique_ptr<DeviceBuf>> dev;
      std::vector<const void*> pw, pwu;
      for (int e = 0; e < n_expert; ++e) {
        w.push_back(random_matrix(t, n, k, rng));
        wu.push_back(random_matrix(t, n, k, rng));
        for (auto [host, ptrs] : {std::pair{&w.back(), &pw}, std::pair{&wu.back(), &pwu}}) {
          DeviceBuf raw(*host);
          dev.push_back(std::make_unique<DeviceBuf>(gemv_repacked_bytes(t, n, k)));
          ASSERT_TRUE(gemv_repack(t, raw.p, n, k, dev.back()->p, nullptr).ok);
          ptrs->push_back(dev.back()->p);
        }
      }
      const std::vector<uint8_t> maps = gemm_experts_args(t, pw, n, k), maps_up = gemm_experts_args(t, pwu, n, k);
      ASSERT_FALSE(maps.empty() || maps_up.empty());
      // x: a row a token (gate/up) or a pair (one matrix), outliers as models have them.
      const int64_t xrows = gated ? tokens : pairs, share = gated ? picks : 1;
      std::vector<float> x(size_t(xrows * k));
      for (size_t i = 0; i < x.size(); ++i) x[i] = nd(rng) * (i % 37 == 5 ? 30.f : 1.f);
      const int64_t max_tiles = pairs / kGemmExpertsTileRows + n_expert;
      DeviceBuf dr(route), dx(x), dmaps(maps), dmaps_up(maps_up), dsp(size_t(pairs) * 4), dt(size_t(max_tiles) * 16), dc(4),
          dxs(size_t(pairs * k) * 2), dys(size_t(pairs * n) * 4), dy(size_t(pairs * n + 16) * 4);
      ASSERT_TRUE(moe_sort(dr.as<float>(), tokens, picks, n_expert, kGemmExpertsTileRows, dsp.as<int32_t>(), dt.as<int32_t>(),
                           dc.as<int32_t>(), nullptr).ok);
      ASSERT_TRUE(gather_rows_f16(dx.as<float>(), share, dsp.as<int32_t>(), pairs, k, dxs.p, nullptr).ok);
      for (ExpertsLaunch l : kExpertsLaunches) {
        if (!experts_launch_takes(l, gated)) {
          EXPECT_FALSE(experts_launch_takes(l, true)) << experts_launch_name(l);
          continue;
        }
        SCOPED_TRACE(experts_launch_name(l));
        CUDA_OK(cudaMemset(dys.p, 0xFF, dys.n));
        CUDA_OK(cudaMemset(dy.p, 0xFF, dy.n));
        GemmGroups groups;
        groups.tiles = dt.as<int32_t>(), groups.count = dc.as<int32_t>(), groups.max_tiles = max_tiles;
        GemmProblem p;
        p.a_type = GgmlType::F16, p.b_type = t, p.c_type = GgmlType::F32, p.b_layout = WeightLayout::Repacked;
        p.m = pairs, p.n = n, p.k = k, p.a = dxs.p, p.lda = k, p.c = dys.p, p.ldc = n;
        p.b = dmaps.p, p.b_up = gated ? dmaps_up.p : nullptr, p.groups = &groups;
        const Status st = gemm_experts(p, l, nullptr);
        ASSERT_TRUE(st.ok) << st.message;
        ASSERT_TRUE(scatter_rows(dys.as<float>(), dsp.as<int32_t>(), pairs, n, dy.as<float>(), nullptr).ok);
        CUDA_OK(cudaDeviceSynchronize());
        std::vector<float> got(dy.n / 4);
        CUDA_OK(cudaMemcpy(got.data(), dy.p, dy.n, cudaMemcpyDeviceToHost));
        const size_t rb = row_bytes(t, k);
        std::vector<float> wd(static_cast<size_t>(k)), wud(static_cast<size_t>(k)), xh(static_cast<size_t>(k));
        for (int64_t pr = 0; pr < pairs; ++pr) {
          const int e = ids[size_t(pr)];
          const float* xr = &x[size_t(pr / share * k)];
          for (int64_t i = 0; i < k; ++i) xh[size_t(i)] = __half2float(__float2half_rn(xr[i]));
          for (int64_t r = 0; r < n; ++r) {
            dequantize_row(t, w[size_t(e)].data() + size_t(r) * rb, wd.data(), k);
            dequantize_row(t, wu[size_t(e)].data() + size_t(r) * rb, wud.data(), k);
            double a = 0, u = 0, ma = 0, mu = 0;
            for (int64_t i = 0; i < k; ++i) {
              a += double(wd[size_t(i)]) * xh[size_t(i)], u += double(wud[size_t(i)]) * xh[size_t(i)];
              ma += std::fabs(double(wd[size_t(i)]) * xh[size_t(i)]), mu += std::fabs(double(wud[size_t(i)]) * xh[size_t(i)]);
            }
            // W's values as f16 (2^-11 relative each), then f32 sums; through the GLU |silu'| <= 1.1.
            const double want = gated ? a / (1.0 + std::exp(-a)) * u : a;
            const double bound = gated ? 1e-3 * (1.1 * ma * std::fabs(u) + std::fabs(a) * mu + 1e-3 * ma * mu) : 1e-3 * ma;
            ASSERT_NEAR(got[size_t(pr * n + r)], want, bound + 1e-5) << "pair " << pr << " (expert " << e << ") row " << r;
          }
        }
        for (size_t i = size_t(pairs * n); i < got.size(); ++i) ASSERT_TRUE(std::isnan(got[i])) << "wrote past y";
      }
    }
  GemmProblem bad;
  EXPECT_FALSE(gemm_experts(bad, nullptr).ok);
  EXPECT_FALSE(gemm_experts_supports(GgmlType::F16, 256, 512));
  EXPECT_FALSE(gemm_experts_supports(GgmlType::Q4_0, 256, 320)) << "k a multiple of 256";
}

// The routed FFN with its rows in slot order from the sort to the add (CudaBackend::experts_ffn:
// the gate/up GEMM writing f16 rows that the down GEMM reads, add_routed_slots) against the path
// through pair order (each GEMM's f32 rows scattered back, the down GEMM's x gathered and rounded
// again, add_routed): the same bits of x, q4_0 and q4_K.
TEST(GemmExperts, FfnInSlotOrderGivesThePairOrderBits) {
  if (!sm90_device()) GTEST_SKIP() << "gemm_experts runs on Hopper (sm_90) only";
  std::mt19937 rng(21);
  std::normal_distribution<float> nd(0.f, 1.f);
  const int n_expert = 6, tokens = 90, picks = 3;
  const int64_t e = 256, f = 512, pairs = int64_t(tokens) * picks, max_tiles = pairs / kGemmExpertsTileRows + n_expert;
  std::vector<int32_t> ids = random_ids(tokens, picks, n_expert, true, rng);
  std::vector<float> route = route_rows(ids, picks);
  for (int t = 0; t < tokens; ++t)
    for (int j = 0; j < picks; ++j) route[size_t(t * 2 * picks + picks + j)] = 0.1f + 0.3f * float(j) + 0.001f * float(t);
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q4_K}) {
    SCOPED_TRACE(type_name(t));
    std::vector<std::unique_ptr<DeviceBuf>> dev;
    std::vector<const void*> pg, pu, pd;
    for (int x = 0; x < n_expert; ++x)
      for (auto [ptrs, n, k] : {std::tuple{&pg, f, e}, std::tuple{&pu, f, e}, std::tuple{&pd, e, f}}) {
        DeviceBuf raw(random_matrix(t, n, k, rng));
        dev.push_back(std::make_unique<DeviceBuf>(gemv_repacked_bytes(t, n, k)));
        ASSERT_TRUE(gemv_repack(t, raw.p, n, k, dev.back()->p, nullptr).ok);
        ptrs->push_back(dev.back()->p);
      }
    DeviceBuf mg(gemm_experts_args(t, pg, f, e)), mu(gemm_experts_args(t, pu, f, e)), md(gemm_experts_args(t, pd, e, f));
    ASSERT_TRUE(mg.p && mu.p && md.p);
    std::vector<float> h(size_t(tokens * e)), x0(size_t(tokens * e));
    for (auto& v : h) v = nd(rng);
    for (auto& v : x0) v = nd(rng);
    DeviceBuf dr(route), dh(h), dx1(x0), dx2(x0), dsp(size_t(pairs) * 4), dps(size_t(pairs) * 4), dt(size_t(max_tiles) * 16), dc(4),
        dhs(size_t(pairs * e) * 2), dys(size_t(pairs * f) * 4), dg(size_t(pairs * f) * 4), dgs(size_t(pairs * f) * 2),
        dds(size_t(pairs * e) * 4), dd(size_t(pairs * e) * 4);
    GemmGroups groups;
    groups.tiles = dt.as<int32_t>(), groups.count = dc.as<int32_t>(), groups.max_tiles = max_tiles;
    auto gemm = [&](const DeviceBuf& maps, const DeviceBuf* maps_up, int64_t n, int64_t k, const void* a, void* c, GgmlType ct) {
      GemmProblem p;
      p.a_type = GgmlType::F16, p.b_type = t, p.c_type = ct, p.b_layout = WeightLayout::Repacked;
      p.m = pairs, p.n = n, p.k = k, p.a = a, p.lda = k, p.c = c, p.ldc = n;
      p.b = maps.p, p.b_up = maps_up ? maps_up->p : nullptr, p.groups = &groups;
      const Status st = gemm_experts(p, nullptr);
      EXPECT_TRUE(st.ok) << st.message;
    };
    ASSERT_TRUE(moe_sort(dr.as<float>(), tokens, picks, n_expert, kGemmExpertsTileRows, dsp.as<int32_t>(), dt.as<int32_t>(),
                         dc.as<int32_t>(), nullptr).ok);
    ASSERT_TRUE(gather_rows_f16(dh.as<float>(), picks, dsp.as<int32_t>(), pairs, e, dhs.p, nullptr).ok);
    // Pair order: f32 rows scattered, gathered again as f16, the down rows scattered, add_routed.
    gemm(mg, &mu, f, e, dhs.p, dys.p, GgmlType::F32);
    ASSERT_TRUE(scatter_rows(dys.as<float>(), dsp.as<int32_t>(), pairs, f, dg.as<float>(), nullptr).ok);
    ASSERT_TRUE(gather_rows_f16(dg.as<float>(), 1, dsp.as<int32_t>(), pairs, f, dgs.p, nullptr).ok);
    gemm(md, nullptr, e, f, dgs.p, dds.p, GgmlType::F32);
    ASSERT_TRUE(scatter_rows(dds.as<float>(), dsp.as<int32_t>(), pairs, e, dd.as<float>(), nullptr).ok);
    ASSERT_TRUE(add_routed(dx1.as<float>(), dd.as<float>(), tokens, e, dr.as<float>(), picks, nullptr).ok);
    // Slot order: the gate/up GEMM's f16 rows straight into the down GEMM, added through the slots.
    gemm(mg, &mu, f, e, dhs.p, dgs.p, GgmlType::F16);
    gemm(md, nullptr, e, f, dgs.p, dds.p, GgmlType::F32);
    ASSERT_TRUE(moe_pair_slots(dsp.as<int32_t>(), pairs, dps.as<int32_t>(), nullptr).ok);
    ASSERT_TRUE(add_routed_slots(dx2.as<float>(), dds.as<float>(), tokens, e, dr.as<float>(), picks, dps.as<int32_t>(), nullptr).ok);
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<float> x1(x0.size()), x2(x0.size());
    CUDA_OK(cudaMemcpy(x1.data(), dx1.p, dx1.n, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(x2.data(), dx2.p, dx2.n, cudaMemcpyDeviceToHost));
    size_t moved = 0;
    for (size_t i = 0; i < x0.size(); ++i) {
      ASSERT_EQ(std::memcmp(&x1[i], &x2[i], 4), 0) << "token " << i / size_t(e) << " col " << i % size_t(e);
      moved += x1[i] != x0[i];
    }
    EXPECT_GT(moved, x0.size() / 2) << "the FFN added something";
  }
}

}  // namespace
