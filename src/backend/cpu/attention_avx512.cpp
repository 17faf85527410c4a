// attention_cpu.h's kernel in AVX-512F: 16-lane vectors (attention_x86.inc); the portable one in
// the same orders (the scalar tier's); and attend_for.
#include "backend/cpu/attention_cpu.h"
#include "backend/cpu/vec_math.h"
#include "core/half.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <type_traits>

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
namespace {

// attention_x86.inc's orders in portable code: a score's products by fma in 16 lanes (element c
// in lane c % 16), summed as Simd::sum (lanes l and l + 8, then l and l + 4, then (0 + 2) +
// (1 + 3)); an output element's fmas over the positions in turn. So where hd is a multiple of 8
// it gives the SIMD kernels' bits; it serves the scalar tier, and head sizes the SIMD widths do
// not divide.
template <class KT>
float kv_at(const uint8_t* row, int c) {
  if constexpr (std::is_same_v<KT, uint16_t>) return f16_to_f32(reinterpret_cast<const uint16_t*>(row)[c]);
  else return reinterpret_cast<const float*>(row)[c];
}

template <class KT>
void attend_portable(int hd, int nq, const float* q, size_t q_stride, const uint8_t* k, const uint8_t* v,
                     const size_t* offs, int64_t n, float scale, float* scores, float* out, size_t out_stride) {
  for (int i = 0; i < nq; ++i) {
    const float* qi = q + size_t(i) * q_stride;
    float* s = scores + size_t(i) * size_t(n);
    for (int64_t j = 0; j < n; ++j) {
      float acc[16] = {};
      for (int c = 0; c < hd; ++c) acc[c % 16] = std::fma(kv_at<KT>(k + offs[j], c), qi[c], acc[c % 16]);
      float h[8], r[4];
      for (int l = 0; l < 8; ++l) h[l] = acc[l] + acc[l + 8];
      for (int l = 0; l < 4; ++l) r[l] = h[l] + h[l + 4];
      s[j] = ((r[0] + r[2]) + (r[1] + r[3])) * scale;
    }
    float mx = -INFINITY;
    for (int64_t j = 0; j < n; ++j) mx = std::max(mx, s[j]);
    exp_shifted(s, n, mx, CpuIsa::Scalar);
    double sum = 0;
    for (int64_t j = 0; j < n; ++j) sum += s[j];
    const float inv = float(1.0 / sum);
    for (int64_t j = 0; j < n; ++j) s[j] *= inv;
    float* o = out + size_t(i) * out_stride;
    std::fill(o, o + hd, 0.f);
    for (int64_t j = 0; j < n; ++j)
      for (int c = 0; c < hd; ++c) o[c] = std::fma(s[j], kv_at<KT>(v + offs[j], c), o[c]);
  }
}

}  // namespace

AttendFn attend_for(GgmlType kv_type, CpuIsa isa, int hd) {
  if (isa >= CpuIsa::Avx512 && hd % 16 == 0)
    if (AttendFn f = attend_avx512(kv_type)) return f;
  if (isa >= CpuIsa::Avx2 && hd % 8 == 0)
    if (AttendFn f = attend_avx2(kv_type)) return f;
  return kv_type == GgmlType::F16 ? attend_portable<uint16_t> : kv_type == GgmlType::F32 ? attend_portable<float> : nullptr;
}

}  // namespace lamina
