// AVX-VNNI row dot products for the int8 formats (q4_0, q4_1, q8_0): the kernels of
// vec_dot_int8_x86.inc with each u8 x s8 product sum in one _mm256_dpbusd_avx_epi32 instead of
// AVX2's maddubs + madd pair. The integer sums are exact either way, so the results equal the
// AVX2 kernels' bit for bit; the other types keep the AVX2 kernels. Each function carries its
// target attribute: the file builds without -mavxvnni, and the dispatcher calls it only on CPUs
// that have AVX-VNNI (vec_dot.cpp, detect_isa).
#include "backend/cpu/vec_dot.h"

#include "core/half.h"
#include "format/quant_blocks.h"

#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>

#define LAMINA_X86 __attribute__((target("avx2,fma,f16c,avxvnni")))
#define LAMINA_DOT_U8S8(a, b) _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), a, b)

namespace lamina {
namespace {

#include "backend/cpu/vec_dot_int8_x86.inc"

// Four rows with offset weights: q4_0's nibbles (q + 8) and q8_0's bytes xor 0x80 (q + 128) are
// the unsigned operand as they are, so that each (row, block) takes one dpbusd started from the
// row's corrections instead of a sign instruction and a dpbusd. Same integer sums, same floats.
LAMINA_X86 inline __m256i offset_quants(const block_q4_0& b) { return unpack_nibbles(b.qs); }
LAMINA_X86 inline __m256i offset_quants(const block_q8_0& b) {
  return _mm256_xor_si256(load32(b.qs), _mm256_set1_epi8(char(0x80)));
}

template <class Block>
LAMINA_X86 void dot4c(int64_t n, const void* w, const void* x, size_t stride, const int32_t* corr, size_t corr_stride,
                      float* out) {
  const auto* a = static_cast<const Block*>(w);
  const act_q8* b[4] = {act_row<act_q8>(x, stride, 0), act_row<act_q8>(x, stride, 1), act_row<act_q8>(x, stride, 2),
                        act_row<act_q8>(x, stride, 3)};
  const int32_t* c[4] = {corr, corr + corr_stride, corr + 2 * corr_stride, corr + 3 * corr_stride};
  __m256 acc[4][2];
  for (auto& p : acc) p[0] = p[1] = _mm256_setzero_ps();
  const int64_t nb = n / QK;
  for (int64_t i = 0; i < nb; ++i) {
    const __m256i u = offset_quants(a[i]);
    const float dw = h2f(a[i].d);
    for (int j = 0; j < 4; ++j) {
      const __m256i start = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c[j] + 8 * i));
      const __m256i p = _mm256_dpbusd_avx_epi32(start, u, load32(b[j][i].qs));
      const __m256 d = _mm256_set1_ps(dw * b[j][i].d);
      acc[j][i & 1] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc[j][i & 1]);
    }
  }
  for (int j = 0; j < 4; ++j) out[j] = hsum(_mm256_add_ps(acc[j][0], acc[j][1]));
}

// Four weight rows (w, w + w_stride, ...) against one activation row, offset weights as dot4c:
// the decode path, where the activation block, its corrections and its scale are loaded once for
// four rows and the rows' block loads are in flight together. out[j] is bit for bit what
// dot_<type>(n, w + j * w_stride, x) returns (same integer sums, same accumulators by parity).
template <class Block>
LAMINA_X86 void rows4c(int64_t n, const void* w, size_t w_stride, const void* x, const int32_t* corr, float* out) {
  const Block* a[4];
  for (int j = 0; j < 4; ++j) a[j] = reinterpret_cast<const Block*>(static_cast<const uint8_t*>(w) + size_t(j) * w_stride);
  const auto* b = static_cast<const act_q8*>(x);
  __m256 acc[4][2];
  for (auto& p : acc) p[0] = p[1] = _mm256_setzero_ps();
  const int64_t nb = n / QK;
  for (int64_t i = 0; i < nb; ++i) {
    const __m256i xs = load32(b[i].qs);
    const __m256i start = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(corr + 8 * i));
    const float dx = b[i].d;
    for (int j = 0; j < 4; ++j) {
      const __m256i p = _mm256_dpbusd_avx_epi32(start, offset_quants(a[j][i]), xs);
      const __m256 d = _mm256_set1_ps(h2f(a[j][i].d) * dx);
      acc[j][i & 1] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc[j][i & 1]);
    }
  }
  for (int j = 0; j < 4; ++j) out[j] = hsum(_mm256_add_ps(acc[j][0], acc[j][1]));
}

}  // namespace

// Where it pays: q4_0 decode (SmolLM2-135M shape, tg64 +3.5-5 %). q8_0's four rows measured
// slower than its one-row kernel (-10 %) and q4_1's no faster (docs/benchmarks.md): they keep it.
VecDotRows4CFn vnni_rows4c(GgmlType t) { return t == GgmlType::Q4_0 ? rows4c<block_q4_0> : nullptr; }

VecDot4CFn vnni_kernel4c(GgmlType t, int* bias) {
  switch (t) {
    case GgmlType::Q4_0: *bias = 8; return dot4c<block_q4_0>;
    case GgmlType::Q8_0: *bias = 128; return dot4c<block_q8_0>;
    default: return nullptr;
  }
}

VecDotFn vnni_kernel(GgmlType t) { return int8_kernel(t); }
VecDot4Fn vnni_kernel4(GgmlType t) { return int8_kernel4(t); }

}  // namespace lamina

#else
namespace lamina {
VecDotRows4CFn vnni_rows4c(GgmlType) { return nullptr; }
VecDot4CFn vnni_kernel4c(GgmlType, int*) { return nullptr; }
VecDotFn vnni_kernel(GgmlType) { return nullptr; }
VecDot4Fn vnni_kernel4(GgmlType) { return nullptr; }
}  // namespace lamina
#endif
