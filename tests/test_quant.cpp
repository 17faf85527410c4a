// Quant formats: hand-computed blocks for every type (values derived by hand from the layout
// in formats.md §2), round-trip error bounds for every quantiser, and reference-quantiser
// properties (llama.cpp's rounding rules).
#include "core/error.h"
#include "core/half.h"
#include "format/quant.h"
#include "format/quant_blocks.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

using namespace lamina;

namespace {

template <class B> std::vector<float> deq(GgmlType t, const B& b, int n) {
  std::vector<float> y(size_t(n), NAN);
  dequantize_row(t, &b, y.data(), n);
  return y;
}

TEST(QuantHand, Q4_0) {
  block_q4_0 b{};
  b.d = 0x3800;  // 0.5
  b.qs[0] = 0x9F;
  b.qs[3] = 0x08;
  const auto y = deq(GgmlType::Q4_0, b, 32);
  EXPECT_EQ(y[0], 3.5f);   // (15-8)*0.5
  EXPECT_EQ(y[16], 0.5f);  // (9-8)*0.5
  EXPECT_EQ(y[3], 0.f);
  EXPECT_EQ(y[19], -4.f);  // (0-8)*0.5
}

TEST(QuantHand, Q4_1) {
  block_q4_1 b{};
  b.d = 0x3400;  // 0.25
  b.m = 0xBC00;  // -1
  b.qs[1] = 0x3C;
  const auto y = deq(GgmlType::Q4_1, b, 32);
  EXPECT_EQ(y[1], 2.f);       // 12*0.25-1
  EXPECT_EQ(y[17], -0.25f);   // 3*0.25-1
  EXPECT_EQ(y[0], -1.f);
}

TEST(QuantHand, Q5_0AndQ5_1) {
  block_q5_0 a{};
  a.d = 0x3C00;  // 1
  a.qs[2] = 0x1F;
  a.qh[0] = 0x04;  // bit 2: fifth bit of element 2
  const auto y = deq(GgmlType::Q5_0, a, 32);
  EXPECT_EQ(y[2], 15.f);    // (15|16)-16
  EXPECT_EQ(y[18], -15.f);  // 1-16
  block_q5_1 b{};
  b.d = 0x3800;  // 0.5
  b.m = 0x4000;  // 2
  b.qh[2] = 0x01;  // bit 16
  const auto z = deq(GgmlType::Q5_1, b, 32);
  EXPECT_EQ(z[16], 10.f);  // 16*0.5+2
  EXPECT_EQ(z[0], 2.f);
}

TEST(QuantHand, Q8_0AndQ8_1) {
  block_q8_0 a{};
  a.d = 0x4000;  // 2
  a.qs[5] = -3;
  EXPECT_EQ(deq(GgmlType::Q8_0, a, 32)[5], -6.f);
  block_q8_1 b{};
  b.d = 0x3800;
  b.qs[31] = 100;
  EXPECT_EQ(deq(GgmlType::Q8_1, b, 32)[31], 50.f);
}

TEST(QuantHand, Q2_K) {
  block_q2_K b{};
  b.d = 0x3C00;     // 1
  b.dmin = 0x3800;  // 0.5
  b.scales[0] = 0x23;  // scale 3, min 2
  b.scales[2] = 0x15;  // scale 5, min 1
  b.scales[6] = 0x01;  // scale 1, min 0
  b.qs[0] = 0xE4;      // 2-bit fields 0,1,2,3 for j = 0..3
  const auto y = deq(GgmlType::Q2_K, b, 256);
  EXPECT_EQ(y[0], -1.f);   // 3*0 - 0.5*2
  EXPECT_EQ(y[32], 4.5f);  // 5*1 - 0.5*1
  EXPECT_EQ(y[64], 0.f);   // scales[4] = 0
  EXPECT_EQ(y[96], 3.f);   // 1*3
}

TEST(QuantHand, Q3_K) {
  block_q3_K b{};
  b.d = 0x3C00;
  b.qs[0] = 2;
  b.hmask[0] = 1;        // high bit set: no -4
  b.scales[0] = 0x05;    // t=0 low 4 bits
  b.scales[8] = 0x02;    // t=0 high 2 bits -> scale (5|32)-32 = 5
  b.qs[40] = 0x30;       // e=200: n=1, j=2, l=8 -> bits 4..5 = 3
  b.hmask[8] = 0x40;     // bit 4n+j = 6
  b.scales[4] = 0xF0;    // t=12 low 4 bits = 15, high bits 0 -> 15-32 = -17
  const auto y = deq(GgmlType::Q3_K, b, 256);
  EXPECT_EQ(y[0], 10.f);    // 5 * 2
  EXPECT_EQ(y[16], 128.f);  // t=1 scale -32, q = 0-4
  EXPECT_EQ(y[200], -51.f); // -17 * 3
}

TEST(QuantHand, Q4_KAndQ5_K) {
  block_q4_K b{};
  b.d = 0x3C00;
  b.dmin = 0x3C00;
  b.scales[0] = 3;  b.scales[4] = 1;     // t=0: scale 3, min 1
  b.scales[1] = 2;  b.scales[5] = 0;     // t=1: scale 2, min 0
  b.scales[11] = 0x21; b.scales[3] = 0x40;  // t=7: scale 1|16=17, min 2
  b.qs[0] = 0x52;
  b.qs[96] = 0xA0;
  const auto y = deq(GgmlType::Q4_K, b, 256);
  EXPECT_EQ(y[0], 5.f);     // 3*2 - 1
  EXPECT_EQ(y[32], 10.f);   // 2*5
  EXPECT_EQ(y[224], 168.f); // 17*10 - 2
  block_q5_K c{};
  c.d = b.d; c.dmin = b.dmin;
  std::memcpy(c.scales, b.scales, 12);
  std::memcpy(c.qs, b.qs, 128);
  c.qh[0] = 1;  // fifth bit of element 0
  const auto z = deq(GgmlType::Q5_K, c, 256);
  EXPECT_EQ(z[0], 53.f);    // 3*18 - 1
  EXPECT_EQ(z[32], 10.f);
}

// IQ4: d * value[nibble] (the table's ends -127 and 113), IQ4_XS's scale (ls - 32) from its low
// nibble in scales_l and high bits in scales_h; IQ4_NL held as Q8_0 gives the same values.
TEST(QuantHand, Iq4NlAndXs) {
  block_iq4_nl b{};
  b.d = 0x3800;  // 0.5
  b.qs[0] = 0xF0;  // element 0: nibble 0 (-127), element 16: nibble 15 (113)
  b.qs[3] = 0x08;  // element 3: nibble 8 (1)
  const auto y = deq(GgmlType::IQ4_NL, b, 32);
  EXPECT_EQ(y[0], -63.5f);
  EXPECT_EQ(y[16], 56.5f);
  EXPECT_EQ(y[3], 0.5f);
  EXPECT_EQ(y[1], -63.5f);  // nibble 0 everywhere else
  block_q8_0 q8{};
  iq4_nl_to_q8_0(&b, &q8, 1);
  std::vector<float> z(32);
  dequantize_row(GgmlType::Q8_0, &q8, z.data(), 32);
  EXPECT_EQ(z, y);
  block_iq4_xs c{};
  c.d = 0x3C00;        // 1
  c.scales_l[0] = 0x21;  // sub-block 0: low nibble 1; sub-block 1: 2
  c.scales_h = 0x0002;   // sub-block 0: high bits 2 -> ls = 1 | 32 = 33 (scale 1); sub-block 1: ls = 2 (scale -30)
  c.qs[0] = 0x9F;        // element 0: nibble 15 (113); element 16: nibble 9 (13)
  c.qs[16] = 0x01;       // sub-block 1, element 32: nibble 1 (-104)
  const auto x = deq(GgmlType::IQ4_XS, c, 256);
  EXPECT_EQ(x[0], 113.f);
  EXPECT_EQ(x[16], 13.f);
  EXPECT_EQ(x[32], -30.f * -104.f);
  EXPECT_EQ(x[64], -32.f * -127.f);  // sub-block 2: ls 0, nibble 0
}

TEST(QuantHand, Q6_K) {
  block_q6_K b{};
  b.d = 0x3800;  // 0.5
  b.ql[0] = 0x0A;
  b.qh[0] = 0x02;
  b.scales[0] = -2;
  b.ql[96] = 0x07;
  b.qh[32] = 0x0C;
  b.scales[10] = 3;
  const auto y = deq(GgmlType::Q6_K, b, 256);
  EXPECT_EQ(y[0], -10.f);   // 0.5 * -2 * ((10|32)-32)
  EXPECT_EQ(y[160], 34.5f); // 0.5 * 3 * ((7|48)-32)
}

TEST(QuantRef, Q8_0RoundsHalfAwayFromZero) {
  std::vector<float> x(32, 0.f);
  x[0] = 127.f;  // d = 1
  x[1] = 2.5f;
  x[2] = -2.5f;
  x[3] = 0.49f;
  block_q8_0 b;
  quantize_row(GgmlType::Q8_0, x.data(), &b, 32);
  EXPECT_EQ(f16_to_f32(b.d), 1.f);
  EXPECT_EQ(b.qs[0], 127);
  EXPECT_EQ(b.qs[1], 3);
  EXPECT_EQ(b.qs[2], -3);
  EXPECT_EQ(b.qs[3], 0);
}

TEST(QuantRef, Q4_0UsesSignedMaxAndTruncates) {
  std::vector<float> x(32, 0.f);
  x[7] = -8.f;   // M = -8 -> d = 1, the max maps to 0
  x[8] = 7.f;    // 7*(-1) + 8.5 = 1.5 -> 1
  x[9] = 2.6f;   // -2.6+8.5 = 5.9 -> 5
  block_q4_0 b;
  quantize_row(GgmlType::Q4_0, x.data(), &b, 32);
  EXPECT_EQ(f16_to_f32(b.d), 1.f);
  const auto y = deq(GgmlType::Q4_0, b, 32);
  EXPECT_EQ(y[7], -8.f);
  EXPECT_EQ(y[8], 7.f);
  EXPECT_EQ(y[9], 3.f);
  EXPECT_EQ(y[0], 0.f);
}

TEST(QuantRef, Q8_1StoresScaledSum) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0, 1);
  std::vector<float> x(32);
  for (auto& v : x) v = nd(rng);
  block_q8_1 b;
  quantize_row(GgmlType::Q8_1, x.data(), &b, 32);
  int sum = 0;
  for (int8_t q : b.qs) sum += q;
  EXPECT_NEAR(f16_to_f32(b.s), f16_to_f32(f32_to_f16(float(sum) * f16_to_f32(b.d))), 1e-2);
}

struct Bound {
  GgmlType type;
  double rel_rmse;  // bound on ||deq(q(x)) - x|| / ||x|| for Gaussian data
};

class RoundTrip : public ::testing::TestWithParam<Bound> {};

TEST_P(RoundTrip, ErrorWithinBound) {
  const auto [type, bound] = GetParam();
  std::mt19937 rng(42);
  std::normal_distribution<float> nd(0.f, 1.f);
  const int n = 256 * 64;
  std::vector<float> x(static_cast<size_t>(n)), y(static_cast<size_t>(n), NAN);
  for (auto& v : x) v = nd(rng) * (1.f + 0.5f * std::sin(float(&v - x.data()) / 300.f));
  std::vector<uint8_t> q(row_bytes(type, n));
  quantize_row(type, x.data(), q.data(), n);
  dequantize_row(type, q.data(), y.data(), n);
  double err = 0, ref = 0;
  for (int i = 0; i < n; ++i) {
    ASSERT_TRUE(std::isfinite(y[size_t(i)]));
    err += double(y[size_t(i)] - x[size_t(i)]) * (y[size_t(i)] - x[size_t(i)]);
    ref += double(x[size_t(i)]) * x[size_t(i)];
  }
  const double rel = std::sqrt(err / ref);
  EXPECT_LT(rel, bound) << type_name(type);
  EXPECT_GT(rel, bound / 20) << "suspiciously exact for " << type_name(type);
  // All-zero input quantises to exact zeros (no NaN from 0/0 scales).
  std::vector<float> z(static_cast<size_t>(n), 0.f);
  quantize_row(type, z.data(), q.data(), n);
  dequantize_row(type, q.data(), y.data(), n);
  for (float v : y) ASSERT_EQ(v, 0.f);
}

INSTANTIATE_TEST_SUITE_P(Types, RoundTrip,
  ::testing::Values(Bound{GgmlType::F16, 1e-3}, Bound{GgmlType::BF16, 8e-3}, Bound{GgmlType::Q8_0, 1e-2},
                    Bound{GgmlType::Q8_1, 1e-2}, Bound{GgmlType::Q5_0, 0.06}, Bound{GgmlType::Q5_1, 0.05},
                    Bound{GgmlType::Q4_0, 0.12}, Bound{GgmlType::Q4_1, 0.10}, Bound{GgmlType::Q4_K, 0.10},
                    Bound{GgmlType::Q5_K, 0.05}, Bound{GgmlType::Q6_K, 0.03}, Bound{GgmlType::Q3_K, 0.18},
                    Bound{GgmlType::Q2_K, 0.33}, Bound{GgmlType::IQ4_NL, 0.085}, Bound{GgmlType::IQ4_XS, 0.085}),
  [](const auto& p) { return std::string(type_name(p.param.type)); });

TEST(QuantRef, KQuantsBeatLegacyAtSameBits) {
  // The K-quant scale search must do at least as well as the simple legacy quantiser.
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.f, 1.f);
  const int n = 256 * 32;
  std::vector<float> x(static_cast<size_t>(n)), y(static_cast<size_t>(n));
  for (auto& v : x) v = nd(rng);
  auto rmse = [&](GgmlType t) {
    std::vector<uint8_t> q(row_bytes(t, n));
    quantize_row(t, x.data(), q.data(), n);
    dequantize_row(t, q.data(), y.data(), n);
    double e = 0;
    for (int i = 0; i < n; ++i) e += double(y[size_t(i)] - x[size_t(i)]) * (y[size_t(i)] - x[size_t(i)]);
    return std::sqrt(e / n);
  };
  EXPECT_LT(rmse(GgmlType::Q4_K), rmse(GgmlType::Q4_1));
  EXPECT_LT(rmse(GgmlType::Q5_K), rmse(GgmlType::Q5_1));
  EXPECT_LT(rmse(GgmlType::Q3_K), rmse(GgmlType::Q2_K));
  EXPECT_LT(rmse(GgmlType::Q4_K), rmse(GgmlType::Q3_K));
  EXPECT_LT(rmse(GgmlType::IQ4_NL), rmse(GgmlType::Q4_0));
  EXPECT_LT(rmse(GgmlType::Q6_K), rmse(GgmlType::Q5_0));
}

TEST(QuantRef, UnsupportedQuantiserThrows) {
  std::vector<float> x(256, 1.f);
  std::vector<uint8_t> q(1024);
  EXPECT_FALSE(can_quantize(GgmlType::Q8_K));
  EXPECT_THROW(quantize_row(GgmlType::Q8_K, x.data(), q.data(), 256), Error);
  EXPECT_THROW(quantize_row(GgmlType::Q8_0, x.data(), q.data(), 33), Error);
}

}  // namespace

// Q5_0 blocks as Q8_0 (how the backends hold Q5_0 matrices): every value the same, including
// the extremes q = 0 and 31 of both halves and the high bits of every element.
TEST(QuantRef, Q5_0AsQ8_0KeepsEveryValue) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.f, 1.f);
  constexpr int kBlocks = 64;
  std::vector<float> x(kBlocks * QK);
  for (float& v : x) v = nd(rng);
  x[0] = 8.f, x[1] = -8.f, x[QK / 2] = 8.f, x[QK / 2 + 1] = -8.f;  // the extremes of the first block
  std::vector<block_q5_0> q5(kBlocks);
  quantize_row(GgmlType::Q5_0, x.data(), q5.data(), int64_t(x.size()));
  std::vector<block_q8_0> q8(kBlocks);
  q5_0_to_q8_0(q5.data(), q8.data(), kBlocks);
  std::vector<float> a(x.size()), b(x.size());
  dequantize_row(GgmlType::Q5_0, q5.data(), a.data(), int64_t(a.size()));
  dequantize_row(GgmlType::Q8_0, q8.data(), b.data(), int64_t(b.size()));
  EXPECT_EQ(a, b);
  int lo = 0, hi = 0;
  for (const auto& blk : q8)
    for (int8_t v : blk.qs) lo += v == -16, hi += v == 15;
  EXPECT_GT(lo, 0);  // both ends of the 5-bit range were exercised
  EXPECT_GT(hi, 0);
}
