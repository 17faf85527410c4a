// A decode row's stacked Q/K/V GEMV and its attention in one kernel (qkv_attention.cu).
#pragma once

#include "kernels/common/status.h"
#include "kernels/gemv/gemv.h"
#include "kernels/ops/ops.h"

typedef struct CUstream_st* cudaStream_t;

namespace lamina::kernels {

// The attention half: attention_decode_rope's arguments, plus counters.
struct QkvAttnArgs {
  RopeArgs r;
  AttentionArgs a;
  const int32_t* pos = nullptr;  // device [1]: the row's position
  void* k_cache = nullptr;       // [n_ctx][n_head * head_dim] f16
  void* v_cache = nullptr;
  float* out = nullptr;          // [n_head * head_dim]: the attention output
  void* out8 = nullptr;          // optional: its int8 blocks (x8_bytes(n_head * head_dim))
  unsigned* counters = nullptr;  // device [n_head], zero between launches (each launch leaves them zero)
};

// p: one row (batch 1) times the stacked [q | k | v] weights (n = 3 * n_head * head_dim rows, in
// the dp4a layout of a Q4_0 or Q8_0 matrix), x as q_dp4a takes it (x, x8, norm_w, x8_ss), no
// epilogue; p.y = q, with k and v right after it. Then, as attention_decode_rope(q, k, v, ...):
// q and k rotated in place, the cache row written, out (and out8) the attention output.
// Supported: head_dim 128, no GQA, n_head <= 64, an F16 cache (attention_decode_rope's other
// conditions).
bool qkv_attention_supported(const GemvProblem& p, const AttentionArgs& a, const RopeArgs& r);
Status qkv_attention(const GemvProblem& p, const QkvAttnArgs& t, cudaStream_t s);

}  // namespace lamina::kernels
