// Row dot products for the CPU matmul: one weight row (GGUF block layout) against one
// activation row already converted to the weight's activation type — f32 for float weights,
// 8-bit blocks for quantised ones (Q8_0 for Q4_0/Q5_0/Q8_0, Q8_1 for Q4_1/Q5_1, Q8_K for the
// K types), as llama.cpp does. Implementations: scalar (any CPU) and AVX2+FMA+F16C, chosen
// at run time.
#pragma once

#include "format/ggml_type.h"

#include <cstdint>

namespace lamina {

using VecDotFn = float (*)(int64_t n, const void* w, const void* x);

struct VecDot {
  GgmlType act_type;  // what quantize_activations must produce
  VecDotFn fn;        // nullptr: no direct kernel (the caller dequantises the row to f32)
};

enum class CpuIsa { Scalar, Avx2 };
CpuIsa detect_isa();
const char* isa_name(CpuIsa isa);

// The kernel for a weight type on the given ISA (default: the best this CPU runs).
VecDot vec_dot_for(GgmlType weight_type, CpuIsa isa);
VecDot vec_dot_for(GgmlType weight_type);

// Converts n activations to `act_type` (F32: copy; Q8_0, Q8_1, Q8_K: 8-bit blocks).
void quantize_activations(GgmlType act_type, const float* x, void* dst, int64_t n);

// AVX2 kernels (vec_dot_avx2.cpp); nullptr where none exists.
VecDotFn avx2_kernel(GgmlType weight_type);

}  // namespace lamina
