// AVX-VNNI row dot products for the int8 formats (q4_0, q4_1, q8_0): the kernels of
// vec_dot_int8_x86.inc with each u8 x s8 product sum in one _mm256_dpbusd_avx_epi32 instead of
// AVX2's maddubs + madd pair, and q8_0's corrected kernels on offset weights (q + 128, which
// dpbusd takes without overflow). The integer sums are exact either way, so the results equal
// the AVX2 kernels' bit for bit; the other types keep the AVX2 kernels. Each function carries its
// target attribute: the file builds without -mavxvnni, and the dispatcher calls it only on CPUs
// that have AVX-VNNI (vec_dot.cpp, detect_isa).
#include "backend/cpu/vec_dot.h"

#include "core/half.h"
#include "format/quant_blocks.h"

#include <cmath>
#include <cstring>
#include <type_traits>

#if defined(__x86_64__)
#include <immintrin.h>

#define LAMINA_X86 __attribute__((target("avx2,fma,f16c,avxvnni")))
#define LAMINA_DOT_U8S8(a, b) _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), a, b)
#define LAMINA_DOT_U8S8_ACC(acc, a, b) _mm256_dpbusd_avx_epi32(acc, a, b)
#define LAMINA_Q8_BIAS 128

namespace lamina {
namespace {

#include "backend/cpu/vec_dot_int8_x86.inc"

}  // namespace

VecDotRows4CFn vnni_rows4c(GgmlType t) { return int8_rows4c(t); }
VecDotRows4CFn vnni_rows8c(GgmlType t) { return int8_rows8c(t); }
VecDot4CFn vnni_kernel4c(GgmlType t, int* bias) { return int8_kernel4c(t, bias); }
VecDotFn vnni_kernel(GgmlType t) { return int8_kernel(t); }

}  // namespace lamina

#else
namespace lamina {
VecDotRows4CFn vnni_rows4c(GgmlType) { return nullptr; }
VecDotRows4CFn vnni_rows8c(GgmlType) { return nullptr; }
VecDot4CFn vnni_kernel4c(GgmlType, int*) { return nullptr; }
VecDotFn vnni_kernel(GgmlType) { return nullptr; }
}  // namespace lamina
#endif
