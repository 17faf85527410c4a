// f16/bf16 conversions against independent references: the compiler's _Float16 (IEEE
// round-to-nearest-even) and the bf16 rounding rule written out in double precision.
#include "core/half.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

using namespace lamina;

TEST(Half, F16ToF32AllValues) {
  for (uint32_t h = 0; h < 65536; ++h) {
    _Float16 ref;
    const uint16_t bits = uint16_t(h);
    std::memcpy(&ref, &bits, 2);
    const float got = f16_to_f32(bits);
    if (std::isnan(float(ref))) {
      ASSERT_TRUE(std::isnan(got)) << h;
    } else {
      ASSERT_EQ(got, float(ref)) << h;
      ASSERT_EQ(std::signbit(got), std::signbit(float(ref))) << h;
    }
  }
}

TEST(Half, F32ToF16MatchesCompiler) {
  std::mt19937 rng(1);
  auto check = [](float x) {
    const _Float16 ref = _Float16(x);
    uint16_t rbits;
    std::memcpy(&rbits, &ref, 2);
    const uint16_t got = f32_to_f16(x);
    if (std::isnan(x)) ASSERT_TRUE((got & 0x7C00) == 0x7C00 && (got & 0x3FF)) << x;
    else ASSERT_EQ(got, rbits) << x;
  };
  for (int i = 0; i < 2000000; ++i) {  // random bit patterns cover every exponent
    const uint32_t u = uint32_t(rng());
    check(bits_f32(u));
  }
  for (uint32_t h = 0; h < 65536; ++h) {  // ties between neighbouring halves
    const float a = f16_to_f32(uint16_t(h));
    if (!std::isfinite(a)) continue;
    check(std::nextafter(a, INFINITY));
    check(std::nextafter(a, -INFINITY));
    check(a);
  }
  check(65519.f);
  check(65520.f);  // rounds to inf
  check(1e-8f);
  check(-0.f);
}

TEST(Half, Bf16) {
  EXPECT_EQ(bf16_to_f32(0x3F80), 1.f);
  EXPECT_EQ(f32_to_bf16(1.f), 0x3F80);
  std::mt19937 rng(2);
  for (int i = 0; i < 1000000; ++i) {
    const uint32_t u = uint32_t(rng());
    const float x = bits_f32(u);
    if (std::isnan(x)) {
      EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(x))));
      continue;
    }
    // Reference: the nearest bf16 (ties to even) computed from the two candidates.
    const uint32_t lo = u & 0xFFFF0000u, hi = lo + 0x10000u;
    const double dlo = std::fabs(double(bits_f32(lo)) - double(x));
    const double dhi = std::isinf(bits_f32(hi)) && !std::isinf(x)
                           ? std::fabs(std::ldexp(1.0, 128) * (x < 0 ? -1 : 1) - double(x))
                           : std::fabs(double(bits_f32(hi)) - double(x));
    uint32_t want = dlo < dhi ? lo : dhi < dlo ? hi : (((lo >> 16) & 1) ? hi : lo);
    ASSERT_EQ(f32_to_bf16(x), uint16_t(want >> 16)) << std::hex << u;
  }
}
