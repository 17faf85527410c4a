// The prompt tiles of gemm_amx.h on CPUs without AVX-512: AVX2 (maddubs + madd) and AVX-VNNI (the
// VEX dpbusd), 8-lane vectors over a tile's two halves of 8 tokens (gemm_tile_ymm.inc, compiled
// once for each). The same layouts, exact integer sums and the shared float side
// (gemm_tile_chain.inc), so the same bits as every other kernel; and the portable decode of the
// outliers' weights and their terms that these tiers take instead of the AVX-512 ones.
#include "backend/cpu/gemm_amx.h"

#include "backend/cpu/gemm_tile_layout.h"
#include "format/quant_blocks.h"

#include <cstring>

#if defined(__x86_64__) && defined(__linux__)
#include <immintrin.h>

namespace lamina {

namespace ymm_avx2 {
#define LAMINA_TILE __attribute__((target("avx2,fma,f16c")))
#define LAMINA_YMM_VNNI 0
#include "backend/cpu/gemm_tile_ymm.inc"
#undef LAMINA_TILE
#undef LAMINA_YMM_VNNI
}  // namespace ymm_avx2

namespace ymm_vnni {
#define LAMINA_TILE __attribute__((target("avx2,fma,f16c,avxvnni")))
#define LAMINA_YMM_VNNI 1
#include "backend/cpu/gemm_tile_ymm.inc"
#undef LAMINA_TILE
#undef LAMINA_YMM_VNNI
}  // namespace ymm_vnni

void avx2_tile(GgmlType t, const uint8_t* rows, const uint8_t* tokens, int64_t K, float* out, size_t out_stride,
               int n_tokens) {
  ymm_avx2::tile(t, rows, tokens, K, out, out_stride, n_tokens);
}
void avxvnni_tile(GgmlType t, const uint8_t* rows, const uint8_t* tokens, int64_t K, float* out, size_t out_stride,
                  int n_tokens) {
  ymm_vnni::tile(t, rows, tokens, K, out, out_stride, n_tokens);
}

}  // namespace lamina

#else
namespace lamina {
void avx2_tile(GgmlType, const uint8_t*, const uint8_t*, int64_t, float*, size_t, int) {}
void avxvnni_tile(GgmlType, const uint8_t*, const uint8_t*, int64_t, float*, size_t, int) {}
}  // namespace lamina
#endif

namespace lamina {

using namespace tile_layout;

// quant_decode.h's formulas term for term, from the unpacked stripe: d * q (+ m) for the int8
// types; d * sc * q - dmin * m for q4_K; d * sc * q for q6_K.
void tile_decode_columns(GgmlType t, const uint8_t* rows, const int32_t* cols, int n, float* dec) {
  for (int c = 0; c < n; ++c) {
    if (t == GgmlType::Q4_K) {
      const int e = cols[c] % QK_K, sub = e / 32;
      const uint8_t* d = rows + size_t(cols[c] / QK_K) * kKRowBytes;
      for (int i = 0; i < kAmxRows; ++i) {
        const int32_t sc = reinterpret_cast<const int32_t*>(d + kKRowSc)[16 * sub + i];
        const uint32_t pair = uint32_t(reinterpret_cast<const int32_t*>(d + kKRowMin)[16 * (sub / 2) + i]);
        const float m = float(sub % 2 ? pair >> 16 : pair & 0xFFFF);
        const float q = float(d[512 * sub + 32 * i + e % 32]);
        dec[c * kAmxRows + i] = reinterpret_cast<const float*>(d + kKRowD)[i] * float(sc) * q -
                                reinterpret_cast<const float*>(d + kKRowDmin)[i] * m;
      }
    } else if (t == GgmlType::Q6_K) {
      const int e = cols[c] % QK_K, g = e / 16;
      const uint8_t* d = rows + size_t(cols[c] / QK_K) * kK6RowBytes;
      for (int i = 0; i < kAmxRows; ++i) {
        const int32_t sc = reinterpret_cast<const int32_t*>(d + kK6RowSc)[16 * g + i];
        const float q = float(int8_t(d[256 * g + 16 * i + e % 16]));
        dec[c * kAmxRows + i] = reinterpret_cast<const float*>(d + kK6RowD)[i] * float(sc) * q;
      }
    } else {
      const int e = cols[c] % QK;
      const uint8_t* d = rows + size_t(cols[c] / QK) * kAmxBlockBytes;
      for (int i = 0; i < kAmxRows; ++i) {
        float v = reinterpret_cast<const float*>(d + kScale)[i] * float(int8_t(d[32 * i + e]));
        if (t == GgmlType::Q4_1) v = v + reinterpret_cast<const float*>(d + kMin)[i];
        dec[c * kAmxRows + i] = v;
      }
    }
  }
}

void tile_add_terms(float* y, int n, const float* value, const float* const* cols) {
  for (int i = 0; i < kAmxRows; ++i) {
    float v = y[i];
    for (int k = 0; k < n; ++k) v = v + value[k] * cols[k][i];
    y[i] = v;
  }
}

}  // namespace lamina
