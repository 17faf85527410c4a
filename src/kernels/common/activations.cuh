// The gated units' activations, one definition for every kernel that applies them (the GEMVs'
// and the gated GEMM's epilogues): the same numbers whichever kernel a batch size takes.
#pragma once

namespace lamina::kernels {

// SiLU: g / (1 + e^-g), with the accurate expf (the element-wise swiglu kernel's numbers).
__device__ __forceinline__ float silu(float g) { return g / (1.f + expf(-g)); }

// GELU in its tanh form (ggml's): 0.5 g (1 + tanh(sqrt(2/pi) g (1 + 0.044715 g^2))).
__device__ __forceinline__ float gelu_tanh(float g) {
  return 0.5f * g * (1.f + tanhf(0.79788456080286535588f * g * (1.f + 0.044715f * g * g)));
}

// A gated unit: act(g) * u, act SiLU or (gelu) GELU.
__device__ __forceinline__ float glu(float g, float u, bool gelu) { return (gelu ? gelu_tanh(g) : silu(g)) * u; }

}  // namespace lamina::kernels
