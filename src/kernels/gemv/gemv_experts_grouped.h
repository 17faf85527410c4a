// The experts' GEMVs grouped by expert (gemv_experts_grouped.cu): gemv_experts' problem (gemv.h),
// the same y, but each expert's matrices are read once for all the pairs routed to it.
#pragma once

#include "kernels/gemv/gemv.h"

#include <cmath>
#include <cstdint>

namespace lamina::kernels {

// Pairs (tokens x picks) one launch takes: each block keeps its expert's list of pairs in shared
// memory (4 bytes a pair).
inline constexpr int kGemvExpertsGroupedMaxPairs = 4096;

// The distinct experts `pairs` picks are expected to reach, were they routed evenly:
// n_expert (1 - (1 - 1/n_expert)^pairs). (The grouped launch sizes its grid by it; the backend
// counts the bytes the launch reads by it.)
inline double experts_expected(int64_t pairs, int64_t n_expert) {
  return double(n_expert) * (1.0 - std::pow(1.0 - 1.0 / double(n_expert), double(pairs)));
}

// y[g] = W_e x_g, e = ids[g / picks * ids_stride + g % picks], for every pair g < p.groups, as
// gemv_experts computes it, bit for bit (the same steps, sums and epilogue for each pair). The ids
// must be < n_expert (<= 65535), as moe_route makes them: a pair with another id is left unwritten. A block row
// per expert scans the ids for its pairs, then multiplies them in chunks of a few, so an expert
// picked by many tokens is read from memory once (then from L2).
Status gemv_experts_grouped(const GemvExperts& p, int n_expert, cudaStream_t s);

}  // namespace lamina::kernels
