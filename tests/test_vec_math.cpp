// vec_math.h: exp_poly correctly rounded over float's range (against double's exp), and silu_mul /
// exp_shifted giving the portable code's bits on every tier, tails included.
#include "backend/cpu/vec_math.h"
#include "core/half.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

using namespace lamina;

TEST(VecMath, ExpPolyIsCorrectlyRounded) {
  double worst = 0;
  int64_t n = 0, not_nearest = 0, not_libm = 0;
  for (float x = -103.f; x <= 88.7f; x += 0.000731f, ++n) {
    const double want = std::exp(double(x));
    const float got = exp_poly(x);
    const double ulp = std::ldexp(1.0, std::max(std::ilogb(want), -126) - 23);
    worst = std::max(worst, std::fabs(double(got) - want) / ulp);
    not_nearest += got != float(want);
    not_libm += got != std::exp(x);
  }
  EXPECT_LE(worst, 0.501);
  EXPECT_LE(not_nearest, n / 100000) << "of " << n;
  std::printf("exp_poly: largest error %.4f ulp; %lld of %lld not the nearest float, %lld not libm's expf\n", worst,
              (long long)not_nearest, (long long)n, (long long)not_libm);
  EXPECT_EQ(exp_poly(0.f), 1.f);
  EXPECT_GT(exp_poly(-100.f), 0.f);  // subnormal
  EXPECT_EQ(exp_poly(-110.f), 0.f);
  EXPECT_EQ(exp_poly(89.f), INFINITY);
  EXPECT_EQ(exp_poly(-INFINITY), 0.f);
  EXPECT_EQ(exp_poly(INFINITY), INFINITY);
  EXPECT_TRUE(std::isnan(exp_poly(NAN)));
}

TEST(VecMath, EveryTierGivesThePortableBits) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.f, 4.f);
  for (int64_t n : {1, 7, 8, 15, 16, 17, 100, 1000}) {
    std::vector<float> g(static_cast<size_t>(n)), u(static_cast<size_t>(n));
    for (auto& v : g) v = nd(rng);
    for (auto& v : u) v = nd(rng);
    g[0] = -95.f;  // exp(-g) past the overflow bound
    std::vector<float> want_silu = g, want_exp = g;
    silu_mul(want_silu.data(), u.data(), n, CpuIsa::Scalar);
    exp_shifted(want_exp.data(), n, 1.5f, CpuIsa::Scalar);
    for (int64_t i = 0; i < n; ++i) {
      const float x = g[size_t(i)];
      EXPECT_NEAR(want_silu[size_t(i)], double(x) / (1 + std::exp(-double(x))) * u[size_t(i)], 1e-6 * (1 + std::fabs(x * u[size_t(i)])));
    }
    for (CpuIsa isa : {CpuIsa::Avx2, CpuIsa::Avx512}) {
      if (!cpu_runs(isa)) continue;
      std::vector<float> s = g, e = g;
      silu_mul(s.data(), u.data(), n, isa);
      exp_shifted(e.data(), n, 1.5f, isa);
      EXPECT_EQ(std::memcmp(s.data(), want_silu.data(), size_t(n) * 4), 0) << isa_name(isa) << " silu n=" << n;
      EXPECT_EQ(std::memcmp(e.data(), want_exp.data(), size_t(n) * 4), 0) << isa_name(isa) << " exp n=" << n;
    }
  }
}

// The KV cache's f16 stores: F16C's conversion gives core/half.h's bits (ties to even,
// subnormals, overflow to inf, NaN quieted).
TEST(VecMath, F16RowEqualsThePortableConversion) {
  std::mt19937 rng(4);
  std::vector<float> x;
  for (int e = -30; e <= 17; ++e)
    for (int k = 0; k < 64; ++k) x.push_back(std::ldexp(1.f + float(rng() % 8192) / 8192.f, e) * (k % 2 ? -1.f : 1.f));
  for (float v : {0.f, -0.f, 65504.f, 65519.f, 65520.f, 1e9f, -1e9f, INFINITY, -INFINITY, NAN, 5.9604645e-8f, 2.9802322e-8f,
                  1.0009765625f, 1.00048828125f, 1.00146484375f})  // the last three: ties to even, both ways
    x.push_back(v);
  for (CpuIsa isa : {CpuIsa::Scalar, CpuIsa::Avx2}) {
    if (!cpu_runs(isa)) continue;
    std::vector<uint16_t> y(x.size());
    f32_to_f16_row(x.data(), y.data(), int64_t(x.size()), isa);
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(y[i], f32_to_f16(x[i])) << isa_name(isa) << " x=" << x[i];
  }
}
