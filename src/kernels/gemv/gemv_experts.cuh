// What the two expert GEMVs share (gemv_experts.cu: a launch over (token, pick) pairs;
// gemv_experts_grouped.cu: a launch over experts, each with the pairs routed to it): the kernel
// arguments, the block shape and the dispatch over q_dp4a's weight types.
#pragma once

#include "kernels/gemv/gemv.h"
#include "kernels/gemv/gemv_dp4a.cuh"

#include <cstdint>

namespace lamina::kernels::gemv_detail {

// 8 warps a block. Each warp: 2 rows, two 16-byte steps in flight a lane (Dp4aStep's shape), or
// for short rows (one matrix of at most 32 chunks a row: a Qwen3-30B-A3B down matrix, k = 768,
// has 24) 4 rows and one step: the second step of 2 x 2 found no chunk there, and a lane had 2
// loads in flight instead of 4. A lane meets the same chunks in the same order either way
// (l = lane, lane + 32, ...), so the shape does not change a bit of the result.
inline constexpr int kExpWarps = 8;
inline constexpr int kExpRows = 2, kExpUnroll = 2;            // the gate/up pair and long rows
inline constexpr int kExpShortRows = 4, kExpShortUnroll = 1;  // one matrix of short rows
// The one-a-pair launch takes the short shape from this many pairs: a decode step's 8 pairs ran
// slower at 4 rows a warp (half the blocks a pair; Qwen3-30B-A3B tg128 446 -> 431 tokens/s), the
// grouped launch's pairs and many-token steps faster (docs/benchmarks.md, sixty-first session).
inline constexpr int kExpShortMinPairs = 64;

// Whether one matrix of type (kBits) with rows of k runs the short shape: at most 32 chunks a row
// (Dp4aStep's kPer: 16 weights a chunk for 8-bit, 32 otherwise).
inline bool experts_short_rows(int bits, int64_t k) { return k / (bits == 8 ? 16 : 32) <= 32; }

struct ExpertArgs {
  const uint8_t* const* w;     // [n_expert]: expert e's matrix, n x k repacked
  const uint8_t* const* w_up;  // [n_expert] or null (the gate/up pair)
  const int32_t* ids;          // pair g = t * picks + j: ids[t * ids_stride + j]
  int picks;
  int64_t ids_stride;
  const float* x;              // pair g's x at x + (g / x_share) * x_stride
  int x_share;
  int64_t x_stride;
  float* y;                    // [groups][n]
  int64_t n, k;
  bool gelu;
};

inline ExpertArgs expert_args(const GemvExperts& p) {
  return {reinterpret_cast<const uint8_t* const*>(p.w), reinterpret_cast<const uint8_t* const*>(p.w_up),
          p.ids, p.picks, p.ids_stride, p.x, p.x_share, p.x_stride, p.y, p.n, p.k, p.gelu};
}

// The checks both launches make: the type and k, pointers, counts and strides, x's alignment.
inline Status validate_experts(const GemvExperts& p, const char* name) {
  if (!gemv_experts_supports(p.wtype, p.k)) return Status::error(std::string(name) + ": weight type or k not supported");
  if (!p.w || !p.ids || !p.x || !p.y || p.n <= 0 || p.groups < 1 || p.groups > 65535 || p.picks < 1 || p.ids_stride < p.picks ||
      p.x_share < 1 || p.x_stride < 0 || p.x_stride % 4)
    return Status::error(std::string(name) + ": bad arguments");
  if (reinterpret_cast<uintptr_t>(p.x) % 16) return Status::error(std::string(name) + ": x must be 16-byte aligned");
  if (!dp4a_chunks_fit(p.n, p.k)) return Status::error(std::string(name) + ": a matrix of 2^32 chunks or more");
  return Status::success();
}

// f.template operator()<kBits, kScales>() for q_dp4a's twelve types (gemv_dp4a.cuh's Dp4aScales).
template <class F>
Status by_dp4a_type(GgmlType t, F&& f) {
  switch (t) {
    case GgmlType::Q4_0: return f.template operator()<4, kScaleD>();
    case GgmlType::Q4_1: return f.template operator()<4, kScaleDM>();
    case GgmlType::Q5_0: return f.template operator()<5, kScaleD>();
    case GgmlType::Q5_1: return f.template operator()<5, kScaleDM>();
    case GgmlType::IQ4_NL: return f.template operator()<4, kScaleNL>();
    case GgmlType::Q8_0: return f.template operator()<8, kScaleD>();
    case GgmlType::Q4_K: return f.template operator()<4, kScaleK>();
    case GgmlType::Q5_K: return f.template operator()<5, kScaleK>();
    case GgmlType::Q6_K: return f.template operator()<6, kScaleQ6>();
    case GgmlType::IQ4_XS: return f.template operator()<4, kScaleXS>();
    case GgmlType::Q2_K: return f.template operator()<2, kScaleQ2>();
    case GgmlType::Q3_K: return f.template operator()<3, kScaleQ6>();
    default: return Status::error("expert GEMV: weight type not supported");
  }
}

}  // namespace lamina::kernels::gemv_detail
