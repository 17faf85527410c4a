// attention_cpu.h's kernel in AVX-512F: 16-lane vectors (attention_x86.inc); and attend_for.
#include "backend/cpu/attention_cpu.h"
#include "backend/cpu/vec_math.h"

#include <algorithm>
#include <cmath>
#include <iterator>

#if defined(__x86_64__)
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12: AVX-512 intrinsics' pass-through operands
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#define LAMINA_X86 __attribute__((target("avx2,fma,f16c,avx512f")))

namespace lamina {
namespace {

struct Simd {
  using V = __m512;
  static constexpr int W = 16;
  static constexpr CpuIsa kIsa = CpuIsa::Avx512;
  LAMINA_X86 static V zero() { return _mm512_setzero_ps(); }
  LAMINA_X86 static V load(const float* p) { return _mm512_loadu_ps(p); }
  LAMINA_X86 static V load(const uint16_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  LAMINA_X86 static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  LAMINA_X86 static V set1(float x) { return _mm512_set1_ps(x); }
  LAMINA_X86 static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  LAMINA_X86 static float sum(const V (&parts)[1]) {  // halves added, then as AVX2's sum
    const V v = parts[0];
    const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
};

#include "backend/cpu/attention_x86.inc"

}  // namespace

AttendFn attend_avx512(GgmlType t) {
  return t == GgmlType::F16 ? attend_any<uint16_t> : t == GgmlType::F32 ? attend_any<float> : nullptr;
}

}  // namespace lamina
#else
namespace lamina {
AttendFn attend_avx512(GgmlType) { return nullptr; }
}  // namespace lamina
#endif

namespace lamina {

AttendFn attend_for(GgmlType kv_type, CpuIsa isa, int hd) {
  if (isa >= CpuIsa::Avx512 && hd % 16 == 0) return attend_avx512(kv_type);
  if (isa >= CpuIsa::Avx2 && hd % 8 == 0) return attend_avx2(kv_type);
  return nullptr;
}

}  // namespace lamina
