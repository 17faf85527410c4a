// AMX-INT8 prompt matmul tiles (gemm_amx.h). Each function carries its target attribute: the
// file builds without -mamx-*, and the backend calls it only where amx_usable() said yes.
#include "backend/cpu/gemm_amx.h"

#include "backend/cpu/vec_dot.h"
#include "format/quant_blocks.h"

#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) && defined(__linux__)
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#define LAMINA_HAS_AMX 1
// GCC 12 warns that _mm512_cvtepi32_ps's unused pass-through operand is uninitialised.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
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

bool amx_supports(GgmlType t) { return t == GgmlType::Q4_0 || t == GgmlType::Q4_1 || t == GgmlType::Q8_0; }

#if LAMINA_HAS_AMX

bool amx_usable() {
  static const bool ok = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    const bool amx = (d >> 24 & 1) && (d >> 25 & 1);  // AMX-TILE, AMX-INT8
    if (!amx || !__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
        !__builtin_cpu_supports("avx512vl"))
      return false;
    // Linux hands out the 8 KiB tile state only on request (ARCH_REQ_XCOMP_PERM, XTILEDATA).
    constexpr int kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return ok;
}

#define LAMINA_AMX __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c,amx-tile,amx-int8")))

namespace {

constexpr size_t kScale = 512, kMin = 576;  // offsets in a block of either layout (quants at 0)

// Tiles 0, 1: C, 16 rows x 16 s32 sums (weight rows x tokens); 2, 3: A, 16 weight rows x 32
// quants; 4, 5: B, 8 rows x 64 bytes (4 quants of each of 16 tokens). Two of each so that one
// block's products run while the previous block's sums go through the chain.
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {64, 64, 32, 32, 64, 64};
  uint8_t rows[16] = {16, 16, 16, 16, 8, 8};
};

LAMINA_AMX void configure_tiles() {
  thread_local bool done = false;  // the configuration stays with the thread
  if (done) return;
  static const TileConfig config;
  _tile_loadconfig(&config);
  done = true;
}

// One block's sums c[i][j] (row i, token j) into the chain (vec_dot.h): acc[i] lanes are tokens.
template <bool Min>
LAMINA_AMX inline void chain16(__m512 (&acc)[16], const int32_t* c, const uint8_t* wb, const uint8_t* xb) {
  const float* dw = reinterpret_cast<const float*>(wb + kScale);
  const float* mw = reinterpret_cast<const float*>(wb + kMin);
  const __m512 dx = _mm512_load_ps(xb + kScale);
  const __m512 sx = Min ? _mm512_load_ps(xb + kMin) : _mm512_setzero_ps();
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) {
    const __m512 s = _mm512_mul_ps(_mm512_set1_ps(dw[i]), dx);
    const __m512 f = _mm512_cvtepi32_ps(_mm512_load_si512(c + 16 * i));
    if constexpr (Min) acc[i] = _mm512_add_ps(acc[i], _mm512_fmadd_ps(s, f, _mm512_mul_ps(_mm512_set1_ps(mw[i]), sx)));
    else acc[i] = _mm512_fmadd_ps(f, s, acc[i]);
  }
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
  alignas(64) float t[16][16];  // [row][token] -> out[token][row]
  for (int i = 0; i < 16; ++i) _mm512_store_ps(t[i], acc[i]);
  for (int j = 0; j < n_tokens; ++j)
    for (int i = 0; i < 16; ++i) out[size_t(j) * out_stride + size_t(i)] = t[i][j];
}

LAMINA_AMX inline __m256i nibbles(const uint8_t* qs) {  // 16 bytes -> 32: low nibbles, then high
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), _mm256_set1_epi8(0x0F));
}

}  // namespace

LAMINA_AMX void amx_unpack_rows(GgmlType t, const uint8_t* w, size_t w_rb, int64_t K, uint8_t* dst) {
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

void amx_pack_tokens(GgmlType t, const uint8_t* xq, size_t x_rb, int64_t T, int64_t t0, int64_t K, uint8_t* dst) {
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

LAMINA_AMX void amx_decode_columns(GgmlType t, const uint8_t* rows, const int32_t* cols, int n, float* dec) {
  const __m512i row_at = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                            _mm512_set1_epi32(32));
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

LAMINA_AMX void amx_add_terms(float* y, int n, const float* value, const float* const* cols) {
  __m512 v = _mm512_loadu_ps(y);
  for (int k = 0; k < n; ++k) v = _mm512_add_ps(v, _mm512_mul_ps(_mm512_set1_ps(value[k]), _mm512_loadu_ps(cols[k])));
  _mm512_storeu_ps(y, v);
}

void amx_tile(GgmlType t, const uint8_t* rows, const uint8_t* tokens, int64_t K, float* out, size_t out_stride,
              int n_tokens) {
  if (t == GgmlType::Q4_1) tile<true>(rows, tokens, K / QK, out, out_stride, n_tokens);
  else tile<false>(rows, tokens, K / QK, out, out_stride, n_tokens);
}

#else  // no AMX on this platform: never usable, never called

bool amx_usable() { return false; }
void amx_decode_columns(GgmlType, const uint8_t*, const int32_t*, int, float*) {}
void amx_add_terms(float*, int, const float*, const float* const*) {}
void amx_unpack_rows(GgmlType, const uint8_t*, size_t, int64_t, uint8_t*) {}
void amx_pack_tokens(GgmlType, const uint8_t*, size_t, int64_t, int64_t, int64_t, uint8_t*) {}
void amx_tile(GgmlType, const uint8_t*, const uint8_t*, int64_t, float*, size_t, int) {}

#endif

}  // namespace lamina
