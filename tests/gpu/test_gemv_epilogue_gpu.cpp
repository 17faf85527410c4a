// The GEMVs' int8 blocks and epilogues on the GPU: x quantised to int8 blocks, y8 made in the
// epilogue, the RMSNorm fused in the prologue, argmax, the tuner's entries and argument checks
// (test_gemv_gpu.cpp has every variant against the fp64 reference).
#include "core/half.h"
#include "gemv_test_util.h"
#include "gpu_test_util.h"
#include "format/quant.h"
#include "kernels/common/q8_blocks.h"
#include "kernels/gemv/gemv.h"
#include "kernels/gemv/gemv_tune.h"
#include "x8_host.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>

using namespace lamina;
using namespace lamina::kernels;
using namespace lamina::gemv_test;


namespace {

TEST(X8Blocks, QuantizeMatchesTheHostRule) {
  const int64_t k = 7 * 32, rows = 2;
  std::mt19937 rng(31);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> x(size_t(rows * k));
  for (auto& f : x) f = nd(rng);
  std::fill(x.begin(), x.begin() + 32, 0.f);       // block 0: zero
  std::fill(x.begin() + 32, x.begin() + 64, 0.f);  // block 1: one element
  x[32 + 17] = -3.5f;
  for (int i = 0; i < 32; ++i) x[size_t(64 + i)] *= 0.5f;  // block 2: equal magnitudes above the rest
  x[64 + 3] = 6.f, x[64 + 20] = -6.f;
  x[96 + 31] = 40.f;  // block 3: the largest in the last lane
  x[128] = 100.f, x[129] = 15.875f;  // block 4: d = 15.875 / 127 = 0.125 exactly, the rest at halves of it
  for (int i = 2; i < 32; ++i) x[size_t(128 + i)] = 0.0625f * float(2 * i - 31);
  x[size_t(k + 9)] = -75.f;  // row 1: an outlier
  DeviceBuf dx(x.size() * 4), dq(size_t(rows) * x8_bytes(k));
  CUDA_OK(cudaMemcpy(dx.p, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(dq.p, 0xA5, size_t(rows) * x8_bytes(k)));
  const Status st = quantize_x8(dx.as<float>(), rows, k, dq.p, nullptr);
  ASSERT_TRUE(st.ok) << st.message;
  std::vector<uint8_t> got(size_t(rows) * x8_bytes(k));
  CUDA_OK(cudaMemcpy(got.data(), dq.p, got.size(), cudaMemcpyDeviceToHost));
  std::vector<float> rounded(x.size());
  const std::vector<uint8_t> want = host_x8(x, k, &rounded);
  EXPECT_EQ(got, want);
  // The rule itself, on the edge blocks.
  const X8Facts f0 = host_x8_facts(want.data(), k, 0), f1 = host_x8_facts(want.data(), k, 1),
                f2 = host_x8_facts(want.data(), k, 2), f3 = host_x8_facts(want.data(), k, 3),
                f4 = host_x8_facts(want.data(), k, 4);
  EXPECT_EQ(f0.d, 0.f);
  EXPECT_EQ(f0.big, 0);
  EXPECT_EQ(f0.sum, 0);
  EXPECT_EQ(f1.m, 17);  // alone: the step is the floor, Q = -127 * 2^14
  EXPECT_EQ(f1.big, -127 * 16384);
  EXPECT_EQ(f1.sum, f1.big);
  EXPECT_EQ(f2.m, 3);
  EXPECT_EQ(int8_t(want[64 + 20]), -127);
  EXPECT_EQ(f3.m, 31);
  EXPECT_EQ(f4.m, 0);
  EXPECT_EQ(f4.d, 0.125f);
  EXPECT_EQ(f4.big, 800);
  EXPECT_EQ(int8_t(want[128 + 2]), -14);  // -13.5 away from zero
  EXPECT_EQ(int8_t(want[128 + 16]), 1);   // 0.5
  for (size_t i = 0; i < x.size(); ++i)  // every value within half a step of its block
    ASSERT_LE(std::fabs(rounded[i] - x[i]),
              0.5f * host_x8_facts(want.data() + (i / size_t(k)) * x8_bytes(k), k, int64_t(i % size_t(k)) / 32).d * 1.0001f)
        << "element " << i;
}

TEST(GemvY8, GemvMakesTheInt8CopyOfY) {
  std::mt19937 rng(5);
  const int64_t n = 160, k = 512;
  const int batch = 2;
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::F16}) {
    for (bool counters : {false, true}) {
      SCOPED_TRACE(testing::Message() << type_name(t) << (counters ? " with counters" : " without counters"));
      const auto w = random_matrix(t, n, k, rng);
      std::normal_distribution<float> nd(0.f, 1.f);
      std::vector<float> x(size_t(batch * k));
      for (auto& f : x) f = nd(rng);
      const bool repack = t == GgmlType::Q4_0;
      DeviceBuf raw(w.size()), dw(repack ? gemv_repacked_bytes(t, n, k) : w.size()), dx(x.size() * 4),
          dy(size_t(batch * n) * 4), y8(size_t(batch) * x8_bytes(n)), count(size_t(n / 32) * 4);
      CUDA_OK(cudaMemcpy(raw.p, w.data(), w.size(), cudaMemcpyHostToDevice));
      if (repack) ASSERT_TRUE(gemv_repack(t, raw.p, n, k, dw.p, nullptr).ok);
      else CUDA_OK(cudaMemcpy(dw.p, w.data(), w.size(), cudaMemcpyHostToDevice));
      CUDA_OK(cudaMemcpy(dx.p, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
      CUDA_OK(cudaMemset(y8.p, 0xA5, size_t(batch) * x8_bytes(n)));
      CUDA_OK(cudaMemset(count.p, 0, size_t(n / 32) * 4));
      GemvProblem p;
      p.wtype = t;
      p.layout = repack ? WeightLayout::Repacked : WeightLayout::Gguf;
      p.w = dw.p, p.n = n, p.k = k, p.x = dx.as<float>(), p.batch = batch, p.y = dy.as<float>();
      p.y8 = y8.p;
      p.y8_count = counters ? count.as<unsigned>() : nullptr;
      const Status st = gemv(p, nullptr);
      ASSERT_TRUE(st.ok) << st.message;
      CUDA_OK(cudaDeviceSynchronize());
      std::vector<float> y(size_t(batch * n));
      std::vector<uint8_t> got(size_t(batch) * x8_bytes(n));
      CUDA_OK(cudaMemcpy(y.data(), dy.p, y.size() * 4, cudaMemcpyDeviceToHost));
      CUDA_OK(cudaMemcpy(got.data(), y8.p, got.size(), cudaMemcpyDeviceToHost));
      EXPECT_EQ(got, host_x8(y, n));
      std::vector<unsigned> left(size_t(n / 32));
      CUDA_OK(cudaMemcpy(left.data(), count.p, left.size() * 4, cudaMemcpyDeviceToHost));
      EXPECT_EQ(left, std::vector<unsigned>(size_t(n / 32), 0u)) << "counters not left zero";
    }
  }
  GemvProblem bad;  // n not a multiple of 32
  DeviceBuf w(1 << 14), x(1 << 12), y(1 << 12);
  bad.w = w.p, bad.x = x.as<float>(), bad.y = y.as<float>(), bad.n = 40, bad.k = 64, bad.y8 = x.p;
  EXPECT_FALSE(gemv_validate(bad, *find_gemv_variant("v5_stream")).ok);
}

// Decode's gate/up takes a pending norm (norm_w, x8 and x8_ss given) and makes the down
// projection's y8; `lamina tune` times it as the pair with x8 given and y8 made. gemv() must find
// that entry, not fall back to the default rung: the tuned choice here skips the default's first
// config, so only a lookup that finds the entry can return it. (It once fell back: the lookup
// dropped y8 before trying x8 for norm_w, and decode ran 28 % slower.)
TEST(GemvTune, PendingNormGateUpFindsTheTunedX8Y8Entry) {
  static const int marker = 0;
  static int y8_marker = 0;
  static unsigned count_marker = 0;
  GemvProblem shape;  // a shape no other test tunes; pointers are markers (gemv_tune allocates)
  shape.wtype = GgmlType::Q4_0, shape.layout = WeightLayout::Repacked;
  shape.n = 1120, shape.k = 640, shape.batch = 1;
  shape.w_up = &marker, shape.x8 = &marker, shape.y8 = &y8_marker, shape.y8_count = &count_marker;
  const GemvVariant* fallback = find_gemv_variant("q_dp4a");
  ASSERT_NE(fallback, nullptr);
  const std::string fallback_choice = std::string("q_dp4a(") + fallback->configs.front().str() + ")";
  ASSERT_EQ(gemv_choice(shape), fallback_choice) << "untuned: the default rung's first config";
  // A stream of its own: the legacy stream cannot be captured, so the tuner's graph timing would
  // not run on it (and its capture's error once reached the next test's first launch).
  cudaStream_t stream = nullptr;
  CUDA_OK(cudaStreamCreate(&stream));
  const auto best = gemv_tune(shape, stream, fallback_choice);
  CUDA_OK(cudaStreamDestroy(stream));
  ASSERT_EQ(cudaGetLastError(), cudaSuccess) << "gemv_tune left an error for the next launch";
  ASSERT_TRUE(best.has_value());
  const std::string tuned = std::string(best->variant->name) + "(" + best->config.str() + ")";
  ASSERT_NE(tuned, fallback_choice);
  GemvProblem run = shape;  // as the CUDA backend runs it: the pending norm's fields as well
  static const float gain = 1.f;
  static const double ss = 1.0;
  run.norm_w = &gain, run.norm_eps = 1e-5f, run.x8_ss = &ss;
  EXPECT_EQ(gemv_choice(run), tuned);
  run.y8 = nullptr, run.y8_count = nullptr;  // no y8 entry for this one: the x8 pair's own (untuned)
  EXPECT_EQ(gemv_choice(run), fallback_choice);
}

// gemv() with norm_w: a variant that fuses the norm (q_dp4a for q4_0) does it in its prologue;
// for one that cannot (v5_stream for f16) gemv() first writes rmsnorm(x) * g to norm_out. Both
// against the fp64 reference of the host's normalised x (int8-rounded for the dp4a variant).
TEST(GemvNorm, FusedOrInAKernelOfItsOwn) {
  std::mt19937 rng(11);
  const int64_t n = 96, k = 1024;
  const int batch = 2;
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::F16}) {
    SCOPED_TRACE(type_name(t));
    const auto w = random_matrix(t, n, k, rng);
    std::normal_distribution<float> nd(0.f, 1.f);
    std::vector<float> x(size_t(batch * k)), g(static_cast<size_t>(k));
    for (auto& f : x) f = 3.f * nd(rng);
    for (auto& f : g) f = 0.5f + std::fabs(nd(rng));
    const bool repack = t == GgmlType::Q4_0;
    std::vector<float> xn = host_rmsnorm(x, g, k, 1e-6f);
    if (repack) host_x8(std::vector<float>(xn), k, &xn);  // the variant multiplies the int8-rounded values
    DeviceBuf raw(w.size()), dw(repack ? gemv_repacked_bytes(t, n, k) : w.size()), dx(x.size() * 4), dg(g.size() * 4),
        dn(x.size() * 4), dy(size_t(batch * n) * 4);
    CUDA_OK(cudaMemcpy(raw.p, w.data(), w.size(), cudaMemcpyHostToDevice));
    if (repack) ASSERT_TRUE(gemv_repack(t, raw.p, n, k, dw.p, nullptr).ok);
    else CUDA_OK(cudaMemcpy(dw.p, w.data(), w.size(), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(dx.p, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(dg.p, g.data(), g.size() * 4, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(dy.p, 0xFF, size_t(batch * n) * 4));
    GemvProblem p;
    p.wtype = t;
    p.layout = repack ? WeightLayout::Repacked : WeightLayout::Gguf;
    p.w = dw.p, p.n = n, p.k = k, p.x = dx.as<float>(), p.batch = batch, p.y = dy.as<float>();
    p.norm_w = dg.as<float>(), p.norm_eps = 1e-6f, p.norm_out = dn.as<float>();
    const Status st = gemv(p, nullptr);
    ASSERT_TRUE(st.ok) << st.message;
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<float> y(size_t(batch * n)), wd(static_cast<size_t>(k));
    CUDA_OK(cudaMemcpy(y.data(), dy.p, y.size() * 4, cudaMemcpyDeviceToHost));
    for (int64_t r = 0; r < n; ++r) {
      dequantize_row(t, w.data() + size_t(r) * row_bytes(t, k), wd.data(), k);
      for (int b = 0; b < batch; ++b) {
        double ref = 0, mag = 0;
        for (int64_t i = 0; i < k; ++i) {
          ref += double(wd[size_t(i)]) * xn[size_t(b * k + i)];
          mag += std::fabs(double(wd[size_t(i)]) * xn[size_t(b * k + i)]);
        }
        ASSERT_NEAR(y[size_t(b * n + r)], ref, 2e-5 * mag + 1e-5) << "row " << r << " batch " << b;
      }
    }
  }
  GemvProblem bad;  // norm_w without norm_out
  DeviceBuf w(1 << 14), x(1 << 12), y(1 << 12);
  bad.w = w.p, bad.x = x.as<float>(), bad.y = y.as<float>(), bad.n = 32, bad.k = 64, bad.norm_w = x.as<float>();
  EXPECT_FALSE(gemv_validate(bad, *find_gemv_variant("v5_stream")).ok);
}

// GemvProblem::argmax: the id of y's first largest value, made by the variant that writes it
// (q6k_dp4a, every config) and by gemv()'s one-block kernel after the others (q_dp4a for q4_0
// and q8_0, v5_stream for f16). Checked against the launch's own y; then with the largest row copied into a lower
// and a higher row (a three-way tie, spread over blocks: the lowest must win) and the id sent to
// the second of two words by a parity word (5); the key and count words must be left zero for
// the next launch.
TEST(GemvArgmax, FirstRowOfTheLargestValue) {
  std::mt19937 rng(23);
  const int64_t n = 9000, k = 1024;
  struct Arm {
    GgmlType type;
    const char* variant;  // launched with each config; null: through gemv()
  };
  for (const Arm arm : {Arm{GgmlType::Q6_K, "q6k_dp4a"}, Arm{GgmlType::Q4_0, nullptr}, Arm{GgmlType::Q8_0, nullptr},
                        Arm{GgmlType::F16, nullptr}}) {
    const GgmlType t = arm.type;
    auto w = random_matrix(t, n, k, rng);
    std::normal_distribution<float> nd(0.f, 1.f);
    std::vector<float> x(static_cast<size_t>(k));
    for (auto& f : x) f = nd(rng);
    const bool repack = repacked_layout_preferred(t);
    DeviceBuf raw(w.size()), dw(repack ? gemv_repacked_bytes(t, n, k) : w.size()), dx(x.size() * 4), dy(size_t(n) * 4),
        words(16), ids(16);  // ids: id[2], id2, the parity word
    CUDA_OK(cudaMemcpy(dx.p, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(words.p, 0, 16));
    auto upload_w = [&] {
      CUDA_OK(cudaMemcpy(raw.p, w.data(), w.size(), cudaMemcpyHostToDevice));
      if (repack) ASSERT_TRUE(gemv_repack(t, raw.p, n, k, dw.p, nullptr).ok);
      else CUDA_OK(cudaMemcpy(dw.p, w.data(), w.size(), cudaMemcpyHostToDevice));
    };
    GemvProblem p;
    p.wtype = t;
    p.layout = repack ? WeightLayout::Repacked : WeightLayout::Gguf;
    p.w = dw.p, p.n = n, p.k = k, p.x = dx.as<float>(), p.y = dy.as<float>();
    p.argmax.key = words.as<unsigned long long>();
    p.argmax.count = reinterpret_cast<unsigned*>(words.as<unsigned long long>() + 1);
    p.argmax.id = ids.as<int32_t>(), p.argmax.id2 = ids.as<int32_t>() + 2;
    const GemvVariant* v = arm.variant ? find_gemv_variant(arm.variant) : nullptr;
    const std::vector<GemvConfig> configs = v ? v->configs : std::vector<GemvConfig>{GemvConfig{}};
    int64_t top = -1;
    for (int round = 0; round < 2; ++round) {  // round 1: the largest row copied below and above it
      if (round == 1) {
        const size_t rb = row_bytes(t, k);
        ASSERT_GT(top, 0);
        for (int64_t r : {top / 2, std::min(n - 1, top + 700)})
          std::memcpy(w.data() + size_t(r) * rb, w.data() + size_t(top) * rb, rb);
        p.argmax.parity = ids.as<int32_t>() + 3;
      }
      upload_w();
      for (const GemvConfig& c : configs) {
        SCOPED_TRACE(testing::Message() << type_name(t) << " " << (v ? v->name : "gemv()") << " " << c.str() << " round "
                                        << round);
        const int32_t poison[4] = {-1, -1, -1, 5};
        CUDA_OK(cudaMemcpy(ids.p, poison, 16, cudaMemcpyHostToDevice));
        const Status st = v ? v->launch(p, c, nullptr) : gemv(p, nullptr);
        ASSERT_TRUE(st.ok) << st.message;
        CUDA_OK(cudaDeviceSynchronize());
        std::vector<float> y(static_cast<size_t>(n));
        int32_t got[4];
        unsigned long long left[2];
        CUDA_OK(cudaMemcpy(y.data(), dy.p, y.size() * 4, cudaMemcpyDeviceToHost));
        CUDA_OK(cudaMemcpy(got, ids.p, 16, cudaMemcpyDeviceToHost));
        CUDA_OK(cudaMemcpy(left, words.p, 16, cudaMemcpyDeviceToHost));
        const int64_t want = std::max_element(y.begin(), y.end()) - y.begin();
        EXPECT_EQ(got[round], want) << "id";  // round 1: parity 5, the second word
        EXPECT_EQ(got[1 - round], -1) << "the other id word written";
        EXPECT_EQ(got[2], want) << "id2";
        EXPECT_EQ(left[0], 0u) << "key not left zero";
        EXPECT_EQ(left[1], 0u) << "count not left zero";
        if (round == 0) top = want;
        else EXPECT_EQ(want, top / 2) << "the copies must tie with the largest row";
      }
    }
  }
  GemvProblem bad;  // batch 2 with an argmax
  DeviceBuf w(1 << 14), x(1 << 12), y(1 << 12), words(16), ids(8);
  bad.wtype = GgmlType::Q4_0, bad.layout = WeightLayout::Repacked;
  bad.w = w.p, bad.x = x.as<float>(), bad.y = y.as<float>(), bad.n = 32, bad.k = 64, bad.batch = 2;
  bad.argmax.key = words.as<unsigned long long>(), bad.argmax.count = ids.as<unsigned>(), bad.argmax.id = ids.as<int32_t>();
  EXPECT_FALSE(gemv(bad, nullptr).ok);
  EXPECT_FALSE(gemv_validate(bad, *find_gemv_variant("q_dp4a")).ok);
  bad.wtype = GgmlType::Q6_K, bad.k = 256;
  EXPECT_FALSE(gemv_validate(bad, *find_gemv_variant("q6k_dp4a")).ok);
}

TEST(GemvArgs, RejectsBadInput) {
  DeviceBuf w(1 << 16), x(1 << 12), y(1 << 12);
  GemvProblem p;
  p.w = w.p;
  p.x = x.as<float>();
  p.y = y.as<float>();
  p.n = 16;
  p.k = 64;
  const GemvVariant& v5 = *find_gemv_variant("v5_stream");
  EXPECT_TRUE(gemv_validate(p, v5).ok);
  p.batch = 9;
  EXPECT_FALSE(gemv_validate(p, v5).ok);
  p.batch = 1;
  p.wtype = GgmlType::Q4_0;
  EXPECT_FALSE(gemv_validate(p, v5).ok);  // v5 takes float types only
  p.layout = WeightLayout::Repacked;
  EXPECT_TRUE(gemv_validate(p, *find_gemv_variant("q_repacked")).ok);
  p.k = 48;
  EXPECT_FALSE(gemv_validate(p, *find_gemv_variant("q_repacked")).ok);  // not a multiple of 32
  p.wtype = GgmlType::F16;
  p.layout = WeightLayout::Gguf;
  p.k = 64;
  p.x = reinterpret_cast<const float*>(x.as<char>() + 4);
  EXPECT_FALSE(gemv_validate(p, v5).ok);  // misaligned x
  p.x = x.as<float>();
  p.bias = x.as<float>();
  EXPECT_FALSE(gemv_validate(p, *find_gemv_variant("v3_warp_reduce")).ok);  // ladder: no epilogue
  p.bias = nullptr;
  p.k = 1004;
  EXPECT_FALSE(v5.launch(p, v5.configs[0], nullptr).ok);  // v5 needs 16-byte rows
  EXPECT_FALSE(gemv_repack(GgmlType::F16, w.p, 1, 256, y.p, nullptr).ok);  // no repacked layout
}

}  // namespace
