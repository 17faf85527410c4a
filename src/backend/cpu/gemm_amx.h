// AMX-INT8 tiles for the prompt matmuls of the int8 weight types (q4_0, q4_1, q8_0), q4_K (and
// q5_K in q4_K's layout) and q6_K on CPUs that have them (Intel Sapphire Rapids and later). A
// tile product multiplies 16 weight rows by 16 tokens over one 32-element block (TDPBSSD:
// int8 x int8 -> exact int32 sums); the blocks'
// sums then go through the float chain of vec_dot.h (q4_K, q6_K: the sums scaled by the
// sub-block scales in int32, q4_K's mins' term in int32, then the row kernel's float formula), so
// each output is bit for bit what the row dot kernels give it.
//
// Layouts (bytes), per 32-element block of the int8 types (kAmxBlockBytes):
//   packed tokens: the block's quants as the tile's B operand, 8 rows of 64 bytes, row k4
//     holding for each token n its bytes 4 k4 .. 4 k4 + 3; the 16 tokens' scales d (f32); for
//     q4_1's activations their d * sum(q) (f32). Tokens past the end are zero.
//   unpacked rows: the 16 rows' 32 quants as signed bytes, as the tile's A operand (16 rows of 32
//     bytes); their scales (f32); q4_1's mins (f32).
// and per 256-element super-block of q4_K:
//   packed tokens: 8 sub-blocks' B operands (8 x 512); d (16 x f32); per pair p of sub-blocks,
//     each token's two 32-element sums as int16 (2p low, 2p + 1 high: 4 x 64).
//   unpacked rows: 8 sub-blocks' A operands (8 x 512, nibbles 0..15; q5_K's 0..31); the sub-block scales as
//     int32 [sub][row] (8 x 64); the mins as int16 pairs [pair][row] (4 x 64); d and dmin (f32).
// and per 256-element super-block of q6_K (16-element groups):
//   packed tokens: 16 groups' B operands (4 rows of 64 bytes each); d (16 x f32).
//   unpacked rows: 16 groups' A operands (16 rows of 16 bytes, q - 32); the group scales as
//     int32 [group][row] (16 x 64); d (f32).
#pragma once

#include "format/ggml_type.h"

#include <cstddef>
#include <cstdint>
#include <memory>

namespace lamina {

// The CPU has AMX-INT8 with AVX-512, and the kernel let this process use the tile state (asked
// once, on the first call).
bool amx_usable();
// The weight types with prompt tiles (every tile kind below: AMX, AVX-512 VNNI, AVX-VNNI, AVX2)
// in this build: q4_0, q4_1, q8_0, q4_K, q5_K, q6_K, q3_K, iq4_xs on x86 Linux, none elsewhere.
bool tiles_support(GgmlType t);

// The layout a type's stripes and token tiles take: the type amx_tokens_bytes, amx_rows_bytes,
// amx_pack_tokens and the column decoders are called with (the unpacking and the tiles take the
// weights' own type). q5_K unpacks into q4_K's stripes (quants 0..31 in place of 0..15; the same
// scales, mins and float chain: vec_dot.h's dot_q45_K has one formula); q3_K and iq4_xs into
// q6_K's (16-element groups of signed quants under int32 scales; their tiles end each super-block
// as dot_q3_K / dot_iq4_xs do, dx * (d * S), where q6_K's take (dx * d) * S).
inline GgmlType tile_layout_type(GgmlType t) {
  return t == GgmlType::Q5_K ? GgmlType::Q4_K : t == GgmlType::Q3_K || t == GgmlType::IQ4_XS ? GgmlType::Q6_K : t;
}

constexpr int kAmxRows = 16;    // weight rows per stripe
constexpr int kAmxTokens = 16;  // tokens per tile
constexpr size_t kAmxBlockBytes = 512 + 64 + 64;  // one block of either int8 layout above

// The bytes of one packed token tile and of one unpacked 16-row stripe, K elements per row.
size_t amx_tokens_bytes(GgmlType t, int64_t K);
size_t amx_rows_bytes(GgmlType t, int64_t K);

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

// Packs tokens [t0, t0 + 16) of T (rows of act_q8 / act_q8s / block_q8_K, x_rb bytes apart; K
// elements) into one token tile at dst (amx_tokens_bytes).
void amx_pack_tokens(GgmlType t, const uint8_t* xq, size_t x_rb, int64_t T, int64_t t0, int64_t K, uint8_t* dst);

// Unpacks 16 weight rows (w, w + w_rb, ...) into one stripe at dst (amx_rows_bytes); t the weights'
// own type (q5_K: into q4_K's layout).
void amx_unpack_rows(GgmlType t, const uint8_t* w, size_t w_rb, int64_t K, uint8_t* dst);

// Gives the calling thread's tile state back (the tiles are configured on a thread's first
// amx_tile): called at the end of each matmul's work on the thread, so that idle workers do not
// carry 8 KiB of live tile registers.
void amx_release_tiles();

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

// The same tiles on CPUs with AVX-512 VNNI and no AMX (gemm_vnni.cpp): the same layouts, the
// products by dpbusd, the same bits.
void vnni_tile(GgmlType t, const uint8_t* rows, const uint8_t* tokens, int64_t K, float* out, size_t out_stride,
               int n_tokens);

// And on CPUs without AVX-512 (gemm_ymm.cpp): AVX2 (maddubs + madd) and AVX-VNNI (the VEX dpbusd)
// tiles, 8 tokens per vector; the same bits.
void avx2_tile(GgmlType t, const uint8_t* rows, const uint8_t* tokens, int64_t K, float* out, size_t out_stride,
               int n_tokens);
void avxvnni_tile(GgmlType t, const uint8_t* rows, const uint8_t* tokens, int64_t K, float* out, size_t out_stride,
                  int n_tokens);
// amx_decode_columns and amx_add_terms in portable code (the same bits), for those tiers.
void tile_decode_columns(GgmlType t, const uint8_t* rows, const int32_t* cols, int n, float* dec);
void tile_add_terms(float* y, int n, const float* value, const float* const* cols);

}  // namespace lamina
