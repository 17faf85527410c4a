// AVX2 + FMA + F16C row dot products. Each function carries a target attribute, so this file
// builds without -mavx2 and the dispatcher only calls it on CPUs that have the extensions. The
// int8 kernels are in vec_dot_int8_x86.inc (shared with the AVX-VNNI build, vec_dot_vnni.cpp),
// the k-quant and iq4_xs kernels in vec_dot_avx2_kquants.cpp;
// here u8 x s8 products go through _mm256_maddubs_epi16 (pairs summed to s16) and
// _mm256_madd_epi16 (pairs of those to s32).
#include "backend/cpu/vec_dot.h"

#include "core/half.h"
#include "format/quant.h"
#include "format/quant_blocks.h"
#include "format/quant_decode.h"

#include <cmath>
#include <cstddef>
#include <cstring>
#include <type_traits>

#if defined(__x86_64__)
#include <immintrin.h>

#define LAMINA_AVX2 __attribute__((target("avx2,fma,f16c")))
#define LAMINA_X86 LAMINA_AVX2
#define LAMINA_DOT_U8S8(a, b) _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1))
#define LAMINA_DOT_U8S8_ACC(acc, a, b) _mm256_add_epi32(acc, LAMINA_DOT_U8S8(a, b))
#define LAMINA_Q8_BIAS 0  // maddubs would saturate on (q + 128) x s8 pairs

namespace lamina {
namespace {

#include "backend/cpu/vec_dot_int8_x86.inc"

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

// Eight 16-bit floats as f32: f16 (F16C) or bf16 (the high half of an f32); and one of them.
template <GgmlType T>
LAMINA_AVX2 inline __m256 half8(const uint16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if constexpr (T == GgmlType::F16) return _mm256_cvtph_ps(h);
  else return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
template <GgmlType T>
LAMINA_AVX2 inline float half1(uint16_t h) {
  if constexpr (T == GgmlType::F16) return h2f(h);
  else return bf16_to_f32(h);
}

// f16 / bf16 weights against f32 activations: two 8-lane accumulators over 16-element steps
// (acc0 takes elements s..s+7, acc1 s+8..s+15), their sum's hsum, then the tail in order. The
// four-token kernel and the AVX-512 register tile (vec_dot_avx512.cpp) keep this order.
template <GgmlType T>
LAMINA_AVX2 float dot_half(int64_t n, const void* w, const void* x) {
  const uint16_t* a = static_cast<const uint16_t*>(w);
  const float* b = static_cast<const float*>(x);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(half8<T>(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(half8<T>(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  float s = hsum(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) s += half1<T>(a[i]) * b[i];
  return s;
}

// One f16 / bf16 weight row against four f32 activation rows (x + j * stride): the prompt path
// where there is no register tile. Each token keeps dot_half's two accumulators and its tail, so
// out[j] is bit for bit dot_half(n, w, x + j * stride); the row's conversion is shared by the four.
template <GgmlType T>
LAMINA_AVX2 void dot4_half(int64_t n, const void* w, const void* x, size_t stride, const int32_t*, size_t, float* out) {
  const uint16_t* a = static_cast<const uint16_t*>(w);
  const float* b[4];
  for (int j = 0; j < 4; ++j) b[j] = reinterpret_cast<const float*>(static_cast<const uint8_t*>(x) + size_t(j) * stride);
  __m256 acc0[4], acc1[4];
  for (int j = 0; j < 4; ++j) acc0[j] = acc1[j] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 w0 = half8<T>(a + i), w1 = half8<T>(a + i + 8);
    for (int j = 0; j < 4; ++j) {
      acc0[j] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(b[j] + i), acc0[j]);
      acc1[j] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(b[j] + i + 8), acc1[j]);
    }
  }
  for (int j = 0; j < 4; ++j) {
    float s = hsum(_mm256_add_ps(acc0[j], acc1[j]));
    for (int64_t k = i; k < n; ++k) s += half1<T>(a[k]) * b[j][k];
    out[j] = s;
  }
}

}  // namespace

// quantize_q8 (vec_dot.cpp) in AVX2, bit for bit: the same amax, scale and products, and
// lround's rounding (half away from zero) as truncation plus a step where |fraction| >= 0.5.
template <class Block>
LAMINA_AVX2 void quantize_q8(const float* x, Block* y, int64_t n) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256 sign_mask = _mm256_castsi256_ps(_mm256_set1_epi32(int(0x80000000u)));
  const __m256 half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.f);
  for (int64_t i = 0; i < n / QK; ++i, x += QK) {
    __m256 v[4], m = _mm256_setzero_ps();
    for (int j = 0; j < 4; ++j) v[j] = _mm256_loadu_ps(x + 8 * j), m = _mm256_max_ps(m, _mm256_and_ps(v[j], abs_mask));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    const float amax = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
    const float d = amax / 127.f, id = d ? 1.f / d : 0.f;
    __m256i q[4];
    for (int j = 0; j < 4; ++j) {
      const __m256 p = _mm256_mul_ps(v[j], _mm256_set1_ps(id));
      const __m256 t = _mm256_round_ps(p, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
      const __m256 up = _mm256_cmp_ps(_mm256_and_ps(_mm256_sub_ps(p, t), abs_mask), half, _CMP_GE_OQ);
      const __m256 step = _mm256_and_ps(up, _mm256_or_ps(one, _mm256_and_ps(p, sign_mask)));  // +-1 or 0
      q[j] = _mm256_cvtps_epi32(_mm256_add_ps(t, step));
    }
    // s32 -> s8 in element order (packs interleave 128-bit lanes; the permute restores them).
    const __m256i w = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[i].qs), _mm256_permutevar8x32_epi32(w, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
    y[i].d = d;
    if constexpr (std::is_same_v<Block, act_q8s>) {
      const __m256i s = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
      y[i].s = d * float(hsum_i32(s));
    }
  }
}

LAMINA_AVX2 double avx2_sum_squares4(const float* x, int64_t n) {
  __m256d acc = _mm256_setzero_pd();  // lane j: the elements i = j (mod 4), as the portable loop
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const __m256d v = _mm256_cvtps_pd(_mm_loadu_ps(x + i));
    acc = _mm256_add_pd(acc, _mm256_mul_pd(v, v));
  }
  alignas(32) double s[4];
  _mm256_store_pd(s, acc);
  for (; i < n; ++i) s[0] += double(x[i]) * x[i];
  return (s[0] + s[1]) + (s[2] + s[3]);
}

LAMINA_AVX2 int64_t avx2_next_above(const float* x, int64_t i, int64_t n, float limit) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF)), lim = _mm256_set1_ps(limit);
  for (; i + 8 <= n; i += 8) {
    const int m = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_and_ps(_mm256_loadu_ps(x + i), abs_mask), lim, _CMP_GT_OQ));
    if (m) return i + __builtin_ctz(unsigned(m));
  }
  for (; i < n; ++i)
    if (std::fabs(x[i]) > limit) return i;
  return n;
}

// One weight element (the outlier terms' weights): quant_decode.h's formulas with the F16C
// conversion, which is exact like the portable one, so the same floats.
LAMINA_AVX2 float element_q4_0(const void* row, int64_t i) {
  const auto& b = static_cast<const block_q4_0*>(row)[i / QK];
  const int e = int(i % QK), byte = b.qs[e % 16];
  return h2f(b.d) * float((e < 16 ? byte & 15 : byte >> 4) - 8);
}
LAMINA_AVX2 float element_q4_1(const void* row, int64_t i) {
  const auto& b = static_cast<const block_q4_1*>(row)[i / QK];
  const int e = int(i % QK), byte = b.qs[e % 16];
  return h2f(b.d) * float(e < 16 ? byte & 15 : byte >> 4) + h2f(b.m);
}
LAMINA_AVX2 float element_q8_0(const void* row, int64_t i) {
  const auto& b = static_cast<const block_q8_0*>(row)[i / QK];
  return h2f(b.d) * float(b.qs[i % QK]);
}
// The outliers' terms of eight rows (w + j * w_stride): v[j] += value[k] * element(row j, cols[k])
// for k in turn, the eight rows' elements decoded side by side (gathers of the blocks' scale
// dwords and quant dwords), each product rounded, then added: element_q* and the row loop's
// floats.
LAMINA_AVX2 inline __m256 low_halves_f16(__m256i x) {  // the low halves of eight dwords (< 2^16) as floats
  return _mm256_cvtph_ps(_mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(x, _mm256_setzero_si256()), 0x08)));
}

template <GgmlType T>
LAMINA_AVX2 void outliers8(const uint8_t* w, size_t w_stride, int n, const int32_t* cols, const float* value, float* v) {
  using Block = std::conditional_t<T == GgmlType::Q4_0, block_q4_0, std::conditional_t<T == GgmlType::Q4_1, block_q4_1, block_q8_0>>;
  constexpr size_t kQs = offsetof(Block, qs);
  const __m256i at = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(int(w_stride)));
  const __m256i low16 = _mm256_set1_epi32(0xFFFF);
  __m256 acc = _mm256_loadu_ps(v);
  for (int k = 0; k < n; ++k) {
    const int e = cols[k] % QK;
    const uint8_t* blk = w + size_t(cols[k] / QK) * sizeof(Block);
    const __m256i dm = _mm256_i32gather_epi32(reinterpret_cast<const int*>(blk), at, 1);
    const int p = T == GgmlType::Q8_0 ? e : e % 16;  // the quant's byte
    const __m256i word = _mm256_i32gather_epi32(reinterpret_cast<const int*>(blk + kQs + (p & ~3)), at, 1);
    const __m256i byte = _mm256_srli_epi32(word, 8 * (p & 3));
    __m256i q;
    if constexpr (T == GgmlType::Q8_0) q = _mm256_srai_epi32(_mm256_slli_epi32(byte, 24), 24);
    else q = _mm256_and_si256(e < 16 ? byte : _mm256_srli_epi32(byte, 4), _mm256_set1_epi32(15));
    if constexpr (T == GgmlType::Q4_0) q = _mm256_sub_epi32(q, _mm256_set1_epi32(8));
    __m256 x = _mm256_mul_ps(low_halves_f16(_mm256_and_si256(dm, low16)), _mm256_cvtepi32_ps(q));
    if constexpr (T == GgmlType::Q4_1) x = _mm256_add_ps(x, low_halves_f16(_mm256_srli_epi32(dm, 16)));
    acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_set1_ps(value[k]), x));
  }
  _mm256_storeu_ps(v, acc);
}

Outliers8Fn avx2_outliers8(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_0: return outliers8<GgmlType::Q4_0>;
    case GgmlType::Q4_1: return outliers8<GgmlType::Q4_1>;
    case GgmlType::Q8_0: return outliers8<GgmlType::Q8_0>;
    default: return nullptr;
  }
}

// decode_q4_K and decode_q6_K (quant_decode.h) with F16C's conversions: the same floats.
LAMINA_AVX2 float element_q4_K(const void* row, int64_t i) {
  const block_q4_K& b = static_cast<const block_q4_K*>(row)[i / QK_K];
  const int e = int(i % QK_K);
  uint8_t sm[16];
  lamina::q4k_scales_mins(b.scales, sm);
  const uint8_t byte = b.qs[32 * (e / 64) + e % 32];
  const int q = (e % 64 < 32) ? (byte & 15) : (byte >> 4);
  return h2f(b.d) * float(sm[e / 32]) * float(q) - h2f(b.dmin) * float(sm[8 + e / 32]);
}
LAMINA_AVX2 float element_q6_K(const void* row, int64_t i) {
  const block_q6_K& b = static_cast<const block_q6_K*>(row)[i / QK_K];
  const int e = int(i % QK_K), n = e / 128, k = (e % 128) / 32, l = e % 32;
  const uint8_t byte = b.ql[64 * n + 32 * (k & 1) + l];
  const int lo4 = k < 2 ? (byte & 15) : (byte >> 4);
  const int hi2 = (b.qh[32 * n + l] >> (2 * k)) & 3;
  return h2f(b.d) * float(b.scales[e / 16]) * float((lo4 | hi2 << 4) - 32);
}

ElementFn avx2_element(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_K: return element_q4_K;
    case GgmlType::Q6_K: return element_q6_K;
    case GgmlType::Q4_0: return element_q4_0;
    case GgmlType::Q4_1: return element_q4_1;
    case GgmlType::Q8_0: return element_q8_0;
    default: return nullptr;
  }
}

// quantize_q8_K (vec_dot.cpp) in AVX2, bit for bit: the element of largest magnitude (the first
// such), iscale = -127 / it, nearbyint's rounding (to nearest even, the default mode), values
// above 127 clamped, the 16-element sums and d = 1 / iscale.
LAMINA_AVX2 void quantize_q8_K(const float* x, block_q8_K* y, int64_t n) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
    __m256 m = _mm256_setzero_ps();
    for (int j = 0; j < QK_K; j += 8) m = _mm256_max_ps(m, _mm256_and_ps(_mm256_loadu_ps(x + j), abs_mask));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    const float amax = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
    if (amax == 0) {
      std::memset(&y[i], 0, sizeof y[i]);
      continue;
    }
    int first = 0;  // the first element whose magnitude is amax
    for (int j = 0; j < QK_K; j += 8) {
      const int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_and_ps(_mm256_loadu_ps(x + j), abs_mask), _mm256_set1_ps(amax), _CMP_EQ_OQ));
      if (hit) {
        first = j + __builtin_ctz(unsigned(hit));
        break;
      }
    }
    const float iscale = -127.f / x[first];
    const __m256 is = _mm256_set1_ps(iscale), hi = _mm256_set1_ps(127.f);
    for (int g = 0; g < QK_K / 16; ++g) {
      __m256i q[2];
      for (int h = 0; h < 2; ++h) {
        const __m256 v = _mm256_round_ps(_mm256_mul_ps(is, _mm256_loadu_ps(x + 16 * g + 8 * h)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        q[h] = _mm256_cvtps_epi32(_mm256_min_ps(v, hi));
      }
      const __m256i w16 = _mm256_packs_epi32(q[0], q[1]);  // lanes: q0[0..3] q1[0..3] | q0[4..7] q1[4..7]
      const __m128i b8 = _mm_packs_epi16(_mm256_castsi256_si128(w16), _mm256_extracti128_si256(w16, 1));
      // b8 bytes: q0[0..3] q1[0..3] q0[4..7] q1[4..7]; element order is q0[0..7] q1[0..7]
      _mm_storeu_si128(reinterpret_cast<__m128i*>(y[i].qs + 16 * g), _mm_shuffle_epi32(b8, _MM_SHUFFLE(3, 1, 2, 0)));
      y[i].bsums[g] = int16_t(hsum_i32(_mm256_add_epi32(q[0], q[1])));
    }
    y[i].d = 1.f / iscale;
  }
}

void avx2_quantize_q8(ActType t, const float* x, void* dst, int64_t n) {
  if (t == ActType::Q8K) quantize_q8_K(x, static_cast<block_q8_K*>(dst), n);
  else if (t == ActType::Q8S) quantize_q8(x, static_cast<act_q8s*>(dst), n);
  else quantize_q8(x, static_cast<act_q8*>(dst), n);
}

VecDotFn avx2_kernel(GgmlType t) {
  switch (t) {
    case GgmlType::F32: return dot_f32;
    case GgmlType::F16: return dot_half<GgmlType::F16>;
    case GgmlType::BF16: return dot_half<GgmlType::BF16>;
    default: {
      const VecDotFn k = avx2_kquant_kernel(t);
      return k ? k : int8_kernel(t);
    }
  }
}

VecDot4CFn avx2_kernel4c(GgmlType t, int* bias) {
  if (const VecDot4CFn k = avx2_kquant_kernel4c(t)) {
    *bias = 0;
    return k;
  }
  if (t == GgmlType::F16 || t == GgmlType::BF16) {
    *bias = 0;
    return t == GgmlType::F16 ? dot4_half<GgmlType::F16> : dot4_half<GgmlType::BF16>;
  }
  return int8_kernel4c(t, bias);
}
VecDotRows4CFn avx2_rows4c(GgmlType t) {
  const VecDotRows4CFn k = avx2_kquant_rows4c(t);
  return k ? k : int8_rows4c(t);
}
VecDotRows4CFn avx2_rows8c(GgmlType t) {
  const VecDotRows4CFn k = avx2_kquant_rows8c(t);
  return k ? k : int8_rows8c(t);
}

}  // namespace lamina

#else
namespace lamina {
VecDot4CFn avx2_kernel4c(GgmlType, int*) { return nullptr; }
VecDotRows4CFn avx2_rows4c(GgmlType) { return nullptr; }
VecDotRows4CFn avx2_rows8c(GgmlType) { return nullptr; }
VecDotFn avx2_kernel(GgmlType) { return nullptr; }
void avx2_quantize_q8(ActType, const float*, void*, int64_t) {}
ElementFn avx2_element(GgmlType) { return nullptr; }
Outliers8Fn avx2_outliers8(GgmlType) { return nullptr; }
double avx2_sum_squares4(const float*, int64_t) { return 0; }
int64_t avx2_next_above(const float*, int64_t, int64_t n, float) { return n; }
}  // namespace lamina
#endif
