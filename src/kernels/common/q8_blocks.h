// Activations as int8 blocks of 32 for the dp4a GEMVs: the x they multiply. Producers that have
// x in registers (RMSNorm, the attention merge, a GEMV's epilogue) write it once per step; a GEMV
// given none quantises x itself, with the same function, so the values are the same either way.
//
// Each block scales to its second-largest element. Activations have outliers (one element of a
// block many times the others); with a plain amax scale that one element makes the step of the
// other 31 coarse; scaling to the rest cuts the KL divergence to the exact path about 7x
// (docs/benchmarks.md, "Activation blocks"). The largest element is kept as a wide integer Q at
// the same step, and the GEMV adds Q * (its weight's quant) to the block's integer dot product:
// the quant is picked from the registers that already hold the chunk, so the cost is a few
// integer instructions per chunk and no float work.
//
// Layout of one row of k values (k a multiple of 32), x8_bytes(k) bytes:
//   int8  q[k]            q[i] = round(x[i] / d_b), b = i / 32; 0 at the block's largest element
//   X8Facts f[k / 32]     16 bytes per block, one vector load:
//     f32   d             the step: max(a2, a1 / 2^14) / 127, a1 the largest |x| of the block
//                         (the first of equals), a2 the largest of the other 31 (the floor keeps
//                         Q * 127 and the sums within int32); 0 for an all-zero block
//     int32 m             the largest element's index in the block, 0..31
//     int32 big           Q = round(x[32 b + m] / d)
//     int32 sum           sum of the q and Q: the block's sum of x in steps of d
// Rows are multiples of 16 bytes, so every row's q and facts stay aligned for vector loads.
#pragma once

#include "kernels/common/status.h"

#include <cstddef>
#include <cstdint>

typedef struct CUstream_st* cudaStream_t;

namespace lamina::kernels {

struct X8Facts {
  float d;
  int32_t m, big, sum;
};
static_assert(sizeof(X8Facts) == 16);

// Bytes of one row of k values (constexpr: host and device code use it).
constexpr size_t x8_bytes(int64_t k) { return size_t(k) + size_t(k / 32) * sizeof(X8Facts); }
// The floor of a block's step relative to its largest element (see the layout above).
constexpr float kX8StepFloor = 1.f / 16384.f;

// out [rows][x8_bytes(cols)] = x [rows][cols] as int8 blocks, cols a multiple of 32: for an x
// whose producer made none (q8_blocks.cu).
Status quantize_x8(const float* x, int64_t rows, int64_t cols, void* out, cudaStream_t s);

}  // namespace lamina::kernels
