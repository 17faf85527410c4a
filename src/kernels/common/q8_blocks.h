// Activations as int8 blocks of 32 with an f32 scale and the block's integer sum (llama.cpp's
// q8_1 idea): the x that the dp4a GEMVs multiply. Producers that have x in registers (RMSNorm,
// the attention merge) write it once per step; a GEMV given none quantises x itself, with the
// same function, so the values are the same either way.
//
// Layout of one row of k values (k a multiple of 32), x8_bytes(k) bytes:
//   int8  q[k]        q[i] = round(x[i] / d_b), b = i / 32
//   f32   d[k / 32]   d_b = amax_b / 127 (0 for an all-zero block)
//   int32 sum[k / 32] sum of the block's q
// padded to 16 bytes so that every row's q stays 16-byte aligned for vector loads.
#pragma once

#include "kernels/common/status.h"

#include <cstddef>
#include <cstdint>

typedef struct CUstream_st* cudaStream_t;

namespace lamina::kernels {

// Bytes of one row of k values (constexpr: host and device code use it).
constexpr size_t x8_bytes(int64_t k) { return (size_t(k) + size_t(k / 32) * 8 + 15) & ~size_t(15); }

// out [rows][x8_bytes(cols)] = x [rows][cols] as int8 blocks, cols a multiple of 32: for an x
// whose producer made none (q8_blocks.cu).
Status quantize_x8(const float* x, int64_t rows, int64_t cols, void* out, cudaStream_t s);

}  // namespace lamina::kernels
