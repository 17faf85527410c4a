// CPU dot-product kernels (scalar and AVX2) against an fp64 dot of the dequantised operands,
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
  if (isa > detect_isa()) GTEST_SKIP() << "CPU has no " << isa_name(isa);
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
void four_rows_equal_one_row(CpuIsa isa) {
  if (isa > detect_isa()) GTEST_SKIP() << "CPU has no " << isa_name(isa);
  std::mt19937 rng(8);
  std::normal_distribution<float> nd(0.f, 1.f);
  int checked = 0, with_offsets = 0;
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1}) {
    const VecDot vd = vec_dot_for(t, isa), avx2 = vec_dot_for(t, CpuIsa::Avx2);
    ASSERT_NE(vd.fn4, nullptr) << type_name(t);
    if (isa == CpuIsa::AvxVnni) {
      EXPECT_NE(vd.fn, avx2.fn) << type_name(t) << ": no AVX-VNNI kernel";
    }
    for (int64_t n : {32, 96, 576, 1568}) {
      std::vector<float> w(static_cast<size_t>(n)), x(static_cast<size_t>(4 * n));
      for (auto& v : w) v = nd(rng);
      for (auto& v : x) v = nd(rng) * (1.f + 9.f * float((&v - x.data()) % 97 == 3));
      std::vector<uint8_t> wq(row_bytes(t, n)), xq(4 * act_row_bytes(vd.act, n));
      quantize_row(t, w.data(), wq.data(), n);
      for (int j = 0; j < 4; ++j)
        quantize_activations(vd.act, x.data() + j * n, xq.data() + size_t(j) * act_row_bytes(vd.act, n), n);
      float got[4] = {-1.f, -1.f, -1.f, -1.f};
      vd.fn4(n, wq.data(), xq.data(), act_row_bytes(vd.act, n), got);
      float got_c[4] = {-1.f, -1.f, -1.f, -1.f};
      if (vd.fn4c) {  // offset weights: the same floats
        std::vector<int32_t> corr(size_t(4 * n / 4));
        for (int j = 0; j < 4; ++j)
          act_corrections(xq.data() + size_t(j) * act_row_bytes(vd.act, n), n, vd.corr_bias, corr.data() + j * n / 4);
        vd.fn4c(n, wq.data(), xq.data(), act_row_bytes(vd.act, n), corr.data(), size_t(n / 4), got_c);
        ++with_offsets;
      }
      for (int j = 0; j < 4; ++j) {
        const float one = vd.fn(n, wq.data(), xq.data() + size_t(j) * act_row_bytes(vd.act, n));
        EXPECT_EQ(got[j], one) << type_name(t) << " n=" << n << " row " << j;
        if (vd.fn4c) {
          EXPECT_EQ(got_c[j], one) << type_name(t) << " offset weights, n=" << n << " row " << j;
        }
        EXPECT_EQ(one, avx2.fn(n, wq.data(), xq.data() + size_t(j) * act_row_bytes(vd.act, n)))
            << type_name(t) << " " << isa_name(isa) << " against avx2, n=" << n;
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 48);
  EXPECT_EQ(with_offsets, isa == CpuIsa::AvxVnni ? 8 : 0);  // q8_0 and q4_0 at four lengths
}

// The decode kernel of four weight rows against one token gives each weight row bit for bit what
// the one-row kernel gives it (q4_0 on AVX-VNNI, the type that has one).
TEST(VecDot, FourWeightRowsEqualTheOneRowKernel) {
  if (detect_isa() < CpuIsa::AvxVnni) GTEST_SKIP() << "CPU has no avx-vnni";
  const GgmlType t = GgmlType::Q4_0;
  const VecDot vd = vec_dot_for(t, CpuIsa::AvxVnni);
  ASSERT_NE(vd.rows4c, nullptr);
  std::mt19937 rng(12);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (int64_t n : {32, 96, 576, 1568}) {
    std::vector<float> w(static_cast<size_t>(4 * n)), x(static_cast<size_t>(n));
    for (auto& v : w) v = nd(rng);
    for (auto& v : x) v = nd(rng) * (1.f + 9.f * float((&v - x.data()) % 97 == 3));
    const size_t w_rb = row_bytes(t, n);
    std::vector<uint8_t> wq(4 * w_rb), xq(act_row_bytes(vd.act, n));
    for (int j = 0; j < 4; ++j) quantize_row(t, w.data() + j * n, wq.data() + size_t(j) * w_rb, n);
    quantize_activations(vd.act, x.data(), xq.data(), n);
    std::vector<int32_t> corr(static_cast<size_t>(n / 4));
    act_corrections(xq.data(), n, vd.corr_bias, corr.data());
    float got[4] = {-1.f, -1.f, -1.f, -1.f};
    vd.rows4c(n, wq.data(), w_rb, xq.data(), corr.data(), got);
    for (int j = 0; j < 4; ++j) EXPECT_EQ(got[j], vd.fn(n, wq.data() + size_t(j) * w_rb, xq.data())) << "n=" << n << " row " << j;
  }
}

TEST(VecDot, FourRowKernelsEqualTheOneRowKernel) { four_rows_equal_one_row(CpuIsa::Avx2); }
TEST(VecDot, AvxVnniKernelsEqualTheAvx2Ones) { four_rows_equal_one_row(CpuIsa::AvxVnni); }

std::vector<Case> all_cases() {
  std::vector<Case> c;
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1,
                     GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q4_K, GgmlType::Q6_K})
    for (CpuIsa isa : {CpuIsa::Scalar, CpuIsa::Avx2, CpuIsa::AvxVnni})
      if (isa == CpuIsa::Scalar || (isa == CpuIsa::Avx2 ? avx2_kernel(t) : vnni_kernel(t))) c.push_back({t, isa});
  return c;
}

INSTANTIATE_TEST_SUITE_P(Kernels, VecDotTest, ::testing::ValuesIn(all_cases()), [](const auto& p) {
  std::string name = std::string(type_name(p.param.type)) + "_" + isa_name(p.param.isa);
  for (char& c : name)
    if (c == '-') c = '_';  // (test names are identifiers)
  return name;
});

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
