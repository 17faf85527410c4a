// A mixture of experts' router over many rows (kernels/ops/moe.cu): out [rows][n] = x [rows][k]
// W [n][k]^T, f32, n <= kMoeRouteMaxExperts (ops.h), k a multiple of 4, x and W 16-byte aligned.
// K is split `splits` ways (router_matmul_splits: enough blocks for 4x the SMs) into parts
// [splits][rows][n] (scratch, unused with 1), summed in split order: the same bits at every run.
#pragma once

#include "kernels/common/status.h"

#include <cuda_runtime.h>

#include <cstdint>

namespace lamina::kernels {

int router_matmul_splits(int64_t rows, int n, int64_t k, int sms);
Status router_matmul(const float* x, int64_t rows, int64_t k, const float* w, int n, float* out, float* parts, int splits,
                     cudaStream_t s);

}  // namespace lamina::kernels
