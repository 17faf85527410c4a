// Row dot products for the CPU matmul: one weight row (GGUF block layout) against one
// activation row already converted to the kernel's activation format. Float weights take f32
// activations; quantised weights take 8-bit activation blocks, as llama.cpp does, but in
// formats of our own (activations never reach a file):
//   ActType::Q8   {f32 d; int8 q[32]}            for Q4_0, Q5_0, Q8_0 weights
//   ActType::Q8S  {f32 d; f32 s = d*sum(q); q[32]} for Q4_1, Q5_1 weights (offset term exact)
//   ActType::Q8K  ggml's block_q8_K (f32 d, exact int16 group sums) for the K types
// llama.cpp's Q8_0/Q8_1 keep d and s in f16; on models with outlier activations (SmolLM2) that
// rounding doubles the distance to an exact reference. Kernels: scalar (any CPU), AVX2+FMA+F16C,
// AVX-VNNI and AVX-512, chosen at run time.
#pragma once

#include <optional>
#include <string_view>

#include "format/ggml_type.h"
#include "format/quant.h"

#include <cstddef>
#include <cstdint>

namespace lamina {

enum class ActType { F32, Q8, Q8S, Q8K };

struct act_q8 {
  float d;
  int8_t qs[32];
};
struct act_q8s {
  float d, s;
  int8_t qs[32];
};
static_assert(sizeof(act_q8) == 36 && sizeof(act_q8s) == 40);

size_t act_row_bytes(ActType t, int64_t n);
// Converts n activations (n a multiple of the format's block) to `t`, and back (tests).
void quantize_activations(ActType t, const float* x, void* dst, int64_t n);
void quantize_activations_portable(ActType t, const float* x, void* dst, int64_t n);  // no SIMD (tests)
void dequantize_activations(ActType t, const void* src, float* dst, int64_t n);

using VecDotFn = float (*)(int64_t n, const void* w, const void* x);

// The int8 types (q4_0, q4_1, q8_0) compute every (weight row, token) output in one order, on
// every instruction set and in every kernel shape (one row, four tokens, four weight rows, AMX
// tiles): for each 32-element block b in turn, its exact integer sum isum_b, then
//   q4_0, q8_0: acc = fma(float(isum_b), dw_b * dx_b, acc)
//   q4_1:       acc = acc + fma(dw_b * dx_b, float(isum_b), mw_b * sx_b)
// from acc = 0 (d: the blocks' scales, mw: the weight block's min, sx: the activation block's
// d * sum(q)). So a token's outputs are the same bits whichever tokens share its matmul.

// One weight row against four activation rows (x + j * x_stride, j < 4): out[j] is bit for bit
// fn(n, w, x + j * x_stride). Where corr_bias != 0 the kernel takes each weight byte as unsigned
// (q + corr_bias) and corr holds each row's block corrections (act_corrections), rows
// corr_stride int32 apart; otherwise corr is not read.
using VecDot4CFn = void (*)(int64_t n, const void* w, const void* x, size_t x_stride, const int32_t* corr,
                            size_t corr_stride, float* out);

// Four weight rows (w + j * w_stride) against one activation row (corr: that row's
// act_corrections, as above): the decode path. out[j] is bit for bit fn(n, w + j * w_stride, x).
using VecDotRows4CFn = void (*)(int64_t n, const void* w, size_t w_stride, const void* x, const int32_t* corr,
                                float* out);

// Four weight rows (w + i * w_stride) against `tokens` <= kTileTokens activation rows (x + j *
// x_stride): out[j * out_stride + i] is bit for bit fn(n, w + i * w_stride, x + j * x_stride).
// Float weights (f16, bf16) on AVX-512, prompts and decode alike; their activations are f32, so
// there are no outlier terms.
constexpr int kTileRows = 4, kTileTokens = 6;
using VecDotTileFn = void (*)(int64_t n, const void* w, size_t w_stride, const void* x, size_t x_stride, int tokens,
                              float* out, size_t out_stride);

struct VecDot {
  ActType act;  // what quantize_activations must produce
  VecDotFn fn;  // nullptr: no direct kernel (the caller dequantises the row to f32)
  VecDot4CFn fn4c = nullptr;        // four activation rows at once, where the ISA has such a kernel
  int corr_bias = 0;                // the weight offset fn4c and rows4c take (0: no corrections)
  VecDotRows4CFn rows4c = nullptr;  // four weight rows against one token
  VecDotRows4CFn rows8c = nullptr;  // eight (out[0..8)), where the type has such a kernel
  VecDotTileFn tile = nullptr;      // kTileRows weight rows x up to kTileTokens tokens
};

// corr[b] = -bias * (x[32 b] + ... + x[32 b + 31]) for an ActType::Q8 row of n (n / 32 entries).
void act_corrections(const void* xq, int64_t n, int bias, int32_t* corr);

// Instruction-set tiers, each a superset of the one before in what it computes: the portable
// kernels; AVX2 + FMA + F16C; AVX-VNNI (the int8 formats' products in the VEX dpbusd, the rest as
// AVX2); AVX-512 F/BW/VL/VNNI (the same products in the EVEX dpbusd, f16 and bf16 in zmm register
// tiles); AMX (AVX-512's kernels, and the int8 formats' prompt matmuls in AMX-INT8 tiles:
// gemm_amx.h; every tier from AVX2 runs those prompt tiles with its own products). A CPU may run a tier without the one below it (AVX-512 VNNI without VEX AVX-VNNI:
// AMD Zen 4, Intel Ice Lake), so ask cpu_runs, not a comparison with detect_isa.
enum class CpuIsa { Scalar, Avx2, AvxVnni, Avx512, Amx };
bool cpu_runs(CpuIsa isa);  // this CPU (and OS) has what the tier's kernels use
CpuIsa detect_isa();        // the best tier this CPU runs
CpuIsa runnable_isa(CpuIsa want);  // want, or the best tier below it that this CPU runs
const char* isa_name(CpuIsa isa);  // "scalar", "avx2", "avx-vnni", "avx512", "amx"
// "auto" (detect_isa) or a tier's name (a lower one than the CPU's: every path can be tested on
// one machine); nullopt if unknown.
std::optional<CpuIsa> parse_isa(std::string_view name);

// The kernel for a weight type on the given ISA.
VecDot vec_dot_for(GgmlType weight_type, CpuIsa isa);

// AVX2 kernels (vec_dot_avx2.cpp); nullptr where none exists.
VecDotFn avx2_kernel(GgmlType weight_type);
VecDot4CFn avx2_kernel4c(GgmlType weight_type, int* bias);
VecDotRows4CFn avx2_rows4c(GgmlType weight_type);
VecDotRows4CFn avx2_rows8c(GgmlType weight_type);
// The AVX2 k-quant and iq4_xs kernels (vec_dot_avx2_kquants.cpp; x86 only), which the four
// above return where the type has them (the four-token kernel takes no corrections); nullptr else.
VecDotFn avx2_kquant_kernel(GgmlType weight_type);
VecDot4CFn avx2_kquant_kernel4c(GgmlType weight_type);
VecDotRows4CFn avx2_kquant_rows4c(GgmlType weight_type);
VecDotRows4CFn avx2_kquant_rows8c(GgmlType weight_type);
// dequantize_element for q4_0, q4_1, q8_0, q4_K and q6_K with F16C (the same floats); nullptr for other types.
ElementFn avx2_element(GgmlType weight_type);
// v[j] += value[k] * element(row j, cols[k]) for eight rows (w + j * w_stride) and k = 0 .. n - 1
// in turn, each product rounded, then added (q4_0, q4_1, q8_0; nullptr for other types).
using Outliers8Fn = void (*)(const uint8_t* w, size_t w_stride, int n, const int32_t* cols, const float* value, float* v);
Outliers8Fn avx2_outliers8(GgmlType weight_type);
// ActType::Q8, Q8S or Q8K activations in AVX2, bit for bit what quantize_activations' portable
// code gives (which calls it where the CPU has AVX2).
void avx2_quantize_q8(ActType t, const float* x, void* dst, int64_t n);
// The activation-outlier scan's two passes in AVX2 (cpu_matmul.cpp): the sum of squares in
// double as four running sums (elements i = j mod 4), paired at the end; the first index >= i
// whose |x| exceeds limit (n if none).
double avx2_sum_squares4(const float* x, int64_t n);
int64_t avx2_next_above(const float* x, int64_t i, int64_t n, float limit);
// AVX-VNNI kernels (vec_dot_vnni.cpp); nullptr where none exists (the AVX2 one serves).
VecDotFn vnni_kernel(GgmlType weight_type);
VecDotRows4CFn vnni_rows4c(GgmlType weight_type);
VecDotRows4CFn vnni_rows8c(GgmlType weight_type);
VecDot4CFn vnni_kernel4c(GgmlType weight_type, int* bias);
// AVX-512 kernels (vec_dot_avx512.cpp); nullptr where none exists.
VecDotFn avx512_kernel(GgmlType weight_type);
VecDot4CFn avx512_kernel4c(GgmlType weight_type, int* bias);
VecDotRows4CFn avx512_rows4c(GgmlType weight_type);
VecDotRows4CFn avx512_rows8c(GgmlType weight_type);
VecDotTileFn avx512_tile(GgmlType weight_type);

}  // namespace lamina
