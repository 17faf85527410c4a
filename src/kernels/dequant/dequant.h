// Device dequantisation of ggml rows to f32: the embedding lookup and the load stage of the
// quantised-weight GEMM build on it.
#pragma once

#include "format/ggml_type.h"
#include "kernels/common/status.h"

#include <cstdint>

typedef struct CUstream_st* cudaStream_t;

namespace lamina::kernels {

// Optional int8 copy of dequantize_rows' output for a dp4a GEMV that applies an RMSNorm
// (GemvProblem::x8 / x8_ss; layout in kernels/common/q8_blocks.h). All device, or all null.
struct RowsX8 {
  uint8_t* q = nullptr;        // [n_rows][x8_bytes(n_cols)]: the int8 blocks of dst[r] * gain
  const float* gain = nullptr;  // [n_cols]: the norm's weight
  double* ss = nullptr;         // [n_rows][n_cols / 32]: each 32-block's sum of squares of dst[r]
};

// The decode step's inputs, read by the lookup itself rather than by an upload kernel before it
// (ops' upload_inputs, whose staging this is): one row, its token at src[0] (-1: the id at
// *sampled), its position at src[half], the staging's stamp at src[2 * half]. The kernel (one
// block) copies token and position to dst[0] and dst[half] for the pass's later kernels and,
// once it has read the staging, writes the stamp to *seen. src and seen: mapped host memory.
// table_rows: the rows of the table, so that *sampled may be decoded before the staging is read
// (when it names a row of the table).
struct StagedInputs {
  const int32_t* src = nullptr;
  int32_t* dst = nullptr;
  int64_t half = 0;
  const int32_t* sampled = nullptr;
  int32_t* seen = nullptr;
  int64_t table_rows = 0;
};

// dst[r][i] = element i of row rows[r] of src (rows of n_cols elements in `type`'s layout).
//   src:  [n_src_rows][row_bytes(type, n_cols)]   device
//   rows: [n_rows] int32 row indices, or nullptr for rows 0..n_rows-1   device
//   dst:  [n_rows][n_cols] f32   device
//   x8:   also the int8 blocks of dst * gain and their sums of squares (n_cols % 32 == 0)
//   in:   with in.src, the one row's index from the staged inputs (rows null, n_rows 1)
Status dequantize_rows(GgmlType type, const void* src, int64_t n_cols, const int32_t* rows,
                       int64_t n_rows, float* dst, cudaStream_t stream, const RowsX8& x8 = {},
                       const StagedInputs& in = {});

}  // namespace lamina::kernels
