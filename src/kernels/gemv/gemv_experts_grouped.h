// The experts' GEMVs grouped by expert (gemv_experts_grouped.cu): gemv_experts' problem (gemv.h),
// the same y, but each expert's matrices are read once for all the pairs routed to it.
#pragma once

#include "kernels/gemv/gemv.h"

namespace lamina::kernels {

// Pairs (tokens x picks) one launch takes: each block keeps its expert's list of pairs in shared
// memory (4 bytes a pair).
inline constexpr int kGemvExpertsGroupedMaxPairs = 4096;

// y[g] = W_{ids[g]} x_g for every pair g < p.groups, as gemv_experts computes it, bit for bit
// (the same steps, sums and epilogue for each pair); ids each < n_expert (<= 65535). A block row
// per expert scans the ids for its pairs, then multiplies them in chunks of a few, so an expert
// picked by many tokens is read from memory once (then from L2).
Status gemv_experts_grouped(const GemvExperts& p, int n_expert, cudaStream_t s);

}  // namespace lamina::kernels
