// The prompt tiles of gemm_amx.h on CPUs with AVX-512 VNNI but no AMX (AMD Zen 4, Intel Ice
// Lake, ...): the same packed token tiles and unpacked 16-row stripes, each tile product done by
// dpbusd instead of TDPBSSD. For row i and four-byte group k, the row's four quants (broadcast)
// meet the 16 tokens' four quants (one zmm, the B operand's row k), so the 16 tokens' sums build
// up in the lanes of one register, complete: no horizontal sums. dpbusd takes unsigned bytes
// against signed ones; the stripe's quants are read with their top bit flipped (+128 as u8) and
// 128 * sum(x) comes off each sum, so the integer sums are the exact ones TDPBSSD gives, and the
// float side is the AMX tiles' (gemm_tile_chain.inc): every output is the row kernels' bits.
// Against the four-token row kernels this tier had for prompts: no per-(row, token) horizontal
// sums and one activation load per 16 rows (docs/benchmarks.md).
#include "backend/cpu/gemm_amx.h"

#include "backend/cpu/gemm_tile_layout.h"
#include "format/quant_blocks.h"

#include <cstring>

#if defined(__x86_64__) && defined(__linux__)
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12: AVX-512 intrinsics' pass-through operands
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#define LAMINA_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))

namespace lamina {
namespace {

using namespace tile_layout;

#define LAMINA_TILE LAMINA_VNNI
#include "backend/cpu/gemm_tile_zmm.inc"
#include "backend/cpu/gemm_tile_chain.inc"

// c[i] lane j = sum over G four-byte groups of row i's quants (a + i * a_row) times token j's
// (b + 64 k: the B operand's rows), exact: as TDPBSSD's tile C.
template <int G>
LAMINA_VNNI inline void sums16(const uint8_t* a, int a_row, const uint8_t* b, __m512i (&c)[16]) {
  const __m512i ones = _mm512_set1_epi8(1), flip = _mm512_set1_epi8(char(0x80));
  __m512i X[G], sx = _mm512_setzero_si512();
  for (int k = 0; k < G; ++k) {
    X[k] = _mm512_load_si512(b + 64 * k);
    sx = _mm512_dpbusd_epi32(sx, ones, X[k]);  // sum(x) per token
  }
  const __m512i base = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sx, 7));
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) {
    __m512i s = base;
    for (int k = 0; k < G; ++k) {
      int32_t w;
      std::memcpy(&w, a + size_t(i) * size_t(a_row) + 4 * k, 4);
      s = _mm512_dpbusd_epi32(s, _mm512_xor_si512(_mm512_set1_epi32(w), flip), X[k]);
    }
    c[i] = s;
  }
}

template <bool Min>
LAMINA_VNNI void tile(const uint8_t* rows, const uint8_t* tokens, int64_t nb, float* out, size_t out_stride, int n_tokens) {
  __m512 acc[16];
  for (auto& a : acc) a = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* wb = rows + size_t(b) * kAmxBlockBytes;
    const uint8_t* xb = tokens + size_t(b) * kAmxBlockBytes;
    __m512i c[16];
    sums16<8>(wb, 32, xb, c);
    const float* dw = reinterpret_cast<const float*>(wb + kScale);
    const float* mw = reinterpret_cast<const float*>(wb + kMin);
    const __m512 dx = _mm512_load_ps(xb + kScale);
    const __m512 sx = Min ? _mm512_load_ps(xb + kMin) : _mm512_setzero_ps();
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) acc[i] = chain_step<Min>(acc[i], c[i], dw[i], mw[i], dx, sx);
  }
  store_tile(acc, out, out_stride, n_tokens);
}

// q4_K (8 sub-blocks of 32) and q6_K (16 groups of 16; q3_K and iq4_xs in its layout): each
// part's sums times the rows' scales in int32, then the type's term per super-block, as the AMX
// tiles.
template <GgmlType T>
LAMINA_VNNI void tile_k(const uint8_t* rows, const uint8_t* tokens, int64_t nsb, float* out, size_t out_stride, int n_tokens) {
  constexpr bool q4 = T == GgmlType::Q4_K;
  constexpr int kParts = q4 ? 8 : 16, kGroups = q4 ? 8 : 4, kRowBytes = q4 ? 32 : 16;
  constexpr size_t kPart = q4 ? 512 : 256, kSc = q4 ? kKRowSc : kK6RowSc;
  __m512 acc[16];
  for (auto& a : acc) a = _mm512_setzero_ps();
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const uint8_t* wb = rows + size_t(sb) * (q4 ? kKRowBytes : kK6RowBytes);
    const uint8_t* xb = tokens + size_t(sb) * (q4 ? kKTokBytes : kK6TokBytes);
    const int32_t* sc = reinterpret_cast<const int32_t*>(wb + kSc);
    __m512i S[16];
    for (auto& v : S) v = _mm512_setzero_si512();
    for (int part = 0; part < kParts; ++part) {
      __m512i c[16];
      sums16<kGroups>(wb + kPart * size_t(part), kRowBytes, xb + kPart * size_t(part), c);
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i) scale_add(S[i], c[i], sc[16 * part + i]);
    }
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) {
      if constexpr (q4) acc[i] = _mm512_add_ps(acc[i], q4k_term(S[i], wb, xb, i));
      else acc[i] = _mm512_add_ps(acc[i], group_term<T>(S[i], wb, xb, i));
    }
  }
  store_tile(acc, out, out_stride, n_tokens);
}

}  // namespace

void vnni_tile(GgmlType t, const uint8_t* rows, const uint8_t* tokens, int64_t K, float* out, size_t out_stride,
               int n_tokens) {
  if (t == GgmlType::Q4_K || t == GgmlType::Q5_K) tile_k<GgmlType::Q4_K>(rows, tokens, K / QK_K, out, out_stride, n_tokens);
  else if (t == GgmlType::Q6_K) tile_k<GgmlType::Q6_K>(rows, tokens, K / QK_K, out, out_stride, n_tokens);
  else if (t == GgmlType::Q3_K) tile_k<GgmlType::Q3_K>(rows, tokens, K / QK_K, out, out_stride, n_tokens);
  else if (t == GgmlType::IQ4_XS) tile_k<GgmlType::IQ4_XS>(rows, tokens, K / QK_K, out, out_stride, n_tokens);
  else if (t == GgmlType::Q4_1) tile<true>(rows, tokens, K / QK, out, out_stride, n_tokens);
  else tile<false>(rows, tokens, K / QK, out, out_stride, n_tokens);
}

}  // namespace lamina

#else  // the stripes and token tiles are built by x86 Linux code only (gemm_amx.cpp)
namespace lamina {
void vnni_tile(GgmlType, const uint8_t*, const uint8_t*, int64_t, float*, size_t, int) {}
}  // namespace lamina
#endif
