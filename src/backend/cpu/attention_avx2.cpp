// attention_cpu.h's kernel in AVX2 + FMA + F16C: 8-lane vectors (attention_x86.inc).
#include "backend/cpu/attention_cpu.h"
#include "backend/cpu/vec_math.h"

#include <algorithm>
#include <cmath>
#include <iterator>

#if defined(__x86_64__)
#include <immintrin.h>

#define LAMINA_X86 __attribute__((target("avx2,fma,f16c")))

namespace lamina {
namespace {

struct Simd {
  using V = __m256;
  static constexpr int W = 8;
  static constexpr CpuIsa kIsa = CpuIsa::Avx2;
  LAMINA_X86 static V zero() { return _mm256_setzero_ps(); }
  LAMINA_X86 static V load(const float* p) { return _mm256_loadu_ps(p); }
  LAMINA_X86 static V load(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  LAMINA_X86 static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  LAMINA_X86 static V set1(float x) { return _mm256_set1_ps(x); }
  LAMINA_X86 static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  LAMINA_X86 static float sum(const V (&parts)[2]) {  // lanes 0-7, then 8-15 of 16
    const V v = _mm256_add_ps(parts[0], parts[1]);
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
};

#include "backend/cpu/attention_x86.inc"

}  // namespace

AttendFn attend_avx2(GgmlType t) {
  return t == GgmlType::F16 ? attend_any<uint16_t> : t == GgmlType::F32 ? attend_any<float> : nullptr;
}

}  // namespace lamina
#else
namespace lamina {
AttendFn attend_avx2(GgmlType) { return nullptr; }
}  // namespace lamina
#endif
