// The RoPE rotation shared by rope() and rope_kv_store(): angles as ggml's CPU rope computes
// them, bit for bit (theta_i = pos * theta_scale^i as a running product in f32, divided by the
// Llama 3 or LongRoPE frequency factor, times freq_scale; cos and sin times attn_factor).
#pragma once

#include "kernels/ops/ops.h"

namespace lamina::kernels::rope_detail {

// cos and sin of pair i's angle at `position`.
__device__ __forceinline__ void angle(int i, int position, float theta_scale, const RopeArgs& a, float& cs, float& sn) {
  float theta = float(position);
  for (int j = 0; j < i; ++j) theta *= theta_scale;
  if (a.freq_factors) theta /= a.freq_factors[i];
  theta *= a.freq_scale;
  sincosf(theta, &sn, &cs);
  cs *= a.attn_factor;
  sn *= a.attn_factor;
}

// Rotates pair i (0 <= i < n_rot / 2) of the head at v in place by the angle (cs, sn). NEOX pairs
// (i, i + n_rot/2), normal pairs (2i, 2i + 1). Returns the element indices it wrote.
__device__ __forceinline__ int2 rotate(float* v, int i, float cs, float sn, const RopeArgs& a) {
  const int half = a.n_rot / 2;
  const int i0 = a.neox ? i : 2 * i, i1 = a.neox ? i + half : 2 * i + 1;
  const float p = v[i0], q = v[i1];
  v[i0] = p * cs - q * sn;
  v[i1] = p * sn + q * cs;
  return make_int2(i0, i1);
}

// rotate() of the pair after a per-head RMSNorm: each element times the head's 1/rms `scale` and
// its weight w[i] first (the values rmsnorm() then rope() give, bit for bit).
__device__ __forceinline__ int2 rotate_normed(float* v, int i, float cs, float sn, const RopeArgs& a, float scale,
                                              const float* w) {
  const int half = a.n_rot / 2;
  const int i0 = a.neox ? i : 2 * i, i1 = a.neox ? i + half : 2 * i + 1;
  const float p = v[i0] * scale * w[i0], q = v[i1] * scale * w[i1];
  v[i0] = p * cs - q * sn;
  v[i1] = p * sn + q * cs;
  return make_int2(i0, i1);
}

__device__ __forceinline__ int2 rotate_pair(float* v, int i, int position, float theta_scale, const RopeArgs& a) {
  float cs, sn;
  angle(i, position, theta_scale, a, cs, sn);
  return rotate(v, i, cs, sn, a);
}

}  // namespace lamina::kernels::rope_detail
