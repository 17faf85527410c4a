// AMX-INT8 prompt matmul tiles (gemm_amx.h), and the token packing and stripe unpacking that every
// tile kind shares. Each function carries its target attribute, so the file builds without
// -mamx-*: the tiles (AMX) run only where amx_usable() said yes; amx_decode_columns and
// amx_add_terms (AVX-512) also on the AVX-512 tier; the packing (baseline x86-64) and unpacking
// (AVX2 + F16C only: keep it so) on every tier with tiles, AVX2 included.
#include "backend/cpu/gemm_amx.h"

#include "backend/cpu/gemm_tile_layout.h"

#include "backend/cpu/vec_dot.h"
#include "format/quant_blocks.h"
#include "format/quant_decode.h"

#include <cstdlib>
#include <cstring>
#include <type_traits>

#if defined(__x86_64__) && defined(__linux__)
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#define LAMINA_HAS_AMX 1
// GCC 12 warns that _mm512_cvtepi32_ps's unused pass-through operand is uninitialised.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#endif

namespace lamina {

uint8_t* AmxBuffer::get(size_t bytes) {
  if (bytes > size_) {
    p_.reset(static_cast<uint8_t*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64)));
    size_ = bytes;
  }
  return p_.get();
}
void AmxBuffer::Free::operator()(uint8_t* p) const { std::free(p); }


using namespace tile_layout;

size_t amx_tokens_bytes(GgmlType t, int64_t K) {
  if (t == GgmlType::Q4_K) return size_t(K / QK_K) * kKTokBytes;
  if (t == GgmlType::Q6_K) return size_t(K / QK_K) * kK6TokBytes;
  return size_t(K / QK) * kAmxBlockBytes;
}
size_t amx_rows_bytes(GgmlType t, int64_t K) {
  if (t == GgmlType::Q4_K) return size_t(K / QK_K) * kKRowBytes;
  if (t == GgmlType::Q6_K) return size_t(K / QK_K) * kK6RowBytes;
  return size_t(K / QK) * kAmxBlockBytes;
}

#if LAMINA_HAS_AMX

bool tiles_support(GgmlType t) {
  return t == GgmlType::Q4_0 || t == GgmlType::Q4_1 || t == GgmlType::Q8_0 || t == GgmlType::Q4_K || t == GgmlType::Q5_K ||
         t == GgmlType::Q6_K || t == GgmlType::Q3_K || t == GgmlType::IQ4_XS;
}

bool amx_usable() {
  static const bool ok = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    const bool amx = (d >> 24 & 1) && (d >> 25 & 1);  // AMX-TILE, AMX-INT8
    if (!amx || !__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
        !__builtin_cpu_supports("avx512vl") || !__builtin_cpu_supports("avx512vnni"))
      return false;
    // Linux hands out the 8 KiB tile state only on request (ARCH_REQ_XCOMP_PERM, XTILEDATA).
    constexpr int kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return ok;
}

#define LAMINA_AMX __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c,amx-tile,amx-int8")))
#define LAMINA_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))

namespace {

// The stripes are unpacked with AVX2 + F16C only: the AVX2 and AVX-VNNI tiles (gemm_ymm.cpp) use
// them too.
#define LAMINA_UNPACK __attribute__((target("avx2,fma,f16c")))
#define LAMINA_X86 LAMINA_UNPACK
#include "backend/cpu/q6k_x86.inc"
#define LAMINA_TILE LAMINA_AMX
#include "backend/cpu/gemm_tile_zmm.inc"
#include "backend/cpu/gemm_tile_chain.inc"

// Tiles 0, 1: C, 16 rows x 16 s32 sums (weight rows x tokens); 2, 3: A, 16 weight rows x 32
// quants; 4, 5: B, 8 rows x 64 bytes (4 quants of each of 16 tokens). Two of each so that one
// block's products run while the previous block's sums go through the chain. 6, 7: A and B over
// 16 elements (q6_K's groups).
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {64, 64, 32, 32, 64, 64, 16, 64};
  uint8_t rows[16] = {16, 16, 16, 16, 8, 8, 16, 4};
};

thread_local bool tiles_configured = false;  // until amx_release_tiles on this thread

LAMINA_AMX void configure_tiles() {
  if (tiles_configured) return;
  static const TileConfig config;
  _tile_loadconfig(&config);
  tiles_configured = true;
}

// One block's sums c[i][j] (row i, token j) into the chain (vec_dot.h): acc[i] lanes are tokens.
template <bool Min>
LAMINA_AMX inline void chain16(__m512 (&acc)[16], const int32_t* c, const uint8_t* wb, const uint8_t* xb) {
  const float* dw = reinterpret_cast<const float*>(wb + kScale);
  const float* mw = reinterpret_cast<const float*>(wb + kMin);
  const __m512 dx = _mm512_load_ps(xb + kScale);
  const __m512 sx = Min ? _mm512_load_ps(xb + kMin) : _mm512_setzero_ps();
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) acc[i] = chain_step<Min>(acc[i], _mm512_load_si512(c + 16 * i), dw[i], mw[i], dx, sx);
}

// Block blk's products into tile C (A, B its operands), stored to cbuf.
#define LAMINA_AMX_BLOCK(C, A, B, blk, cbuf)                     \
  do {                                                           \
    _tile_zero(C);                                               \
    _tile_loadd(A, rows + size_t(blk) * kAmxBlockBytes, 32);     \
    _tile_loadd(B, tokens + size_t(blk) * kAmxBlockBytes, 64);   \
    _tile_dpbssd(C, A, B);                                       \
    _tile_stored(C, cbuf, 64);                                   \
  } while (0)

template <bool Min>
LAMINA_AMX void tile(const uint8_t* rows, const uint8_t* tokens, int64_t nb, float* out, size_t out_stride, int n_tokens) {
  configure_tiles();
  alignas(64) int32_t c0[256], c1[256];
  __m512 acc[16];
  for (auto& a : acc) a = _mm512_setzero_ps();
  // Block b + 1's tile products are issued before block b's chain, so the two overlap.
  LAMINA_AMX_BLOCK(0, 2, 4, 0, c0);
  for (int64_t b = 0; b < nb; b += 2) {
    if (b + 1 < nb) LAMINA_AMX_BLOCK(1, 3, 5, b + 1, c1);
    chain16<Min>(acc, c0, rows + size_t(b) * kAmxBlockBytes, tokens + size_t(b) * kAmxBlockBytes);
    if (b + 1 == nb) break;
    if (b + 2 < nb) LAMINA_AMX_BLOCK(0, 2, 4, b + 2, c0);
    chain16<Min>(acc, c1, rows + size_t(b + 1) * kAmxBlockBytes, tokens + size_t(b + 1) * kAmxBlockBytes);
  }
  store_tile(acc, out, out_stride, n_tokens);
}

// q4_K: per super-block, each sub-block's tile sums times its scale (int32), the mins' term as
// int16 pair products (dpwssd), then the row kernel's formula dx * (d * S - dmin * M), added to
// the running total (vec_dot_avx2.cpp's dot_q4_K, term for term).
#define LAMINA_AMX_SUB(C, A, B, sub, cbuf)                   \
  do {                                                       \
    _tile_zero(C);                                           \
    _tile_loadd(A, wb + 512 * (sub), 32);                    \
    _tile_loadd(B, xb + 512 * (sub), 64);                    \
    _tile_dpbssd(C, A, B);                                   \
    _tile_stored(C, cbuf, 64);                               \
  } while (0)

LAMINA_AMX inline void scale_sums(__m512i (&S)[16], const int32_t* c, const int32_t* sc) {
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) scale_add(S[i], _mm512_load_si512(c + 16 * i), sc[i]);
}

LAMINA_AMX void tile_q4_K(const uint8_t* rows, const uint8_t* tokens, int64_t nsb, float* out, size_t out_stride,
                          int n_tokens) {
  configure_tiles();
  alignas(64) int32_t c0[256], c1[256];
  __m512 acc[16];
  for (auto& a : acc) a = _mm512_setzero_ps();
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const uint8_t* wb = rows + size_t(sb) * kKRowBytes;
    const uint8_t* xb = tokens + size_t(sb) * kKTokBytes;
    const int32_t* sc = reinterpret_cast<const int32_t*>(wb + kKRowSc);
    __m512i S[16];
    for (auto& v : S) v = _mm512_setzero_si512();
    LAMINA_AMX_SUB(0, 2, 4, 0, c0);
    for (int sub = 0; sub < 8; sub += 2) {  // sub-block sub + 1's products run beside sub's scaling
      LAMINA_AMX_SUB(1, 3, 5, sub + 1, c1);
      scale_sums(S, c0, sc + 16 * sub);
      if (sub + 2 < 8) LAMINA_AMX_SUB(0, 2, 4, sub + 2, c0);
      scale_sums(S, c1, sc + 16 * (sub + 1));
    }
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) acc[i] = _mm512_add_ps(acc[i], q4k_term(S[i], wb, xb, i));
  }
  store_tile(acc, out, out_stride, n_tokens);
}

// q6_K: per super-block, each 16-element group's tile sums times its scale (int32), then the row
// kernel's formula (dx * d) * S, added to the running total (dot_q6_K, term for term).
#define LAMINA_AMX_GROUP(C, g, cbuf)                         \
  do {                                                       \
    _tile_zero(C);                                           \
    _tile_loadd(6, wb + 256 * (g), 16);                      \
    _tile_loadd(7, xb + 256 * (g), 64);                      \
    _tile_dpbssd(C, 6, 7);                                   \
    _tile_stored(C, cbuf, 64);                               \
  } while (0)

// q6_K, and in its layout q3_K and iq4_xs (T: which term, group_term).
template <GgmlType T>
LAMINA_AMX void tile_groups(const uint8_t* rows, const uint8_t* tokens, int64_t nsb, float* out, size_t out_stride,
                            int n_tokens) {
  configure_tiles();
  alignas(64) int32_t c0[256], c1[256];
  __m512 acc[16];
  for (auto& a : acc) a = _mm512_setzero_ps();
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const uint8_t* wb = rows + size_t(sb) * kK6RowBytes;
    const uint8_t* xb = tokens + size_t(sb) * kK6TokBytes;
    const int32_t* sc = reinterpret_cast<const int32_t*>(wb + kK6RowSc);
    __m512i S[16];
    for (auto& v : S) v = _mm512_setzero_si512();
    LAMINA_AMX_GROUP(0, 0, c0);
    for (int g = 0; g < 16; g += 2) {
      LAMINA_AMX_GROUP(1, g + 1, c1);
      scale_sums(S, c0, sc + 16 * g);
      if (g + 2 < 16) LAMINA_AMX_GROUP(0, g + 2, c0);
      scale_sums(S, c1, sc + 16 * (g + 1));
    }
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) acc[i] = _mm512_add_ps(acc[i], group_term<T>(S[i], wb, xb, i));
  }
  store_tile(acc, out, out_stride, n_tokens);
}

LAMINA_UNPACK inline __m256i nibbles(const uint8_t* qs) {  // 16 bytes -> 32: low nibbles, then high
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), _mm256_set1_epi8(0x0F));
}

}  // namespace

// q4_K, and (kQ5) q5_K into q4_K's stripe layout: q5_K's quants 0..31 (the fifth bit of element
// 32 sub + l is bit sub of qh[l]) where q4_K's are 0..15; scales, mins, d and dmin the same.
template <bool kQ5>
LAMINA_UNPACK static void unpack_q45_K(const uint8_t* w, size_t w_rb, int64_t K, uint8_t* dst) {
  using Block = std::conditional_t<kQ5, block_q5_K, block_q4_K>;
  const __m256i low4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
  for (int i = 0; i < kAmxRows; ++i) {
    const auto* row = reinterpret_cast<const Block*>(w + size_t(i) * w_rb);
    for (int64_t sb = 0; sb < K / QK_K; ++sb) {
      const Block& blk = row[sb];
      uint8_t* d = dst + size_t(sb) * kKRowBytes;
      for (int c = 0; c < 4; ++c) {  // 64 elements: 32 low nibbles (sub-block 2c), 32 high (2c + 1)
        const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qs + 32 * c));
        __m256i lo = _mm256_and_si256(raw, low4), hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
        if constexpr (kQ5) {  // bits 2c and 2c + 1 of each qh byte as 16 (bytes of 0 or 1 shifted by 4 stay in their byte)
          const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qh));
          lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * c), one), 4));
          hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * c + 1), one), 4));
        }
        _mm256_store_si256(reinterpret_cast<__m256i*>(d + 512 * (2 * c) + 32 * i), lo);
        _mm256_store_si256(reinterpret_cast<__m256i*>(d + 512 * (2 * c + 1) + 32 * i), hi);
      }
      uint8_t sm[16];  // the scales, then the mins
      q4k_scales_mins(blk.scales, sm);
      const uint8_t* sc = sm;
      const uint8_t* mn = sm + 8;
      auto* scales = reinterpret_cast<int32_t*>(d + kKRowSc);
      auto* mins = reinterpret_cast<int32_t*>(d + kKRowMin);
      for (int sub = 0; sub < 8; ++sub) scales[16 * sub + i] = sc[sub];
      for (int p = 0; p < 4; ++p) mins[16 * p + i] = int32_t(uint32_t(mn[2 * p]) | uint32_t(mn[2 * p + 1]) << 16);
      reinterpret_cast<float*>(d + kKRowD)[i] = _cvtsh_ss(blk.d);
      reinterpret_cast<float*>(d + kKRowDmin)[i] = _cvtsh_ss(blk.dmin);
    }
  }
}

// Row i's 16 quants of groups g and g + 1 of a q6_K-layout super-block (d): v's two halves.
LAMINA_UNPACK static inline void store2(uint8_t* d, int g, int i, __m256i v) {
  _mm_store_si128(reinterpret_cast<__m128i*>(d + 256 * g + 16 * i), _mm256_castsi256_si128(v));
  _mm_store_si128(reinterpret_cast<__m128i*>(d + 256 * (g + 1) + 16 * i), _mm256_extracti128_si256(v, 1));
}

LAMINA_UNPACK static void unpack_q6_K(const uint8_t* w, size_t w_rb, int64_t K, uint8_t* dst) {
  const __m256i bias = _mm256_set1_epi8(32);
  for (int i = 0; i < kAmxRows; ++i) {
    const auto* row = reinterpret_cast<const block_q6_K*>(w + size_t(i) * w_rb);
    for (int64_t sb = 0; sb < K / QK_K; ++sb) {
      const block_q6_K& blk = row[sb];
      uint8_t* d = dst + size_t(sb) * kK6RowBytes;
      for (int half = 0; half < 2; ++half) {  // dot_q6_K's bit layout: 4 x 32 elements per half
        __m256i q[4];
        q6k_quants(blk, half, q);
        for (int k = 0; k < 4; ++k) {  // elements 128 half + 32 k ..: groups 8 half + 2 k and + 1
          const __m256i s = _mm256_sub_epi8(q[k], bias);
          store2(d, 8 * half + 2 * k, i, s);
        }
      }
      auto* scales = reinterpret_cast<int32_t*>(d + kK6RowSc);
      for (int g = 0; g < 16; ++g) scales[16 * g + i] = blk.scales[g];
      reinterpret_cast<float*>(d + kK6RowD)[i] = _cvtsh_ss(blk.d);
    }
  }
}

// q3_K and iq4_xs into q6_K's stripe layout (16-element groups of signed quants, int32 group
// scales, d): q3_K's quants -4..3 under its 16 signed 6-bit scales; iq4_xs's table values
// (-127..113) with each 32-element sub-block's scale on both of its groups (the integer sums
// are dot_q3_K's and dot_iq4_xs's: scale * (s1 + s2) = scale * s1 + scale * s2). 32 elements
// (two groups) per vector step, as decode_q3_K and decode_iq4_xs read them.
template <GgmlType T>
LAMINA_UNPACK static void unpack_groups(const uint8_t* w, size_t w_rb, int64_t K, uint8_t* dst) {
  using Block = std::conditional_t<T == GgmlType::Q3_K, block_q3_K, block_iq4_xs>;
  const __m256i three = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1), four = _mm256_set1_epi8(4);
  alignas(16) int8_t table[16];  // iq4_xs: the values, in both lanes for pshufb by nibble
  for (int k = 0; k < 16; ++k) table[k] = int8_t(iq4_value(k));
  const __m256i values = _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(table)));
  for (int i = 0; i < kAmxRows; ++i) {
    const auto* row = reinterpret_cast<const Block*>(w + size_t(i) * w_rb);
    for (int64_t sb = 0; sb < K / QK_K; ++sb) {
      const Block& blk = row[sb];
      uint8_t* d = dst + size_t(sb) * kK6RowBytes;
      auto* scales = reinterpret_cast<int32_t*>(d + kK6RowSc);
      if constexpr (T == GgmlType::Q3_K) {
        const __m256i hm = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.hmask));
        for (int n = 0; n < 2; ++n) {  // elements 128 n + 32 j + l: bits 2j of qs[32 n + l], bit 4n + j of hmask[l]
          const __m256i qs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qs + 32 * n));
          for (int j = 0; j < 4; ++j) {
            const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(qs, 2 * j), three);
            const __m256i hb = _mm256_and_si256(_mm256_srli_epi16(hm, 4 * n + j), one);
            // lo - (hb ? 0 : 4) = lo + 4 hb - 4 (the bytes of 0/1 shifted by 2 stay in their byte)
            store2(d, 8 * n + 2 * j, i, _mm256_sub_epi8(_mm256_add_epi8(lo, _mm256_slli_epi16(hb, 2)), four));
          }
        }
        for (int g = 0; g < 16; ++g) scales[16 * g + i] = q3k_scale(blk.scales, g);
      } else {
        for (int ib = 0; ib < 8; ++ib) {  // sub-block ib: low nibbles elements 0..15, high 16..31
          store2(d, 2 * ib, i, _mm256_shuffle_epi8(values, nibbles(blk.qs + 16 * ib)));
          scales[16 * (2 * ib) + i] = scales[16 * (2 * ib + 1) + i] = iq4xs_scale(blk, ib);
        }
      }
      reinterpret_cast<float*>(d + kK6RowD)[i] = _cvtsh_ss(blk.d);
    }
  }
}

LAMINA_UNPACK void amx_unpack_rows(GgmlType t, const uint8_t* w, size_t w_rb, int64_t K, uint8_t* dst) {
  if (t == GgmlType::Q4_K) return unpack_q45_K<false>(w, w_rb, K, dst);
  if (t == GgmlType::Q5_K) return unpack_q45_K<true>(w, w_rb, K, dst);
  if (t == GgmlType::Q6_K) return unpack_q6_K(w, w_rb, K, dst);
  if (t == GgmlType::Q3_K) return unpack_groups<GgmlType::Q3_K>(w, w_rb, K, dst);
  if (t == GgmlType::IQ4_XS) return unpack_groups<GgmlType::IQ4_XS>(w, w_rb, K, dst);
  const int64_t nb = K / QK;
  for (int i = 0; i < kAmxRows; ++i) {
    const uint8_t* row = w + size_t(i) * w_rb;
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* d = dst + size_t(b) * kAmxBlockBytes;
      auto* q = reinterpret_cast<__m256i*>(d + 32 * i);
      float* dw = reinterpret_cast<float*>(d + kScale);
      float* mw = reinterpret_cast<float*>(d + kMin);
      if (t == GgmlType::Q4_0) {
        const auto& blk = reinterpret_cast<const block_q4_0*>(row)[b];
        _mm256_store_si256(q, _mm256_sub_epi8(nibbles(blk.qs), _mm256_set1_epi8(8)));
        dw[i] = _cvtsh_ss(blk.d), mw[i] = 0.f;
      } else if (t == GgmlType::Q4_1) {
        const auto& blk = reinterpret_cast<const block_q4_1*>(row)[b];
        _mm256_store_si256(q, nibbles(blk.qs));
        dw[i] = _cvtsh_ss(blk.d), mw[i] = _cvtsh_ss(blk.m);
      } else {
        const auto& blk = reinterpret_cast<const block_q8_0*>(row)[b];
        _mm256_store_si256(q, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qs)));
        dw[i] = _cvtsh_ss(blk.d), mw[i] = 0.f;
      }
    }
  }
}

static void pack_q8_K(const uint8_t* xq, size_t x_rb, int64_t T, int64_t t0, int64_t K, uint8_t* dst) {
  std::memset(dst, 0, size_t(K / QK_K) * kKTokBytes);
  for (int n = 0; n < kAmxTokens && t0 + n < T; ++n) {
    const auto* x = reinterpret_cast<const block_q8_K*>(xq + size_t(t0 + n) * x_rb);
    for (int64_t sb = 0; sb < K / QK_K; ++sb) {
      uint8_t* d = dst + size_t(sb) * kKTokBytes;
      for (int sub = 0; sub < 8; ++sub)
        for (int k4 = 0; k4 < 8; ++k4) std::memcpy(d + 512 * sub + 64 * k4 + 4 * n, x[sb].qs + 32 * sub + 4 * k4, 4);
      std::memcpy(d + kKTokD + 4 * n, &x[sb].d, 4);
      for (int p = 0; p < 4; ++p) {
        const int16_t sums[2] = {int16_t(x[sb].bsums[4 * p] + x[sb].bsums[4 * p + 1]),
                                 int16_t(x[sb].bsums[4 * p + 2] + x[sb].bsums[4 * p + 3])};
        std::memcpy(d + kKTokPairs + 64 * p + 4 * n, sums, 4);
      }
    }
  }
}

static void pack_q8_K_groups(const uint8_t* xq, size_t x_rb, int64_t T, int64_t t0, int64_t K, uint8_t* dst) {
  std::memset(dst, 0, size_t(K / QK_K) * kK6TokBytes);
  for (int n = 0; n < kAmxTokens && t0 + n < T; ++n) {
    const auto* x = reinterpret_cast<const block_q8_K*>(xq + size_t(t0 + n) * x_rb);
    for (int64_t sb = 0; sb < K / QK_K; ++sb) {
      uint8_t* d = dst + size_t(sb) * kK6TokBytes;
      for (int g = 0; g < 16; ++g)
        for (int k4 = 0; k4 < 4; ++k4) std::memcpy(d + 256 * g + 64 * k4 + 4 * n, x[sb].qs + 16 * g + 4 * k4, 4);
      std::memcpy(d + kK6TokD + 4 * n, &x[sb].d, 4);
    }
  }
}

void amx_pack_tokens(GgmlType t, const uint8_t* xq, size_t x_rb, int64_t T, int64_t t0, int64_t K, uint8_t* dst) {
  if (t == GgmlType::Q4_K) return pack_q8_K(xq, x_rb, T, t0, K, dst);
  if (t == GgmlType::Q6_K) return pack_q8_K_groups(xq, x_rb, T, t0, K, dst);
  const bool with_sum = t == GgmlType::Q4_1;  // act_q8s {d, s, qs} rather than act_q8 {d, qs}
  const size_t blk_bytes = with_sum ? sizeof(act_q8s) : sizeof(act_q8), qs_at = with_sum ? 8 : 4;
  const int64_t nb = K / QK;
  std::memset(dst, 0, size_t(nb) * kAmxBlockBytes);
  for (int n = 0; n < kAmxTokens && t0 + n < T; ++n) {
    const uint8_t* x = xq + size_t(t0 + n) * x_rb;
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = x + size_t(b) * blk_bytes;
      uint8_t* d = dst + size_t(b) * kAmxBlockBytes;
      for (int k4 = 0; k4 < 8; ++k4) std::memcpy(d + 64 * k4 + 4 * n, blk + qs_at + 4 * k4, 4);
      std::memcpy(d + kScale + 4 * n, blk, 4);
      if (with_sum) std::memcpy(d + kMin + 4 * n, blk + 4, 4);
    }
  }
}

LAMINA_AVX512 void amx_decode_columns(GgmlType t, const uint8_t* rows, const int32_t* cols, int n, float* dec) {
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  if (t == GgmlType::Q4_K || t == GgmlType::Q6_K) {  // tile_decode_columns' formulas, 16 rows at once
    const bool q4 = t == GgmlType::Q4_K;
    const __m512i row_at = _mm512_mullo_epi32(lane, _mm512_set1_epi32(q4 ? 32 : 16));
    for (int c = 0; c < n; ++c) {
      const int e = cols[c] % QK_K, part = q4 ? e / 32 : e / 16;
      const uint8_t* d = rows + size_t(cols[c] / QK_K) * (q4 ? kKRowBytes : kK6RowBytes);
      const int at = q4 ? 512 * part + e % 32 : 256 * part + e % 16;
      const __m512i g = _mm512_i32gather_epi32(_mm512_add_epi32(row_at, _mm512_set1_epi32(at)), d, 1);
      const __m512 sc = _mm512_cvtepi32_ps(_mm512_load_si512(d + (q4 ? kKRowSc : kK6RowSc) + 64 * size_t(part)));
      __m512 v;
      if (q4) {
        const __m512i pair = _mm512_load_si512(d + kKRowMin + 64 * size_t(part / 2));
        const __m512 m = _mm512_cvtepi32_ps(part % 2 ? _mm512_srli_epi32(pair, 16) : _mm512_and_si512(pair, _mm512_set1_epi32(0xFFFF)));
        const __m512 q = _mm512_cvtepi32_ps(_mm512_and_si512(g, _mm512_set1_epi32(0xFF)));
        v = _mm512_sub_ps(_mm512_mul_ps(_mm512_mul_ps(_mm512_load_ps(d + kKRowD), sc), q), _mm512_mul_ps(_mm512_load_ps(d + kKRowDmin), m));
      } else {
        const __m512 q = _mm512_cvtepi32_ps(_mm512_srai_epi32(_mm512_slli_epi32(g, 24), 24));
        v = _mm512_mul_ps(_mm512_mul_ps(_mm512_load_ps(d + kK6RowD), sc), q);
      }
      _mm512_storeu_ps(dec + size_t(c) * kAmxRows, v);
    }
    return;
  }
  const __m512i row_at = _mm512_mullo_epi32(lane, _mm512_set1_epi32(32));
  for (int c = 0; c < n; ++c) {
    const uint8_t* d = rows + size_t(cols[c] / QK) * kAmxBlockBytes;
    // Row i's quant at byte 32 i + e, as the low byte of a gathered dword, sign-extended.
    const __m512i g = _mm512_i32gather_epi32(_mm512_add_epi32(row_at, _mm512_set1_epi32(cols[c] % QK)), d, 1);
    const __m512 q = _mm512_cvtepi32_ps(_mm512_srai_epi32(_mm512_slli_epi32(g, 24), 24));
    __m512 v = _mm512_mul_ps(_mm512_load_ps(d + kScale), q);  // d * q (+ m): quant_decode.h's formulas
    if (t == GgmlType::Q4_1) v = _mm512_add_ps(v, _mm512_load_ps(d + kMin));
    _mm512_storeu_ps(dec + size_t(c) * kAmxRows, v);
  }
}

LAMINA_AVX512 void amx_add_terms(float* y, int n, const float* value, const float* const* cols) {
  __m512 v = _mm512_loadu_ps(y);
  for (int k = 0; k < n; ++k) v = _mm512_add_ps(v, _mm512_mul_ps(_mm512_set1_ps(value[k]), _mm512_loadu_ps(cols[k])));
  _mm512_storeu_ps(y, v);
}

LAMINA_AMX void amx_release_tiles() {
  if (!tiles_configured) return;
  _tile_release();
  tiles_configured = false;
}

void amx_tile(GgmlType t, const uint8_t* rows, const uint8_t* tokens, int64_t K, float* out, size_t out_stride,
              int n_tokens) {
  if (t == GgmlType::Q4_K || t == GgmlType::Q5_K) tile_q4_K(rows, tokens, K / QK_K, out, out_stride, n_tokens);
  else if (t == GgmlType::Q6_K) tile_groups<GgmlType::Q6_K>(rows, tokens, K / QK_K, out, out_stride, n_tokens);
  else if (t == GgmlType::Q3_K) tile_groups<GgmlType::Q3_K>(rows, tokens, K / QK_K, out, out_stride, n_tokens);
  else if (t == GgmlType::IQ4_XS) tile_groups<GgmlType::IQ4_XS>(rows, tokens, K / QK_K, out, out_stride, n_tokens);
  else if (t == GgmlType::Q4_1) tile<true>(rows, tokens, K / QK, out, out_stride, n_tokens);
  else tile<false>(rows, tokens, K / QK, out, out_stride, n_tokens);
}

#else  // no tiles on this platform: never usable, never called

bool tiles_support(GgmlType) { return false; }
bool amx_usable() { return false; }
void amx_release_tiles() {}
void amx_decode_columns(GgmlType, const uint8_t*, const int32_t*, int, float*) {}
void amx_add_terms(float*, int, const float*, const float* const*) {}
void amx_unpack_rows(GgmlType, const uint8_t*, size_t, int64_t, uint8_t*) {}
void amx_pack_tokens(GgmlType, const uint8_t*, size_t, int64_t, int64_t, int64_t, uint8_t*) {}
void amx_tile(GgmlType, const uint8_t*, const uint8_t*, int64_t, float*, size_t, int) {}

#endif

}  // namespace lamina
