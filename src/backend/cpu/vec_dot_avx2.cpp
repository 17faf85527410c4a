// AVX2 + FMA + F16C row dot products. Each function carries a target attribute, so this file
// builds without -mavx2 and the dispatcher only calls it on CPUs that have the extensions.
//
// Integer kernels follow one pattern: widen 32 weights to signed or unsigned bytes, multiply
// with 32 activation bytes by _mm256_maddubs_epi16 (u8 x s8 -> pairs summed to s16; the
// signed x signed case moves the sign onto the activation with _mm256_sign_epi8), sum pairs to
// s32 with _mm256_madd_epi16, then scale by the blocks' f32 factors in a float accumulator.
#include "backend/cpu/vec_dot.h"

#include "core/half.h"
#include "format/quant_blocks.h"

#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>

#define LAMINA_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace lamina {
namespace {

// One-instruction f16 -> f32 (F16C); the portable core/half.h version is branchy integer code.
LAMINA_AVX2 inline float h2f(uint16_t h) { return _cvtsh_ss(h); }

LAMINA_AVX2 inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
LAMINA_AVX2 inline int hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}
// Sum of products of signed bytes, as 8 x s32.
LAMINA_AVX2 inline __m256i dot_s8(__m256i a, __m256i b) {
  const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a));
  return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}
// Sum of products of unsigned bytes a with signed bytes b, as 8 x s32.
LAMINA_AVX2 inline __m256i dot_u8s8(__m256i a, __m256i b) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1));
}
// 16 packed nibble bytes -> 32 bytes: low nibbles (elements 0..15) then high (16..31).
LAMINA_AVX2 inline __m256i unpack_nibbles(const uint8_t* qs) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(raw, 4), raw);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}
LAMINA_AVX2 inline __m256i load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

LAMINA_AVX2 float dot_f32(int64_t n, const void* w, const void* x) {
  const float* a = static_cast<const float*>(w);
  const float* b = static_cast<const float*>(x);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  float s = hsum(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

LAMINA_AVX2 float dot_f16(int64_t n, const void* w, const void* x) {
  const uint16_t* a = static_cast<const uint16_t*>(w);
  const float* b = static_cast<const float*>(x);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 w0 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i)));
    const __m256 w1 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i + 8)));
    acc0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(b + i + 8), acc1);
  }
  float s = hsum(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) s += h2f(a[i]) * b[i];
  return s;
}

LAMINA_AVX2 float dot_bf16(int64_t n, const void* w, const void* x) {
  const uint16_t* a = static_cast<const uint16_t*>(w);
  const float* b = static_cast<const float*>(x);
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i)));
    acc = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(h, 16)), _mm256_loadu_ps(b + i), acc);
  }
  float s = hsum(acc);
  for (; i < n; ++i) s += bf16_to_f32(a[i]) * b[i];
  return s;
}

// Two f16 fields stored next to each other (d, m) as floats in lanes 0 and 1.
LAMINA_AVX2 inline __m128 h2f_pair(const uint16_t* p) {
  uint32_t bits;
  std::memcpy(&bits, p, 4);
  return _mm_cvtph_ps(_mm_cvtsi32_si128(int(bits)));
}

LAMINA_AVX2 float dot_q4_0(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const block_q4_0*>(w);
  const auto* b = static_cast<const act_q8*>(x);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  const __m256i eight = _mm256_set1_epi8(8);
  const int64_t nb = n / QK;
  for (int64_t i = 0; i < nb; ++i) {  // odd and even blocks in two independent accumulators
    const __m256i q = _mm256_sub_epi8(unpack_nibbles(a[i].qs), eight);
    const __m256i p = dot_s8(q, load32(b[i].qs));
    const __m256 d = _mm256_set1_ps(h2f(a[i].d) * b[i].d);
    if (i & 1) acc1 = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc1);
    else acc0 = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc0);
  }
  return hsum(_mm256_add_ps(acc0, acc1));
}

LAMINA_AVX2 float dot_q4_1(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const block_q4_1*>(w);
  const auto* b = static_cast<const act_q8s*>(x);
  // The offset term m*s goes into the same accumulator, spread over the 8 lanes, so that it
  // cancels against its block's main term before rounding (a separate running sum of the
  // m*s terms loses precision when activations have outliers).
  const __m128 eighth = _mm_setr_ps(1.f, 0.125f, 0.f, 0.f);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  const int64_t nb = n / QK;
  for (int64_t i = 0; i < nb; ++i) {
    const __m256i p = dot_u8s8(unpack_nibbles(a[i].qs), load32(b[i].qs));
    // [d_w * d_x, m_w * s_x / 8] with one conversion and two multiplies
    const __m128 xs = _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(&b[i].d)));
    const __m128 dm = _mm_mul_ps(_mm_mul_ps(h2f_pair(&a[i].d), xs), eighth);
    const __m256 d = _mm256_broadcastss_ps(dm);
    const __m256 m = _mm256_broadcastss_ps(_mm_movehdup_ps(dm));
    const __m256 v = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), m);
    if (i & 1) acc1 = _mm256_add_ps(acc1, v);
    else acc0 = _mm256_add_ps(acc0, v);
  }
  return hsum(_mm256_add_ps(acc0, acc1));
}

LAMINA_AVX2 float dot_q8_0(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const block_q8_0*>(w);
  const auto* b = static_cast<const act_q8*>(x);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  const int64_t nb = n / QK;
  for (int64_t i = 0; i < nb; ++i) {
    const __m256i p = dot_s8(load32(a[i].qs), load32(b[i].qs));
    const __m256 d = _mm256_set1_ps(h2f(a[i].d) * b[i].d);
    if (i & 1) acc1 = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc1);
    else acc0 = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc0);
  }
  return hsum(_mm256_add_ps(acc0, acc1));
}

// Four activation rows (x, x + stride, ...) against one weight row: the prompt path, where each
// weight block is unpacked once for four tokens instead of once per token. Each token's sums run
// in exactly the order of the one-row kernel above (same accumulators by block parity, same
// products), so out[j] is bit for bit what dot_<type>(n, w, x + j * stride) returns.
template <class Act>
LAMINA_AVX2 inline const Act* act_row(const void* x, size_t stride, int j) {
  return reinterpret_cast<const Act*>(static_cast<const uint8_t*>(x) + size_t(j) * stride);
}

// The signed-weight types (q4_0: nibbles - 8; q8_0: bytes) share one four-row kernel; a
// block's quants as 32 signed bytes:
LAMINA_AVX2 inline __m256i quants_s8(const block_q4_0& b) {
  return _mm256_sub_epi8(unpack_nibbles(b.qs), _mm256_set1_epi8(8));
}
LAMINA_AVX2 inline __m256i quants_s8(const block_q8_0& b) { return load32(b.qs); }

template <class Block>
LAMINA_AVX2 void dot4_s8(int64_t n, const void* w, const void* x, size_t stride, float* out) {
  const auto* a = static_cast<const Block*>(w);
  const act_q8* b[4] = {act_row<act_q8>(x, stride, 0), act_row<act_q8>(x, stride, 1), act_row<act_q8>(x, stride, 2),
                        act_row<act_q8>(x, stride, 3)};
  __m256 acc[4][2];
  for (auto& p : acc) p[0] = p[1] = _mm256_setzero_ps();
  const int64_t nb = n / QK;
  for (int64_t i = 0; i < nb; ++i) {
    const __m256i q = quants_s8(a[i]);
    const __m256i uq = _mm256_sign_epi8(q, q);  // dot_s8's |q|, once for the four rows
    const float dw = h2f(a[i].d);
    for (int j = 0; j < 4; ++j) {
      const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(uq, _mm256_sign_epi8(load32(b[j][i].qs), q)),
                                          _mm256_set1_epi16(1));
      const __m256 d = _mm256_set1_ps(dw * b[j][i].d);
      acc[j][i & 1] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc[j][i & 1]);
    }
  }
  for (int j = 0; j < 4; ++j) out[j] = hsum(_mm256_add_ps(acc[j][0], acc[j][1]));
}

LAMINA_AVX2 void dot4_q4_1(int64_t n, const void* w, const void* x, size_t stride, float* out) {
  const auto* a = static_cast<const block_q4_1*>(w);
  const act_q8s* b[4] = {act_row<act_q8s>(x, stride, 0), act_row<act_q8s>(x, stride, 1), act_row<act_q8s>(x, stride, 2),
                         act_row<act_q8s>(x, stride, 3)};
  const __m128 eighth = _mm_setr_ps(1.f, 0.125f, 0.f, 0.f);
  __m256 acc[4][2];
  for (auto& p : acc) p[0] = p[1] = _mm256_setzero_ps();
  const int64_t nb = n / QK;
  for (int64_t i = 0; i < nb; ++i) {
    const __m256i q = unpack_nibbles(a[i].qs);
    const __m128 wdm = h2f_pair(&a[i].d);
    for (int j = 0; j < 4; ++j) {
      const __m256i p = dot_u8s8(q, load32(b[j][i].qs));
      const __m128 xs = _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(&b[j][i].d)));
      const __m128 dm = _mm_mul_ps(_mm_mul_ps(wdm, xs), eighth);
      const __m256 d = _mm256_broadcastss_ps(dm);
      const __m256 m = _mm256_broadcastss_ps(_mm_movehdup_ps(dm));
      acc[j][i & 1] = _mm256_add_ps(acc[j][i & 1], _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), m));
    }
  }
  for (int j = 0; j < 4; ++j) out[j] = hsum(_mm256_add_ps(acc[j][0], acc[j][1]));
}

LAMINA_AVX2 float dot_q4_K(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const block_q4_K*>(w);
  const auto* b = static_cast<const block_q8_K*>(x);
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  float total = 0;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    uint8_t sc[8], mn[8];
    for (int t = 0; t < 8; ++t) q4k_scale_min(t, a[i].scales, &sc[t], &mn[t]);
    int sum_min = 0;
    for (int t = 0; t < 8; ++t) sum_min += mn[t] * (b[i].bsums[2 * t] + b[i].bsums[2 * t + 1]);
    __m256i sumi = _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {  // 64 elements: 32 low nibbles (sub-block 2c), 32 high (2c+1)
      const __m256i raw = load32(a[i].qs + 32 * c);
      const __m256i lo = _mm256_and_si256(raw, low4);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
      const __m256i plo = _mm256_maddubs_epi16(lo, load32(b[i].qs + 64 * c));
      const __m256i phi = _mm256_maddubs_epi16(hi, load32(b[i].qs + 64 * c + 32));
      sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(plo, _mm256_set1_epi16(sc[2 * c])));
      sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(phi, _mm256_set1_epi16(sc[2 * c + 1])));
    }
    total += b[i].d * (h2f(a[i].d) * float(hsum_i32(sumi)) - h2f(a[i].dmin) * float(sum_min));
  }
  return total;
}

LAMINA_AVX2 float dot_q6_K(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const block_q6_K*>(w);
  const auto* b = static_cast<const block_q8_K*>(x);
  const __m256i low4 = _mm256_set1_epi8(0x0F), two = _mm256_set1_epi8(3);
  float total = 0;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    // sum_g scale_g * sum_e (q_e + 32) y_e  -  32 * sum_g scale_g * bsum_g
    int bias = 0;
    for (int g = 0; g < 16; ++g) bias += a[i].scales[g] * b[i].bsums[g];
    __m256i sumi = _mm256_setzero_si256();
    for (int half = 0; half < 2; ++half) {
      const __m256i ql0 = load32(a[i].ql + 64 * half);
      const __m256i ql1 = load32(a[i].ql + 64 * half + 32);
      const __m256i qh = load32(a[i].qh + 32 * half);
      const __m256i q[4] = {
          _mm256_or_si256(_mm256_and_si256(ql0, low4), _mm256_slli_epi16(_mm256_and_si256(qh, two), 4)),
          _mm256_or_si256(_mm256_and_si256(ql1, low4),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), two), 4)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), two), 4)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), two), 4)),
      };
      for (int k = 0; k < 4; ++k) {
        const int g = 8 * half + 2 * k;  // two groups of 16 per 32 elements
        const __m256i p = _mm256_maddubs_epi16(q[k], load32(b[i].qs + 128 * half + 32 * k));
        const __m256i s = _mm256_set_m128i(_mm_set1_epi16(a[i].scales[g + 1]), _mm_set1_epi16(a[i].scales[g]));
        sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, s));
      }
    }
    total += b[i].d * h2f(a[i].d) * float(hsum_i32(sumi) - 32 * bias);
  }
  return total;
}

LAMINA_AVX2 void axpy_f16(int64_t n, float a, const void* x, float* y) {
  const uint16_t* xh = static_cast<const uint16_t*>(x);
  const __m256 av = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 xv = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xh + i)));
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, xv, _mm256_loadu_ps(y + i)));
  }
  for (; i < n; ++i) y[i] += a * h2f(xh[i]);
}

LAMINA_AVX2 void axpy_f32(int64_t n, float a, const void* x, float* y) {
  const float* xf = static_cast<const float*>(x);
  const __m256 av = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(xf + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += a * xf[i];
}

}  // namespace

AxpyFn avx2_axpy(GgmlType t) {
  return t == GgmlType::F16 ? axpy_f16 : t == GgmlType::F32 ? axpy_f32 : nullptr;
}

VecDotFn avx2_kernel(GgmlType t) {
  switch (t) {
    case GgmlType::F32: return dot_f32;
    case GgmlType::F16: return dot_f16;
    case GgmlType::BF16: return dot_bf16;
    case GgmlType::Q4_0: return dot_q4_0;
    case GgmlType::Q4_1: return dot_q4_1;
    case GgmlType::Q8_0: return dot_q8_0;
    case GgmlType::Q4_K: return dot_q4_K;
    case GgmlType::Q6_K: return dot_q6_K;
    default: return nullptr;
  }
}

VecDot4Fn avx2_kernel4(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_0: return dot4_s8<block_q4_0>;
    case GgmlType::Q4_1: return dot4_q4_1;
    case GgmlType::Q8_0: return dot4_s8<block_q8_0>;
    default: return nullptr;
  }
}

}  // namespace lamina

#else
namespace lamina {
VecDot4Fn avx2_kernel4(GgmlType) { return nullptr; }
VecDotFn avx2_kernel(GgmlType) { return nullptr; }
AxpyFn avx2_axpy(GgmlType) { return nullptr; }
}  // namespace lamina
#endif
