// AMX-INT8 tiles for the prompt matmuls of the int8 weight types (q4_0, q4_1, q8_0) on CPUs that
// have them (Intel Sapphire Rapids and later). A tile product multiplies 16 weight rows by 16
// tokens over one 32-element block (TDPBSSD: int8 x int8 -> exact int32 sums); the blocks' sums
// then go through the float chain of vec_dot.h, so each output is bit for bit what the row dot
// kernels give it.
//
// Layouts (bytes):
//   packed activations, per (token tile of 16, block): qs as the tile's B operand, 8 rows of 64
//     bytes, row k4 holding for each token n its bytes 4 k4 .. 4 k4 + 3 (kAmxActQs); the 16
//     tokens' scales d (f32, 64 bytes) and, for q4_1's activations, their d * sum(q) (64 bytes).
//     Tokens past the end are zero.
//   unpacked weights, per block of a 16-row stripe: the 16 rows' 32 quants as signed bytes, as the
//     tile's A operand (16 rows of 32 bytes), then their scales (f32, 64 bytes) and q4_1's mins
//     (64 bytes).
#pragma once

#include "format/ggml_type.h"

#include <cstddef>
#include <cstdint>
#include <memory>

namespace lamina {

// The CPU has AMX-INT8 with AVX-512, and the kernel let this process use the tile state (asked
// once, on the first call).
bool amx_usable();
// The weight types with an AMX path.
bool amx_supports(GgmlType t);

constexpr int kAmxRows = 16;    // weight rows per stripe
constexpr int kAmxTokens = 16;  // tokens per tile
constexpr size_t kAmxBlockBytes = 512 + 64 + 64;  // one block of either layout above

// 64-byte aligned scratch that grows and is kept.
class AmxBuffer {
 public:
  uint8_t* get(size_t bytes);

 private:
  struct Free {
    void operator()(uint8_t* p) const;
  };
  std::unique_ptr<uint8_t, Free> p_;
  size_t size_ = 0;
};

// Packs tokens [t0, t0 + 16) of T (rows of act_q8 / act_q8s, x_rb bytes apart; K elements) into
// one token tile: K / 32 blocks of kAmxBlockBytes at dst.
void amx_pack_tokens(GgmlType t, const uint8_t* xq, size_t x_rb, int64_t T, int64_t t0, int64_t K, uint8_t* dst);

// Unpacks 16 weight rows (w, w + w_rb, ...) into K / 32 blocks of kAmxBlockBytes at dst.
void amx_unpack_rows(GgmlType t, const uint8_t* w, size_t w_rb, int64_t K, uint8_t* dst);

// dec[c * 16 + i] = element cols[c] of the stripe's row i (c < n), from 16 rows unpacked by
// amx_unpack_rows: bit for bit what dequantize_element gives (the outlier terms' weights).
void amx_decode_columns(GgmlType t, const uint8_t* rows, const int32_t* cols, int n, float* dec);

// y[i] = y[i] + value[k] * cols[k][i] for i < 16, for k = 0, 1, ... n - 1 in turn (one token's
// outlier terms against a stripe's decoded columns; each product rounded, then added).
void amx_add_terms(float* y, int n, const float* value, const float* const* cols);

// out[j * out_stride + i] for tokens j < n_tokens (<= 16) of one packed token tile and the 16
// unpacked rows i: the chained dot products, before the outliers' terms.
void amx_tile(GgmlType t, const uint8_t* rows, const uint8_t* tokens, int64_t K, float* out, size_t out_stride,
              int n_tokens);

}  // namespace lamina
