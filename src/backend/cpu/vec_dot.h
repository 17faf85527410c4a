// Row dot products for the CPU matmul: one weight row (GGUF block layout) against one
// activation row already converted to the kernel's activation format. Float weights take f32
// activations; quantised weights take 8-bit activation blocks, as llama.cpp does, but in
// formats of our own (activations never reach a file):
//   ActType::Q8   {f32 d; int8 q[32]}            for Q4_0, Q5_0, Q8_0 weights
//   ActType::Q8S  {f32 d; f32 s = d*sum(q); q[32]} for Q4_1, Q5_1 weights (offset term exact)
//   ActType::Q8K  ggml's block_q8_K (f32 d, exact int16 group sums) for the K types
// llama.cpp's Q8_0/Q8_1 keep d and s in f16; on models with outlier activations (SmolLM2) that
// rounding doubles the distance to an exact reference. Kernels: scalar (any CPU), AVX2+FMA+F16C
// and AVX-VNNI, chosen at run time.
#pragma once

#include <optional>
#include <string_view>

#include "format/ggml_type.h"

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
void dequantize_activations(ActType t, const void* src, float* dst, int64_t n);

using VecDotFn = float (*)(int64_t n, const void* w, const void* x);
// out[j] = fn(n, w, x + j * x_stride) for j < 4, bit for bit: one weight row against four
// activation rows (the prompt path), each weight block unpacked once for the four.
using VecDot4Fn = void (*)(int64_t n, const void* w, const void* x, size_t x_stride, float* out);

// The same for signed-weight types with the weights' sign handled by an offset: each weight byte
// is taken as unsigned (q + bias), and corr (int32, 8 per 32-element block per row: -bias times
// the sum of each 4 activations; act_corrections) takes the offset back out. corr rows are
// corr_stride int32 apart. Bit for bit what fn gives (the integer sums are the same).
using VecDot4CFn = void (*)(int64_t n, const void* w, const void* x, size_t x_stride, const int32_t* corr,
                            size_t corr_stride, float* out);

// Four weight rows (w + j * w_stride) against one activation row with offset weights (corr: that
// row's act_corrections with corr_bias): the decode path. out[j] is bit for bit
// fn(n, w + j * w_stride, x).
using VecDotRows4CFn = void (*)(int64_t n, const void* w, size_t w_stride, const void* x, const int32_t* corr,
                                float* out);

struct VecDot {
  ActType act;  // what quantize_activations must produce
  VecDotFn fn;  // nullptr: no direct kernel (the caller dequantises the row to f32)
  VecDot4Fn fn4 = nullptr;  // four rows at once, where the ISA has such a kernel
  VecDot4CFn fn4c = nullptr;  // four rows with offset weights, where it pays (preferred to fn4)
  int corr_bias = 0;          // the weight offset fn4c takes (act_corrections' bias)
  VecDotRows4CFn rows4c = nullptr;  // four weight rows against one token, offset weights (corr_bias)
};

// corr[b * 8 + g] = -bias * (x[32 b + 4 g] + ... + x[32 b + 4 g + 3]) for an ActType::Q8 row of n.
void act_corrections(const void* xq, int64_t n, int bias, int32_t* corr);

// Instruction-set tiers, each a superset of the one before: the portable kernels; AVX2 + FMA +
// F16C; AVX-VNNI (the int8 formats' products in dpbusd, the rest as AVX2).
enum class CpuIsa { Scalar, Avx2, AvxVnni };
CpuIsa detect_isa();  // the best this CPU runs
const char* isa_name(CpuIsa isa);  // "scalar", "avx2", "avx-vnni"
// "auto" (detect_isa) or a tier's name (a lower one than the CPU's: every path can be tested on
// one machine); nullopt if unknown.
std::optional<CpuIsa> parse_isa(std::string_view name);

// The kernel for a weight type on the given ISA.
VecDot vec_dot_for(GgmlType weight_type, CpuIsa isa);

// AVX2 kernels (vec_dot_avx2.cpp); nullptr where none exists.
VecDotFn avx2_kernel(GgmlType weight_type);
VecDot4Fn avx2_kernel4(GgmlType weight_type);
// AVX-VNNI kernels (vec_dot_vnni.cpp); nullptr where none exists (the AVX2 one serves).
VecDotFn vnni_kernel(GgmlType weight_type);
VecDot4Fn vnni_kernel4(GgmlType weight_type);
VecDotRows4CFn vnni_rows4c(GgmlType weight_type);
VecDot4CFn vnni_kernel4c(GgmlType weight_type, int* bias);

// y[0..n) += a * x[0..n) with x in f16 or f32 (attention's V accumulation).
using AxpyFn = void (*)(int64_t n, float a, const void* x, float* y);
AxpyFn axpy_for(GgmlType x_type, CpuIsa isa);  // F16 or F32
AxpyFn avx2_axpy(GgmlType x_type);

}  // namespace lamina
