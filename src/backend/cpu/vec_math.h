// Elementwise math of the CPU backend with the same bits on every instruction-set tier: exp is a
// polynomial in double written once in basic IEEE operations (vec_math.cpp), which the portable,
// AVX2 and AVX-512 code evaluate in the same order, rounded once to float: correctly rounded but
// for inputs within ~1e-5 ulp of a midpoint, so it agrees with libm's expf on practically every
// input. libm's expf per element cost ~8 % of a prompt pass (SwiGLU and attention's softmax,
// docs/benchmarks.md).
#pragma once

#include "backend/cpu/vec_dot.h"

#include <cstdint>

namespace lamina {

// exp(x) rounded to float (inf and 0 where it leaves float's range, subnormals included).
float exp_poly(float x);
// g[i] = g[i] / (1 + exp(-g[i])) * u[i] (SiLU of the gate times up), i < n.
void silu_mul(float* g, const float* u, int64_t n, CpuIsa isa);
// s[i] = exp(s[i] - m), i < n (softmax after its max).
void exp_shifted(float* s, int64_t n, float m, CpuIsa isa);
// y[i] = f32_to_f16(x[i]) (core/half.h: to nearest even, NaN quieted), i < n; F16C where the
// tier has it (the KV cache's stores).
void f32_to_f16_row(const float* x, uint16_t* y, int64_t n, CpuIsa isa);

}  // namespace lamina
