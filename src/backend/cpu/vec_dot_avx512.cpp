// AVX-512 (F/BW/VL + VNNI) kernels: the int8 formats' row dot products of vec_dot_int8_x86.inc
// with each u8 x s8 product sum in the EVEX dpbusd (the same exact integer sums as the AVX2 and
// AVX-VNNI builds, so the same floats), which CPUs with AVX-512 VNNI but no VEX AVX-VNNI (AMD
// Zen 4, Intel Ice Lake) have; and a register tile for f16 and bf16 weights' prompts. Each function carries
// its target attribute: the file builds without -mavx512*, and the dispatcher calls it only where
// cpu_runs(CpuIsa::Avx512) (vec_dot.cpp).
#include "backend/cpu/vec_dot.h"

#include "core/half.h"
#include "format/quant_blocks.h"

#include <cmath>
#include <cstring>
#include <iterator>
#include <type_traits>

#if defined(__x86_64__)
#include <immintrin.h>
// GCC 12 warns that the AVX-512 intrinsics' unused pass-through operands are uninitialised.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#define LAMINA_X86 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
#define LAMINA_DOT_U8S8(a, b) _mm256_dpbusd_epi32(_mm256_setzero_si256(), a, b)
#define LAMINA_DOT_U8S8_ACC(acc, a, b) _mm256_dpbusd_epi32(acc, a, b)
#define LAMINA_Q8_BIAS 128

namespace lamina {
namespace {

#include "backend/cpu/vec_dot_int8_x86.inc"

// Sixteen 16-bit floats as f32: f16 or bf16 (the high half of an f32); and one of them.
template <GgmlType T>
LAMINA_X86 inline __m512 half16(const uint16_t* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  if constexpr (T == GgmlType::F16) return _mm512_cvtph_ps(h);
  else return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
template <GgmlType T>
LAMINA_X86 inline float half1(uint16_t h) {
  if constexpr (T == GgmlType::F16) return h2f(h);
  else return bf16_to_f32(h);
}

// Four f16 / bf16 weight rows (w + i * w_stride bytes) against C f32 activation rows (x + j *
// x_stride bytes), C <= kTileTokens: out[j * out_stride + i] = dot_half(n, row i, token j), bit
// for bit. dot_half (vec_dot_avx2.cpp) keeps two 8-lane accumulators over 16-element steps: acc0
// takes elements s..s+7, acc1 s+8..s+15. One zmm here holds both side by side (lanes 0-7 and
// 8-15), each lane the same fma chain; at the end the halves are added and summed as hsum does,
// then the tail in order. Against dot4_half (one row, four tokens: ten loads for eight fmas,
// load-bound), 4 x C outputs share each step's four row conversions and C activation loads: 24
// zmm fmas for 4 conversions and 6 loads, with the 24 accumulators in registers.
template <GgmlType T, int C>
LAMINA_X86 void tile_half(int64_t n, const uint8_t* w, size_t w_stride, const uint8_t* x, size_t x_stride, float* out,
                          size_t out_stride) {
  constexpr int R = kTileRows;
  const uint16_t* a[R];
  const float* b[C];
  for (int i = 0; i < R; ++i) a[i] = reinterpret_cast<const uint16_t*>(w + size_t(i) * w_stride);
  for (int j = 0; j < C; ++j) b[j] = reinterpret_cast<const float*>(x + size_t(j) * x_stride);
  __m512 acc[R][C];
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < C; ++j) acc[i][j] = _mm512_setzero_ps();
  int64_t s = 0;
  for (; s + 16 <= n; s += 16) {
    __m512 wv[R];
    for (int i = 0; i < R; ++i) wv[i] = half16<T>(a[i] + s);
    for (int j = 0; j < C; ++j) {
      const __m512 xv = _mm512_loadu_ps(b[j] + s);
      for (int i = 0; i < R; ++i) acc[i][j] = _mm512_fmadd_ps(wv[i], xv, acc[i][j]);
    }
  }
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < C; ++j) {
      const __m256 lo = _mm512_castps512_ps256(acc[i][j]);
      const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[i][j]), 1));
      float v = hsum(_mm256_add_ps(lo, hi));
      for (int64_t k = s; k < n; ++k) v += half1<T>(a[i][k]) * b[j][k];
      out[size_t(j) * out_stride + size_t(i)] = v;
    }
}

template <GgmlType T>
void tile_half_any(int64_t n, const void* w, size_t w_stride, const void* x, size_t x_stride, int tokens, float* out,
                   size_t out_stride) {
  static constexpr void (*kTiles[])(int64_t, const uint8_t*, size_t, const uint8_t*, size_t, float*, size_t) = {
      tile_half<T, 1>, tile_half<T, 2>, tile_half<T, 3>, tile_half<T, 4>, tile_half<T, 5>, tile_half<T, 6>};
  static_assert(std::size(kTiles) == kTileTokens);
  kTiles[tokens - 1](n, static_cast<const uint8_t*>(w), w_stride, static_cast<const uint8_t*>(x), x_stride, out,
                     out_stride);
}

}  // namespace

VecDotFn avx512_kernel(GgmlType t) { return int8_kernel(t); }
VecDot4CFn avx512_kernel4c(GgmlType t, int* bias) { return int8_kernel4c(t, bias); }
VecDotRows4CFn avx512_rows4c(GgmlType t) { return int8_rows4c(t); }
VecDotRows4CFn avx512_rows8c(GgmlType t) { return int8_rows8c(t); }
VecDotTileFn avx512_tile(GgmlType t) {
  return t == GgmlType::F16 ? tile_half_any<GgmlType::F16> : t == GgmlType::BF16 ? tile_half_any<GgmlType::BF16> : nullptr;
}

}  // namespace lamina

#else
namespace lamina {
VecDotFn avx512_kernel(GgmlType) { return nullptr; }
VecDot4CFn avx512_kernel4c(GgmlType, int*) { return nullptr; }
VecDotRows4CFn avx512_rows4c(GgmlType) { return nullptr; }
VecDotRows4CFn avx512_rows8c(GgmlType) { return nullptr; }
VecDotTileFn avx512_tile(GgmlType) { return nullptr; }
}  // namespace lamina
#endif
