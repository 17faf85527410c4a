// vec_math.h's functions: one algorithm, three evaluations (portable, AVX2 8 lanes, AVX-512 16
// lanes) with the same operations in the same order, fused multiply-adds where the portable code
// calls std::fma, so every element gets the same bits whichever code ran it.
#include "backend/cpu/vec_math.h"

#include "core/half.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>

#if defined(__x86_64__)
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12: AVX-512 intrinsics' pass-through operands
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#endif

namespace lamina {
namespace {

// exp in double: x = n ln 2 + r (|r| <= ln 2 / 2, r exact to ~1e-16 with ln 2 in two parts), e^r
// by its Taylor polynomial to degree 11 (truncation 6e-15 relative), times 2^n from the exponent
// bits; rounded once to float at the end. The float result is then the correctly rounded exp(x)
// except within ~1e-5 ulp of a rounding midpoint, as glibc's expf (< 0.502 ulp) is: the two agree
// on practically every input, so the fast path's 8-bit activations downstream round as before.
constexpr double kLog2e = 1.4426950408889634;
constexpr double kLn2Hi = 0.6931471803691238, kLn2Lo = 1.9082149292705877e-10;  // ln 2 = hi + lo
constexpr double kHi = 89.0, kLo = -104.0;  // exp beyond them rounds to float inf / 0 anyway
// 1 / k! for k = 11 .. 2.
constexpr double kC[] = {2.505210838544172e-08, 2.755731922398589e-07, 2.7557319223985893e-06, 2.48015873015873e-05,
                         1.984126984126984e-04, 1.388888888888889e-03, 8.333333333333333e-03, 4.1666666666666664e-02,
                         1.6666666666666666e-01, 0.5};

}  // namespace

float exp_poly(float xf) {
  if (xf != xf) return xf;
  const double x = std::min(kHi, std::max(kLo, double(xf)));
  const double n = std::nearbyint(x * kLog2e);
  double r = std::fma(n, -kLn2Hi, x);
  r = std::fma(n, -kLn2Lo, r);
  double p = kC[0];
  for (size_t i = 1; i < std::size(kC); ++i) p = std::fma(p, r, kC[i]);
  p = std::fma(p, r, 1.0);
  p = std::fma(p, r, 1.0);
  const int64_t bits = (int64_t(n) + 1023) << 52;  // 2^n, n in [-151, 129]
  double two_n;
  std::memcpy(&two_n, &bits, 8);
  return float(p * two_n);
}

namespace {

float silu_mul_one(float g, float u) { return g / (1.f + exp_poly(-g)) * u; }

#if defined(__x86_64__)
#define LAMINA_AVX2 __attribute__((target("avx2,fma")))
#define LAMINA_AVX512 __attribute__((target("avx2,fma,avx512f")))
#define LAMINA_AVX2F16C __attribute__((target("avx2,fma,f16c")))

LAMINA_AVX2 __m128 exp4(__m128 xf) {
  const __m256d x = _mm256_min_pd(_mm256_set1_pd(kHi), _mm256_max_pd(_mm256_set1_pd(kLo), _mm256_cvtps_pd(xf)));
  const __m256d n = _mm256_round_pd(_mm256_mul_pd(x, _mm256_set1_pd(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256d r = _mm256_fmadd_pd(n, _mm256_set1_pd(-kLn2Hi), x);
  r = _mm256_fmadd_pd(n, _mm256_set1_pd(-kLn2Lo), r);
  __m256d p = _mm256_set1_pd(kC[0]);
  for (size_t i = 1; i < std::size(kC); ++i) p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(kC[i]));
  p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(1.0));
  p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(1.0));
  const __m256i e = _mm256_slli_epi64(_mm256_add_epi64(_mm256_cvtepi32_epi64(_mm256_cvtpd_epi32(n)), _mm256_set1_epi64x(1023)), 52);
  const __m128 y = _mm256_cvtpd_ps(_mm256_mul_pd(p, _mm256_castsi256_pd(e)));
  return _mm_blendv_ps(y, xf, _mm_cmp_ps(xf, xf, _CMP_UNORD_Q));  // NaN stays NaN
}
LAMINA_AVX2 __m256 exp8(__m256 x) {
  return _mm256_set_m128(exp4(_mm256_extractf128_ps(x, 1)), exp4(_mm256_castps256_ps128(x)));
}

LAMINA_AVX512 __m256 exp8_512(__m256 xf) {
  const __m512d x = _mm512_min_pd(_mm512_set1_pd(kHi), _mm512_max_pd(_mm512_set1_pd(kLo), _mm512_cvtps_pd(xf)));
  const __m512d n = _mm512_roundscale_pd(_mm512_mul_pd(x, _mm512_set1_pd(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512d r = _mm512_fmadd_pd(n, _mm512_set1_pd(-kLn2Hi), x);
  r = _mm512_fmadd_pd(n, _mm512_set1_pd(-kLn2Lo), r);
  __m512d p = _mm512_set1_pd(kC[0]);
  for (size_t i = 1; i < std::size(kC); ++i) p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(kC[i]));
  p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(1.0));
  p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(1.0));
  const __m512i e = _mm512_slli_epi64(_mm512_add_epi64(_mm512_cvtepi32_epi64(_mm512_cvtpd_epi32(n)), _mm512_set1_epi64(1023)), 52);
  const __m256 y = _mm512_cvtpd_ps(_mm512_mul_pd(p, _mm512_castsi512_pd(e)));
  return _mm256_blendv_ps(y, xf, _mm256_cmp_ps(xf, xf, _CMP_UNORD_Q));
}
LAMINA_AVX512 __m512 exp16(__m512 x) {
  const __m256 lo = exp8_512(_mm512_castps512_ps256(x));
  const __m256 hi = exp8_512(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
  return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(lo)), _mm256_castps_pd(hi), 1));
}

LAMINA_AVX2 void silu_mul_avx2(float* g, const float* u, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(g + i);
    const __m256 e = exp8(_mm256_xor_ps(x, _mm256_set1_ps(-0.f)));  // -x
    _mm256_storeu_ps(g + i, _mm256_mul_ps(_mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.f), e)), _mm256_loadu_ps(u + i)));
  }
  for (; i < n; ++i) g[i] = silu_mul_one(g[i], u[i]);
}

LAMINA_AVX512 void silu_mul_avx512(float* g, const float* u, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1);
    const __m512 x = _mm512_maskz_loadu_ps(m, g + i);
    const __m512 e = exp16(_mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(x), _mm512_set1_epi32(INT32_MIN))));  // -x
    _mm512_mask_storeu_ps(g + i, m, _mm512_mul_ps(_mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.f), e)), _mm512_maskz_loadu_ps(m, u + i)));
  }
}

LAMINA_AVX2 void exp_shifted_avx2(float* s, int64_t n, float mx) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(s + i, exp8(_mm256_sub_ps(_mm256_loadu_ps(s + i), _mm256_set1_ps(mx))));
  for (; i < n; ++i) s[i] = exp_poly(s[i] - mx);
}

LAMINA_AVX512 void exp_shifted_avx512(float* s, int64_t n, float mx) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(s + i, m, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, s + i), _mm512_set1_ps(mx))));
  }
}
LAMINA_AVX2F16C void f32_to_f16_avx2(const float* x, uint16_t* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; ++i) y[i] = f32_to_f16(x[i]);
}
#endif

}  // namespace

void f32_to_f16_row(const float* x, uint16_t* y, int64_t n, CpuIsa isa) {
#if defined(__x86_64__)
  if (isa >= CpuIsa::Avx2) return f32_to_f16_avx2(x, y, n);
#endif
  (void)isa;
  for (int64_t i = 0; i < n; ++i) y[i] = f32_to_f16(x[i]);
}

void silu_mul(float* g, const float* u, int64_t n, CpuIsa isa) {
#if defined(__x86_64__)
  if (isa >= CpuIsa::Avx512) return silu_mul_avx512(g, u, n);
  if (isa >= CpuIsa::Avx2) return silu_mul_avx2(g, u, n);
#endif
  (void)isa;
  for (int64_t i = 0; i < n; ++i) g[i] = silu_mul_one(g[i], u[i]);
}

void exp_shifted(float* s, int64_t n, float m, CpuIsa isa) {
#if defined(__x86_64__)
  if (isa >= CpuIsa::Avx512) return exp_shifted_avx512(s, n, m);
  if (isa >= CpuIsa::Avx2) return exp_shifted_avx2(s, n, m);
#endif
  (void)isa;
  for (int64_t i = 0; i < n; ++i) s[i] = exp_poly(s[i] - m);
}

}  // namespace lamina
