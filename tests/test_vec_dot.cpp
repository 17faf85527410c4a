// CPU dot-product kernels (scalar, AVX2, AVX-VNNI, AVX-512) against an fp64 dot of the dequantised operands,
// on random data, for every weight type and lengths that exercise tails.
#include "backend/cpu/vec_dot.h"
#include "format/quant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

using namespace lamina;

namespace {

struct Case {
  GgmlType type;
  CpuIsa isa;
};

class VecDotTest : public ::testing::TestWithParam<Case> {};

TEST_P(VecDotTest, MatchesFp64OfDequantised) {
  const auto [type, isa] = GetParam();
  if (!cpu_runs(isa)) GTEST_SKIP() << "CPU has no " << isa_name(isa);
  const VecDot vd = vec_dot_for(type, isa);
  ASSERT_NE(vd.fn, nullptr);
  std::mt19937 rng(uint32_t(type) * 31 + uint32_t(isa));
  std::normal_distribution<float> nd(0.f, 1.f);
  const int act_block = vd.act == ActType::Q8K ? 256 : vd.act == ActType::F32 ? 1 : 32;
  const int block = std::max(traits(type).block_elems, act_block);
  for (int64_t n : {int64_t(block), int64_t(block) * 3, int64_t(block) * 11 + (block == 1 ? 7 : 0)}) {
    std::vector<float> w(static_cast<size_t>(n)), x(static_cast<size_t>(n));
    for (auto& v : w) v = nd(rng);
    for (auto& v : x) v = nd(rng) * (1.f + 4.f * float(&v - x.data() == 5));  // one outlier
    std::vector<uint8_t> wq(row_bytes(type, n)), xq(act_row_bytes(vd.act, n));
    quantize_row(type, w.data(), wq.data(), n);
    quantize_activations(vd.act, x.data(), xq.data(), n);
    std::vector<float> wd(static_cast<size_t>(n)), xd(static_cast<size_t>(n));
    dequantize_row(type, wq.data(), wd.data(), n);
    dequantize_activations(vd.act, xq.data(), xd.data(), n);
    double ref = 0, mag = 0;
    for (int64_t i = 0; i < n; ++i) {
      ref += double(wd[size_t(i)]) * xd[size_t(i)];
      mag += std::fabs(double(wd[size_t(i)]) * xd[size_t(i)]);
    }
    const float got = vd.fn(n, wq.data(), xq.data());
    EXPECT_NEAR(got, ref, 1e-5 * mag + 1e-5) << type_name(type) << " " << isa_name(isa) << " n=" << n;
  }
}

// The four-row kernels give each row bit for bit what the one-row kernel gives it, and the
// AVX-VNNI kernels what the AVX2 ones give (their integer sums are exact).
// The int8 kernels' shapes (four tokens, four weight rows) give each output bit for bit what the
// one-row kernel gives it, and every tier gives what the scalar kernel gives (vec_dot.h's order).
void shapes_equal_one_row(CpuIsa isa) {
  if (!cpu_runs(isa)) GTEST_SKIP() << "CPU has no " << isa_name(isa);
  std::mt19937 rng(8);
  std::normal_distribution<float> nd(0.f, 1.f);
  int checked = 0, with_offsets = 0, with_rows8 = 0;
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1}) {
    const VecDot vd = vec_dot_for(t, isa), scalar = vec_dot_for(t, CpuIsa::Scalar);
    ASSERT_NE(vd.fn4c, nullptr) << type_name(t);
    ASSERT_NE(vd.rows4c, nullptr) << type_name(t);
    if (isa >= CpuIsa::AvxVnni) {
      EXPECT_NE(vd.fn, vec_dot_for(t, CpuIsa::Avx2).fn) << type_name(t) << ": no " << isa_name(isa) << " kernel";
    }
    for (int64_t n : {32, 96, 160, 576, 1568}) {
      const size_t w_rb = row_bytes(t, n), x_rb = act_row_bytes(vd.act, n);
      std::vector<float> w(static_cast<size_t>(4 * n)), x(static_cast<size_t>(4 * n));
      for (auto& v : w) v = nd(rng);
      for (auto& v : x) v = nd(rng) * (1.f + 9.f * float((&v - x.data()) % 97 == 3));
      std::vector<uint8_t> wq(4 * w_rb), xq(4 * x_rb);
      for (int j = 0; j < 4; ++j) {
        quantize_row(t, w.data() + j * n, wq.data() + size_t(j) * w_rb, n);
        quantize_activations(vd.act, x.data() + j * n, xq.data() + size_t(j) * x_rb, n);
      }
      const int64_t nb = n / 32;
      std::vector<int32_t> corr(size_t(4 * nb));
      for (int j = 0; j < 4; ++j) act_corrections(xq.data() + size_t(j) * x_rb, n, vd.corr_bias, corr.data() + j * nb);
      with_offsets += vd.corr_bias != 0;
      float tokens[4] = {-1.f, -1.f, -1.f, -1.f};
      vd.fn4c(n, wq.data(), xq.data(), x_rb, vd.corr_bias ? corr.data() : nullptr, size_t(nb), tokens);
      for (int j = 0; j < 4; ++j) {
        const float one = vd.fn(n, wq.data(), xq.data() + size_t(j) * x_rb);
        EXPECT_EQ(tokens[j], one) << type_name(t) << " four tokens, n=" << n << " token " << j;
        EXPECT_EQ(one, scalar.fn(n, wq.data(), xq.data() + size_t(j) * x_rb))
            << type_name(t) << " " << isa_name(isa) << " against scalar, n=" << n;
        float rows[4] = {-1.f, -1.f, -1.f, -1.f};
        vd.rows4c(n, wq.data(), w_rb, xq.data() + size_t(j) * x_rb, vd.corr_bias ? corr.data() + j * nb : nullptr, rows);
        for (int r = 0; r < 4; ++r)
          EXPECT_EQ(rows[r], vd.fn(n, wq.data() + size_t(r) * w_rb, xq.data() + size_t(j) * x_rb))
              << type_name(t) << " four rows, n=" << n << " row " << r << " token " << j;
        ++checked;
      }
      if (vd.rows8c) {  // eight weight rows
        std::vector<uint8_t> w8(8 * w_rb);
        std::vector<float> wf(static_cast<size_t>(n));
        for (int r = 0; r < 8; ++r) {
          for (auto& v : wf) v = nd(rng);
          quantize_row(t, wf.data(), w8.data() + size_t(r) * w_rb, n);
        }
        for (int j = 0; j < 4; ++j) {
          float rows[8];
          std::fill(rows, rows + 8, -1.f);
          vd.rows8c(n, w8.data(), w_rb, xq.data() + size_t(j) * x_rb, vd.corr_bias ? corr.data() + j * nb : nullptr, rows);
          for (int r = 0; r < 8; ++r)
            EXPECT_EQ(rows[r], vd.fn(n, w8.data() + size_t(r) * w_rb, xq.data() + size_t(j) * x_rb))
                << type_name(t) << " eight rows, n=" << n << " row " << r << " token " << j;
        }
        ++with_rows8;
      }
    }
  }
  EXPECT_EQ(checked, 60);
  EXPECT_EQ(with_rows8, 15);  // the three types at five lengths
  EXPECT_EQ(with_offsets, isa >= CpuIsa::AvxVnni ? 10 : 5);  // q4_0 (and q8_0 with dpbusd) at five lengths
}

TEST(VecDot, Avx2ShapesEqualTheOneRowAndScalarKernels) { shapes_equal_one_row(CpuIsa::Avx2); }
TEST(VecDot, AvxVnniShapesEqualTheOneRowAndScalarKernels) { shapes_equal_one_row(CpuIsa::AvxVnni); }
TEST(VecDot, Avx512ShapesEqualTheOneRowAndScalarKernels) { shapes_equal_one_row(CpuIsa::Avx512); }

std::vector<Case> all_cases() {
  std::vector<Case> c;
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1,
                     GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K,
                     GgmlType::Q6_K, GgmlType::IQ4_XS})
    for (CpuIsa isa : {CpuIsa::Scalar, CpuIsa::Avx2, CpuIsa::AvxVnni, CpuIsa::Avx512})
      if (isa == CpuIsa::Scalar || (isa == CpuIsa::Avx2      ? avx2_kernel(t)
                                    : isa == CpuIsa::AvxVnni ? vnni_kernel(t)
                                                             : avx512_kernel(t)))
        c.push_back({t, isa});
  return c;
}

INSTANTIATE_TEST_SUITE_P(Kernels, VecDotTest, ::testing::ValuesIn(all_cases()), [](const auto& p) {
  std::string name = std::string(type_name(p.param.type)) + "_" + isa_name(p.param.isa);
  for (char& c : name)
    if (c == '-') c = '_';  // (test names are identifiers)
  return name;
});

// The AVX2 activation quantiser gives the portable one's bytes and scales, ties (x * id exactly
// k + 0.5, rounded away from zero) included.
TEST(VecDot, Avx2ActivationQuantiserEqualsThePortableOne) {
  if (detect_isa() < CpuIsa::Avx2) GTEST_SKIP() << "CPU has no avx2";
  std::mt19937 rng(21);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (ActType t : {ActType::Q8, ActType::Q8S, ActType::Q8K}) {
    const int64_t n = 32 * 40;
    std::vector<float> x(static_cast<size_t>(n));
    for (auto& v : x) v = nd(rng) * (1.f + 20.f * float((&v - x.data()) % 53 == 7));
    for (int64_t b = 0; b < 8; ++b)  // blocks with amax 127: every k + 0.5 is a tie
      for (int j = 0; j < 32; ++j) x[size_t(32 * b + j)] = j == 0 ? 127.f : float(j - 16) + 0.5f * float(j % 2);
    for (int j = 0; j < 32; ++j) x[size_t(32 * 8 + j)] = 0.f;  // an all-zero block
    for (int j = 1024; j < 1280; ++j) x[size_t(j)] = 0.f;     // an all-zero q8_K super-block
    x[520] = -300.f, x[600] = 300.f;  // equal magnitudes: the first sets q8_K's sign
    std::vector<uint8_t> got(act_row_bytes(t, n)), want(act_row_bytes(t, n));
    avx2_quantize_q8(t, x.data(), got.data(), n);
    quantize_activations_portable(t, x.data(), want.data(), n);
    EXPECT_EQ(got, want) << (t == ActType::Q8 ? "q8" : t == ActType::Q8S ? "q8s" : "q8K");
  }
}

// The outlier scan's AVX2 passes against their portable definitions.
TEST(VecDot, Avx2OutlierScanEqualsThePortableOne) {
  if (detect_isa() < CpuIsa::Avx2) GTEST_SKIP() << "CPU has no avx2";
  std::mt19937 rng(22);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (int64_t n : {7, 64, 577, 1536}) {
    std::vector<float> x(static_cast<size_t>(n));
    for (auto& v : x) v = nd(rng) * (nd(rng) > 2.2f ? 30.f : 1.f);
    double s4[4] = {0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
      for (int j = 0; j < 4; ++j) s4[j] += double(x[size_t(i + j)]) * x[size_t(i + j)];
    for (; i < n; ++i) s4[0] += double(x[size_t(i)]) * x[size_t(i)];
    EXPECT_EQ(avx2_sum_squares4(x.data(), n), (s4[0] + s4[1]) + (s4[2] + s4[3])) << "n=" << n;
    for (int64_t from = 0; from <= n; ++from) {
      int64_t want = from;
      while (want < n && !(std::fabs(x[size_t(want)]) > 3.f)) ++want;
      ASSERT_EQ(avx2_next_above(x.data(), from, n, 3.f), want) << "n=" << n << " from " << from;
    }
  }
}

// f16 and bf16 weights: the four-token kernel gives each token the one-row kernel's bits (tails included).
TEST(VecDot, HalfFourTokensEqualTheOneRowKernel) {
  if (detect_isa() < CpuIsa::Avx2) GTEST_SKIP() << "CPU has no avx2";
  for (GgmlType type : {GgmlType::F16, GgmlType::BF16}) {
  const VecDot vd = vec_dot_for(type, CpuIsa::Avx2);
  ASSERT_NE(vd.fn4c, nullptr);
  std::mt19937 rng(24);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (int64_t n : {8, 16, 37, 576, 1541}) {
    std::vector<float> w(static_cast<size_t>(n)), x(static_cast<size_t>(4 * n));
    for (auto& v : w) v = nd(rng);
    for (auto& v : x) v = nd(rng);
    std::vector<uint8_t> wq(row_bytes(type, n));
    quantize_row(type, w.data(), wq.data(), n);
    float got[4] = {-1.f, -1.f, -1.f, -1.f};
    vd.fn4c(n, wq.data(), x.data(), size_t(n) * 4, nullptr, 0, got);
    for (int j = 0; j < 4; ++j)
      EXPECT_EQ(got[j], vd.fn(n, wq.data(), x.data() + j * n)) << type_name(type) << " n=" << n << " token " << j;
  }
  }
}

// f16 and bf16 weights on AVX-512: the register tile (four rows x 1..6 tokens) gives each output
// the one-row kernel's bits (tails included), and writes only its outputs.
TEST(VecDot, HalfTileEqualsTheOneRowKernel) {
  if (!cpu_runs(CpuIsa::Avx512)) GTEST_SKIP() << "CPU has no avx512";
  int checked = 0;
  for (GgmlType type : {GgmlType::F16, GgmlType::BF16}) {
  const VecDot vd = vec_dot_for(type, CpuIsa::Avx512);
  ASSERT_NE(vd.tile, nullptr);
  std::mt19937 rng(25);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (int64_t n : {8, 16, 37, 576, 1541}) {
    const size_t w_rb = row_bytes(type, n), x_rb = size_t(n) * 4 + 12;  // rows not packed tight
    std::vector<float> w(static_cast<size_t>(n)), x(size_t(kTileTokens) * x_rb / 4);
    std::vector<uint8_t> wq(kTileRows * w_rb);
    for (int i = 0; i < kTileRows; ++i) {
      for (auto& v : w) v = nd(rng);
      quantize_row(type, w.data(), wq.data() + size_t(i) * w_rb, n);
    }
    for (auto& v : x) v = nd(rng);
    for (int tokens = 1; tokens <= kTileTokens; ++tokens) {
      const size_t out_stride = kTileRows + 3;
      std::vector<float> out(size_t(kTileTokens) * out_stride, std::nanf(""));
      vd.tile(n, wq.data(), w_rb, x.data(), x_rb, tokens, out.data(), out_stride);
      for (int j = 0; j < kTileTokens; ++j)
        for (size_t i = 0; i < out_stride; ++i) {
          const float v = out[size_t(j) * out_stride + i];
          if (j >= tokens || i >= size_t(kTileRows)) {
            EXPECT_TRUE(std::isnan(v)) << "n=" << n << " wrote outside the tile: token " << j << " row " << i;
            continue;
          }
          const auto* xj = reinterpret_cast<const uint8_t*>(x.data()) + size_t(j) * x_rb;
          EXPECT_EQ(v, vd.fn(n, wq.data() + i * w_rb, xj)) << "n=" << n << " tokens " << tokens << " row " << i << " token " << j;
          ++checked;
        }
    }
  }
  }
  EXPECT_EQ(checked, 2 * 5 * kTileRows * (1 + 2 + 3 + 4 + 5 + 6));
}

// The F16C element decoders give dequantize_element's floats.
TEST(VecDot, Avx2ElementDecodersEqualThePortableOnes) {
  if (detect_isa() < CpuIsa::Avx2) GTEST_SKIP() << "CPU has no avx2";
  std::mt19937 rng(23);
  std::normal_distribution<float> nd(0.f, 1.f);
  constexpr int64_t n = 2048;  // eight K-quant blocks: scales and mins over their whole 6-bit range
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K}) {
    const ElementFn fast = avx2_element(t);
    ASSERT_NE(fast, nullptr) << type_name(t);
    std::vector<float> w(n);
    for (size_t i = 0; i < w.size(); ++i) w[i] = nd(rng) * 3.f * float(1 + i % 97) + float(i % 61) * 0.1f;
    std::vector<uint8_t> q(row_bytes(t, n));
    quantize_row(t, w.data(), q.data(), n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(fast(q.data(), i), dequantize_element(t, q.data(), i)) << type_name(t) << " " << i;
  }
}

TEST(VecDot, ActivationFormatsRoundTrip) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> x(512), y(512);
  for (auto& v : x) v = nd(rng);
  for (ActType t : {ActType::Q8, ActType::Q8S, ActType::Q8K}) {
    std::vector<uint8_t> q(act_row_bytes(t, 512));
    quantize_activations(t, x.data(), q.data(), 512);
    dequantize_activations(t, q.data(), y.data(), 512);
    for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(y[i], x[i], 0.03);
  }
}

}  // namespace
