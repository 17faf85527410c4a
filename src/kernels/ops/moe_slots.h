// A mixture of experts' rows in moe_sort's slot order (ops.h) added back by pair (kernels/ops/moe.cu):
// the grouped GEMMs' output stays in slot order and add_routed reads it through the pairs' slots.
#pragma once

#include "kernels/common/status.h"

#include <cuda_runtime.h>

#include <cstdint>

namespace lamina::kernels {

// pair_slot [pairs]: pair_slot[slot_pair[s]] = s (moe_sort's slot_pair inverted).
Status moe_pair_slots(const int32_t* slot_pair, int64_t pairs, int32_t* pair_slot, cudaStream_t s);
// add_routed (ops.h) with d's rows in slot order: y[t][c] += w_tj d[pair_slot[t k + j]][c], j =
// 0..k-1 in that order, one fmaf each (add_routed's bits when d's rows are the same values).
Status add_routed_slots(float* y, const float* d, int64_t rows, int64_t cols, const float* route, int k, const int32_t* pair_slot,
                        cudaStream_t s);

}  // namespace lamina::kernels
