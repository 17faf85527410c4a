// AVX2 dot products of the k-quant types (q2_K, q3_K, q4_K, q5_K) and iq4_xs against q8_K
// activations: one weight row against one token (decode), four or eight rows against one token
// (q4_K, q5_K), one row against four tokens (prompts). Each shape gives a token the integers and
// float expression of the one-row kernel, which gives the scalar kernel's (vec_dot.cpp). q6_K's
// kernel is in q6k_x86.inc (shared with the AVX-512 build); the dispatch in vec_dot_avx2.cpp.
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
#define LAMINA_Q8_BIAS 0

namespace lamina {
namespace {

#include "backend/cpu/vec_dot_int8_x86.inc"  // (h2f, load32, hsum_i32)
#include "backend/cpu/q6k_x86.inc"

// The q8_K blocks of four activation rows (x + j * x_stride): the prompt kernels' tokens.
inline void four_tokens(const void* x, size_t x_stride, const block_q8_K* (&b)[4]) {
  for (int j = 0; j < 4; ++j) b[j] = reinterpret_cast<const block_q8_K*>(static_cast<const uint8_t*>(x) + size_t(j) * x_stride);
}

// IQ4_NL / IQ4_XS's 16 values in both 128-bit lanes, for pshufb by nibble.
LAMINA_AVX2 inline __m256i iq4_table() {
  alignas(16) int8_t table[16];
  for (int i = 0; i < 16; ++i) table[i] = int8_t(iq4_value(i));
  const __m128i t128 = _mm_load_si128(reinterpret_cast<const __m128i*>(table));
  return _mm256_set_m128i(t128, t128);
}

// A q4_K block's eight 6-bit sub-block scales (bytes 0-7) and mins (bytes 8-15) in one register
// (quant_blocks.h's q4k_scales_mins).
LAMINA_AVX2 inline __m128i q4k_scales_mins(const uint8_t* s12) {
  alignas(16) uint8_t sm[16];
  lamina::q4k_scales_mins(s12, sm);
  return _mm_load_si128(reinterpret_cast<const __m128i*>(sm));
}

// A q4_K / q5_K block's 64-element group c as its low-run and high-run quants, one per byte
// (q5_K: bits 2c and 2c + 1 of each qh byte moved to bit 4; 16-bit shifts, masked per byte).
template <bool kQ5>
LAMINA_AVX2 inline void qk_quants(const uint8_t* qs, __m256i qh, int c, __m256i& lo, __m256i& hi) {
  const __m256i low4 = _mm256_set1_epi8(0x0F), bit4 = _mm256_set1_epi8(0x10);
  const __m256i raw = load32(qs + 32 * c);
  lo = _mm256_and_si256(raw, low4), hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
  if constexpr (kQ5) {
    lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(qh, 2 * c), 4), bit4));
    hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(qh, 2 * c + 1), 4), bit4));
  }
}

// sum_t min_t * (bsums[2t] + bsums[2t+1]) of one q8_K block, mins as eight int16: the pairs by
// hadd (|sum| <= 4064), then madd.
LAMINA_AVX2 inline int qk_sum_min(__m128i mins, const block_q8_K& b) {
  const __m256i bs = load32(b.bsums);
  const __m128i pairs = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
  __m128i pm = _mm_madd_epi16(mins, pairs);
  pm = _mm_add_epi32(pm, _mm_shuffle_epi32(pm, 0x4E));
  return _mm_cvtsi128_si32(_mm_add_epi32(pm, _mm_shuffle_epi32(pm, 0xB1)));
}

// q4_K (or, kQ5, q5_K) against q8_K for R weight rows (w + r * w_stride) at once, out[r]: each
// row's blocks in turn, as the one-row kernel (R = 1) takes them; R rows read side by side keep R
// memory streams in flight (decode), and share the activation loads. q5_K's fifth bit of element
// e is bit e / 32 of qh[e % 32]: merged into each byte as 16 before the multiply (quants 0..31).
template <int R, bool kQ5 = false>
LAMINA_AVX2 void rows_q4_K(int64_t n, const void* w, size_t w_stride, const void* x, float* out) {
  using Block = std::conditional_t<kQ5, block_q5_K, block_q4_K>;
  const auto* b = static_cast<const block_q8_K*>(x);
  float total[R];
  for (int r = 0; r < R; ++r) total[r] = 0;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const Block* a[R];
    for (int r = 0; r < R; ++r) a[r] = reinterpret_cast<const Block*>(static_cast<const uint8_t*>(w) + size_t(r) * w_stride) + i;
    alignas(16) int16_t sc16[R][8];  // the eight scales as int16
    int sum_min[R];
    __m256i sumi[R], qh[R];
    for (int r = 0; r < R; ++r) {
      const __m128i sm = q4k_scales_mins(a[r]->scales);
      sum_min[r] = qk_sum_min(_mm_cvtepu8_epi16(_mm_unpackhi_epi64(sm, sm)), b[i]);
      _mm_store_si128(reinterpret_cast<__m128i*>(sc16[r]), _mm_cvtepu8_epi16(sm));
      sumi[r] = _mm256_setzero_si256();
      qh[r] = _mm256_setzero_si256();
      if constexpr (kQ5) qh[r] = load32(a[r]->qh);
    }
    for (int c = 0; c < 4; ++c) {  // 64 elements: 32 low nibbles (sub-block 2c), 32 high (2c+1)
      const __m256i xl = load32(b[i].qs + 64 * c), xh = load32(b[i].qs + 64 * c + 32);
      for (int r = 0; r < R; ++r) {
        __m256i qlo, qhi;
        qk_quants<kQ5>(a[r]->qs, qh[r], c, qlo, qhi);
        const __m256i plo = _mm256_maddubs_epi16(qlo, xl);
        const __m256i phi = _mm256_maddubs_epi16(qhi, xh);
        const __m256i s_lo = _mm256_set1_epi16(sc16[r][2 * c]), s_hi = _mm256_set1_epi16(sc16[r][2 * c + 1]);
        sumi[r] = _mm256_add_epi32(sumi[r], _mm256_madd_epi16(plo, s_lo));
        sumi[r] = _mm256_add_epi32(sumi[r], _mm256_madd_epi16(phi, s_hi));
      }
    }
    for (int r = 0; r < R; ++r)
      total[r] += b[i].d * (h2f(a[r]->d) * float(hsum_i32(sumi[r])) - h2f(a[r]->dmin) * float(sum_min[r]));
  }
  for (int r = 0; r < R; ++r) out[r] = total[r];
}

// One q4_K (kQ5: q5_K) weight row against four q8_K activation rows (x + j * x_stride), out[j]:
// the row's quants decoded once per block for the four tokens (prompts), each token's integer
// sums and float expression those of rows_q4_K<1>.
template <bool kQ5>
LAMINA_AVX2 void tokens4_qk(int64_t n, const void* w, const void* x, size_t x_stride, const int32_t*, size_t,
                            float* out) {
  using Block = std::conditional_t<kQ5, block_q5_K, block_q4_K>;
  const auto* a = static_cast<const Block*>(w);
  const block_q8_K* b[4];
  four_tokens(x, x_stride, b);
  float total[4] = {0, 0, 0, 0};
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const __m128i sm = q4k_scales_mins(a[i].scales);
    alignas(16) int16_t sc16[8];
    _mm_store_si128(reinterpret_cast<__m128i*>(sc16), _mm_cvtepu8_epi16(sm));
    const __m128i mins = _mm_cvtepu8_epi16(_mm_unpackhi_epi64(sm, sm));
    __m256i qh = _mm256_setzero_si256();
    if constexpr (kQ5) qh = load32(a[i].qh);
    __m256i ql[4], qu[4];  // each 64-element group's low-run and high-run quants
    for (int c = 0; c < 4; ++c) qk_quants<kQ5>(a[i].qs, qh, c, ql[c], qu[c]);
    const float d = h2f(a[i].d), dmin = h2f(a[i].dmin);
    for (int j = 0; j < 4; ++j) {
      const block_q8_K& bj = b[j][i];
      const int sum_min = qk_sum_min(mins, bj);
      __m256i sumi = _mm256_setzero_si256();
      for (int c = 0; c < 4; ++c) {
        const __m256i plo = _mm256_maddubs_epi16(ql[c], load32(bj.qs + 64 * c));
        const __m256i phi = _mm256_maddubs_epi16(qu[c], load32(bj.qs + 64 * c + 32));
        sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(plo, _mm256_set1_epi16(sc16[2 * c])));
        sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(phi, _mm256_set1_epi16(sc16[2 * c + 1])));
      }
      total[j] += bj.d * (d * float(hsum_i32(sumi)) - dmin * float(sum_min));
    }
  }
  for (int j = 0; j < 4; ++j) out[j] = total[j];
}


// Q3_K's 16 sub-block scales (q3k_scale) as int16 lanes: low nibbles s12[t] & 15 (t < 8) and
// s12[t - 8] >> 4, high bits (s12[8 + t % 4] >> 2 (t / 4)) & 3, taken for all 16 at once (the
// 32-bit lane k of the high bits' vector is s12[8..11] >> 2k, so its byte m is t = 4k + m's).
LAMINA_AVX2 inline __m256i q3k_scales16(const uint8_t* s12) {
  const __m128i v = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(s12)), m4 = _mm_set1_epi8(0x0F);
  const __m128i lo = _mm_unpacklo_epi64(_mm_and_si128(v, m4), _mm_and_si128(_mm_srli_epi16(v, 4), m4));
  uint32_t h;
  std::memcpy(&h, s12 + 8, 4);
  const __m128i hi = _mm_and_si128(_mm_srlv_epi32(_mm_set1_epi32(int(h)), _mm_setr_epi32(0, 2, 4, 6)), _mm_set1_epi8(3));
  return _mm256_cvtepi8_epi16(_mm_sub_epi8(_mm_or_si128(lo, _mm_slli_epi16(hi, 4)), _mm_set1_epi8(32)));
}

// Q2_K's 16 sub-block scales (low nibbles) and mins (high nibbles) as int16 lanes.
struct Scales16 {
  __m256i scales, mins;
};
LAMINA_AVX2 inline Scales16 q2k_scales_mins16(const uint8_t* s16) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s16)), m4 = _mm_set1_epi8(0x0F);
  return {_mm256_cvtepu8_epi16(_mm_and_si128(v, m4)), _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(v, 4), m4))};
}

// The scales of sub-blocks t = 8 nn + 2 j and t + 1 as the madd of a 32-element maddubs takes them:
// sc[t] in the low eight int16 lanes, sc[t + 1] in the high eight. `half` holds the eight scales
// of nn (sub-blocks 8 nn .. 8 nn + 7) in both 128-bit lanes (scale_halves); the byte shuffle picks
// scale 2 j in the low lane and 2 j + 1 in the high one: one shuffle where two broadcasts and an
// insert were (the decode kernels are bound by their instructions: docs/benchmarks.md). The
// q2_K, q3_K and q6_K kernels below take them.
alignas(32) inline constexpr uint8_t kPairShuffle[4][32] = {
    {0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3},
    {4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7},
    {8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11},
    {12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15}};
LAMINA_AVX2 inline __m256i pair_scales(__m256i half, int j) {
  return _mm256_shuffle_epi8(half, _mm256_load_si256(reinterpret_cast<const __m256i*>(kPairShuffle[j])));
}
// The 16 int16 scales s16 as two vectors of eight, each in both 128-bit lanes (nn = 0, 1).
LAMINA_AVX2 inline void scale_halves(__m256i s16, __m256i* half) {
  half[0] = _mm256_permute4x64_epi64(s16, 0x44);
  half[1] = _mm256_permute4x64_epi64(s16, 0xEE);
}


// Q2_K (or, kQ3, Q3_K) against q8_K for R weight rows (w + r * w_stride) at once, out[r]: per 32
// elements (n, j) the 2-bit quants, bits 2j of qs[32n + l]; for Q3_K plus 4 where bit 4n + j of
// hmask[l] is set (q + 4, 0..7, whose 4 * sum of x is taken back with the bsums). The 32 are two
// 16-element sub-blocks, their scales by madd. The same integers and float expression as the
// scalar kernels (vec_dot.cpp) for every R; R rows read side by side keep R memory streams in
// flight (decode), and share the activation loads.
template <int R, bool kQ3>
LAMINA_AVX2 void rows_q23_K(int64_t n, const void* w, size_t w_stride, const void* x, float* out) {
  using Block = std::conditional_t<kQ3, block_q3_K, block_q2_K>;
  const auto* b = static_cast<const block_q8_K*>(x);
  const __m256i m3 = _mm256_set1_epi8(3), m1 = _mm256_set1_epi8(1);
  float total[R];
  for (int r = 0; r < R; ++r) total[r] = 0;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const Block* a[R];
    for (int r = 0; r < R; ++r) a[r] = reinterpret_cast<const Block*>(static_cast<const uint8_t*>(w) + size_t(r) * w_stride) + i;
    const __m256i bsums = load32(b[i].bsums);
    __m256i half[R][2];  // each row's scales, scale_halves
    __m256i side_v[R], sumi[R], hm[R];
    for (int r = 0; r < R; ++r) {
      if constexpr (kQ3) {
        const __m256i s16 = q3k_scales16(a[r]->scales);
        scale_halves(s16, half[r]);
        side_v[r] = _mm256_madd_epi16(s16, bsums);
        hm[r] = load32(a[r]->hmask);
      } else {
        const auto [s16, m16] = q2k_scales_mins16(a[r]->scales);
        scale_halves(s16, half[r]);
        side_v[r] = _mm256_madd_epi16(m16, bsums);
        hm[r] = _mm256_setzero_si256();
      }
      sumi[r] = _mm256_setzero_si256();
    }
    for (int nn = 0; nn < 2; ++nn) {
      __m256i raw[R];
      for (int r = 0; r < R; ++r) raw[r] = load32(a[r]->qs + 32 * nn);
      for (int j = 0; j < 4; ++j) {
        const __m256i xq = load32(b[i].qs + 128 * nn + 32 * j);
        for (int r = 0; r < R; ++r) {
          __m256i q = _mm256_and_si256(_mm256_srli_epi16(raw[r], 2 * j), m3);
          if constexpr (kQ3)
            q = _mm256_or_si256(q, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hm[r], 4 * nn + j), m1), 2));
          const __m256i p = _mm256_maddubs_epi16(q, xq);
          sumi[r] = _mm256_add_epi32(sumi[r], _mm256_madd_epi16(p, pair_scales(half[r][nn], j)));
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      if constexpr (kQ3)
        total[r] += b[i].d * (h2f(a[r]->d) * float(hsum_i32(_mm256_sub_epi32(sumi[r], _mm256_slli_epi32(side_v[r], 2)))));
      else
        total[r] += b[i].d * (h2f(a[r]->d) * float(hsum_i32(sumi[r])) - h2f(a[r]->dmin) * float(hsum_i32(side_v[r])));
    }
  }
  for (int r = 0; r < R; ++r) out[r] = total[r];
}

// Q6_K against q8_K for R weight rows at once (w + r * w_stride), out[r]: per 32 elements the
// quants as unsigned bytes (q + 32, q6k_quants) times x by maddubs, their two 16-element groups'
// scales by madd (pair_scales), less 32 * sum_g scale_g * bsum_g (one madd). The same integers and
// float expression for every R; R rows side by side keep R memory streams in flight (decode).
template <int R>
LAMINA_AVX2 void rows_q6_K(int64_t n, const void* w, size_t w_stride, const void* x, float* out) {
  const auto* b = static_cast<const block_q8_K*>(x);
  float total[R];
  for (int r = 0; r < R; ++r) total[r] = 0;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const __m256i bsums = load32(b[i].bsums);
    const block_q6_K* a[R];
    __m256i halves[R][2], sumi[R];
    int bias[R];
    for (int r = 0; r < R; ++r) {
      a[r] = reinterpret_cast<const block_q6_K*>(static_cast<const uint8_t*>(w) + size_t(r) * w_stride) + i;
      const __m256i s16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a[r]->scales)));
      bias[r] = hsum_i32(_mm256_madd_epi16(s16, bsums));
      scale_halves(s16, halves[r]);
      sumi[r] = _mm256_setzero_si256();
    }
    for (int half = 0; half < 2; ++half)
      for (int r = 0; r < R; ++r) {
        __m256i q[4];
        q6k_quants(*a[r], half, q);
        for (int k = 0; k < 4; ++k) {  // groups 8 half + 2 k and + 1: two groups of 16 per 32 elements
          const __m256i p = _mm256_maddubs_epi16(q[k], load32(b[i].qs + 128 * half + 32 * k));
          sumi[r] = _mm256_add_epi32(sumi[r], _mm256_madd_epi16(p, pair_scales(halves[r][half], k)));
        }
      }
    for (int r = 0; r < R; ++r) total[r] += b[i].d * h2f(a[r]->d) * float(hsum_i32(sumi[r]) - 32 * bias[r]);
  }
  for (int r = 0; r < R; ++r) out[r] = total[r];
}

// Q2_K / Q3_K, one weight row against four tokens (prompts): the row's quants and sub-block
// scales decoded once per block; each token's integers and float expression those of rows_q23_K<1>.
template <bool kQ3>
LAMINA_AVX2 void tokens4_q23(int64_t n, const void* w, const void* x, size_t x_stride, const int32_t*, size_t,
                             float* out) {
  using Block = std::conditional_t<kQ3, block_q3_K, block_q2_K>;
  const auto* a = static_cast<const Block*>(w);
  const block_q8_K* b[4];
  four_tokens(x, x_stride, b);
  const __m256i m3 = _mm256_set1_epi8(3), m1 = _mm256_set1_epi8(1);
  float total[4] = {0, 0, 0, 0};
  for (int64_t i = 0; i < n / QK_K; ++i) {
    __m256i half[2];  // the scales, scale_halves
    __m256i side_w;   // Q2_K the mins, Q3_K the scales (times each token's bsums)
    if constexpr (kQ3) {
      side_w = q3k_scales16(a[i].scales);
      scale_halves(side_w, half);
    } else {
      const auto [s16, m16] = q2k_scales_mins16(a[i].scales);
      scale_halves(s16, half);
      side_w = m16;
    }
    __m256i hm = _mm256_setzero_si256();
    if constexpr (kQ3) hm = load32(a[i].hmask);
    __m256i q[8], s[8];  // per (nn, j): 32 quants and the two sub-blocks' scales
    for (int nn = 0; nn < 2; ++nn) {
      const __m256i raw = load32(a[i].qs + 32 * nn);
      for (int j = 0; j < 4; ++j) {
        __m256i v = _mm256_and_si256(_mm256_srli_epi16(raw, 2 * j), m3);
        if constexpr (kQ3) v = _mm256_or_si256(v, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hm, 4 * nn + j), m1), 2));
        q[4 * nn + j] = v;
        s[4 * nn + j] = pair_scales(half[nn], j);
      }
    }
    const float d = h2f(a[i].d);
    for (int tok = 0; tok < 4; ++tok) {
      const block_q8_K& bt = b[tok][i];
      const int side = hsum_i32(_mm256_madd_epi16(side_w, load32(bt.bsums)));
      __m256i sumi = _mm256_setzero_si256();
      for (int k = 0; k < 8; ++k) {
        const __m256i p = _mm256_maddubs_epi16(q[k], load32(bt.qs + 128 * (k / 4) + 32 * (k % 4)));
        sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, s[k]));
      }
      if constexpr (kQ3) total[tok] += bt.d * (d * float(hsum_i32(sumi) - 4 * side));
      else total[tok] += bt.d * (d * float(hsum_i32(sumi)) - h2f(a[i].dmin) * float(side));
    }
  }
  for (int j = 0; j < 4; ++j) out[j] = total[j];
}

// IQ4_XS against q8_K for R weight rows at once (w + r * w_stride), out[r]: each sub-block's 32
// nibbles (low halves: elements 0..15, high: 16..31) looked up in the value table by pshufb,
// multiplied as |v| * (x with v's sign) (maddubs), times the sub-block's scale by madd. The same
// integers and float expression as the scalar kernel for every R; R rows side by side keep R
// memory streams in flight (decode) and share the activation loads.
template <int R>
LAMINA_AVX2 void rows_iq4_xs(int64_t n, const void* w, size_t w_stride, const void* x, float* out) {
  const auto* b = static_cast<const block_q8_K*>(x);
  const __m256i values = iq4_table();
  const __m128i low4 = _mm_set1_epi8(0x0F);
  float total[R];
  for (int r = 0; r < R; ++r) total[r] = 0;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const block_iq4_xs* a[R];
    __m256i sumi[R];
    for (int r = 0; r < R; ++r) {
      a[r] = reinterpret_cast<const block_iq4_xs*>(static_cast<const uint8_t*>(w) + size_t(r) * w_stride) + i;
      sumi[r] = _mm256_setzero_si256();
    }
    for (int ib = 0; ib < 8; ++ib) {
      const __m256i xs = load32(b[i].qs + 32 * ib);
      for (int r = 0; r < R; ++r) {
        const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a[r]->qs + 16 * ib));
        const __m256i idx = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), low4), _mm_and_si128(q, low4));
        const __m256i v = _mm256_shuffle_epi8(values, idx);
        const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(v, v), _mm256_sign_epi8(xs, v));
        sumi[r] = _mm256_add_epi32(sumi[r], _mm256_madd_epi16(p, _mm256_set1_epi16(int16_t(iq4xs_scale(*a[r], ib)))));
      }
    }
    for (int r = 0; r < R; ++r) total[r] += b[i].d * (h2f(a[r]->d) * float(hsum_i32(sumi[r])));
  }
  for (int r = 0; r < R; ++r) out[r] = total[r];
}

// IQ4_XS, one weight row against four tokens: the row's values (and their magnitudes) and
// sub-block scales decoded once per block; each token's integers and float expression those of
// rows_iq4_xs<1>.
LAMINA_AVX2 void tokens4_iq4_xs(int64_t n, const void* w, const void* x, size_t x_stride, const int32_t*, size_t,
                                float* out) {
  const auto* a = static_cast<const block_iq4_xs*>(w);
  const block_q8_K* b[4];
  four_tokens(x, x_stride, b);
  const __m256i values = iq4_table();
  const __m128i low4 = _mm_set1_epi8(0x0F);
  float total[4] = {0, 0, 0, 0};
  for (int64_t i = 0; i < n / QK_K; ++i) {
    __m256i v[8], mag[8], sc[8];
    for (int ib = 0; ib < 8; ++ib) {
      const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a[i].qs + 16 * ib));
      const __m256i idx = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), low4), _mm_and_si128(q, low4));
      v[ib] = _mm256_shuffle_epi8(values, idx);
      mag[ib] = _mm256_sign_epi8(v[ib], v[ib]);
      sc[ib] = _mm256_set1_epi16(int16_t(iq4xs_scale(a[i], ib)));
    }
    const float d = h2f(a[i].d);
    for (int tok = 0; tok < 4; ++tok) {
      const block_q8_K& bt = b[tok][i];
      __m256i sumi = _mm256_setzero_si256();
      for (int ib = 0; ib < 8; ++ib) {
        const __m256i p = _mm256_maddubs_epi16(mag[ib], _mm256_sign_epi8(load32(bt.qs + 32 * ib), v[ib]));
        sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, sc[ib]));
      }
      total[tok] += bt.d * (d * float(hsum_i32(sumi)));
    }
  }
  for (int j = 0; j < 4; ++j) out[j] = total[j];
}

// A rows kernel K(n, w, w_stride, x, out) as the dispatch tables take it: the one-row kernel
// (K of one row) and the R-row entry (the k-quants take no correction argument).
template <auto K>
LAMINA_AVX2 float one_row(int64_t n, const void* w, const void* x) {
  float out;
  K(n, w, 0, x, &out);
  return out;
}
template <auto K>
LAMINA_AVX2 void rows_entry(int64_t n, const void* w, size_t w_stride, const void* x, const int32_t*, float* out) {
  K(n, w, w_stride, x, out);
}

}  // namespace

VecDotFn avx2_kquant_kernel(GgmlType t) {
  switch (t) {
    case GgmlType::Q2_K: return one_row<rows_q23_K<1, false>>;
    case GgmlType::Q3_K: return one_row<rows_q23_K<1, true>>;
    case GgmlType::Q4_K: return one_row<rows_q4_K<1, false>>;
    case GgmlType::Q5_K: return one_row<rows_q4_K<1, true>>;
    case GgmlType::Q6_K: return one_row<rows_q6_K<1>>;
    case GgmlType::IQ4_XS: return one_row<rows_iq4_xs<1>>;
    default: return nullptr;
  }
}

VecDot4CFn avx2_kquant_kernel4c(GgmlType t) {
  switch (t) {
    case GgmlType::Q2_K: return tokens4_q23<false>;
    case GgmlType::Q3_K: return tokens4_q23<true>;
    case GgmlType::Q4_K: return tokens4_qk<false>;
    case GgmlType::Q5_K: return tokens4_qk<true>;
    case GgmlType::IQ4_XS: return tokens4_iq4_xs;
    default: return nullptr;
  }
}

namespace {

// The R-row decode kernels of the k-quant types that have them (R = 4, 8).
template <int R>
VecDotRows4CFn kquant_rows(GgmlType t) {
  switch (t) {
    case GgmlType::Q2_K: return rows_entry<rows_q23_K<R, false>>;
    case GgmlType::Q3_K: return rows_entry<rows_q23_K<R, true>>;
    case GgmlType::Q4_K: return rows_entry<rows_q4_K<R, false>>;
    case GgmlType::Q5_K: return rows_entry<rows_q4_K<R, true>>;
    case GgmlType::Q6_K: return rows_entry<rows_q6_K<R>>;
    case GgmlType::IQ4_XS: return rows_entry<rows_iq4_xs<R>>;
    default: return nullptr;
  }
}

}  // namespace

VecDotRows4CFn avx2_kquant_rows4c(GgmlType t) { return kquant_rows<4>(t); }
VecDotRows4CFn avx2_kquant_rows8c(GgmlType t) { return kquant_rows<8>(t); }

}  // namespace lamina

#endif
