// Device dequantisation of ggml rows to f32: the embedding lookup and the load stage of the
// quantised-weight GEMM build on it.
#pragma once

#include "format/ggml_type.h"
#include "kernels/common/status.h"

#include <cstdint>

typedef struct CUstream_st* cudaStream_t;

namespace lamina::kernels {

// dst[r][i] = element i of row rows[r] of src (rows of n_cols elements in `type`'s layout).
//   src:  [n_src_rows][row_bytes(type, n_cols)]   device
//   rows: [n_rows] int32 row indices, or nullptr for rows 0..n_rows-1   device
//   dst:  [n_rows][n_cols] f32   device
Status dequantize_rows(GgmlType type, const void* src, int64_t n_cols, const int32_t* rows,
                       int64_t n_rows, float* dst, cudaStream_t stream);

}  // namespace lamina::kernels
