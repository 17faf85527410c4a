// quantize_x8: rows of f32 as int8 blocks (layout in q8_blocks.h), one warp per block of 32.
#include "kernels/common/launch_status.h"
#include "kernels/common/pdl.cuh"
#include "kernels/common/q8_blocks.cuh"

#include <cuda_runtime.h>

#include <algorithm>

namespace lamina::kernels {
namespace {

constexpr int kWarps = 8;  // warps per block; each warp takes one block of 32 values at a time

// x: [rows][cols];  out: [rows][x8_bytes(cols)]
__global__ void __launch_bounds__(kWarps * 32) quantize_x8_kernel(const float* __restrict__ x, int64_t rows, int64_t cols,
                                                                  uint8_t* __restrict__ out) {
  pdl_enter();
  const int64_t blocks = rows * (cols / 32);
  for (int64_t i = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32; i < blocks; i += int64_t(gridDim.x) * kWarps) {
    const int64_t row = i / (cols / 32), blk = i % (cols / 32);
    quantize_block32(x[row * cols + blk * 32 + threadIdx.x % 32], cols, blk, out + size_t(row) * x8_bytes(cols));
  }
}

}  // namespace

Status quantize_x8(const float* x, int64_t rows, int64_t cols, void* out, cudaStream_t s) {
  if (!x || !out || rows <= 0 || cols <= 0 || cols % 32) return Status::error("quantize_x8: bad arguments");
  const int64_t blocks = rows * (cols / 32);
  const unsigned grid = unsigned(std::min<int64_t>((blocks + kWarps - 1) / kWarps, 4096));
  launch_pdl(quantize_x8_kernel, grid, kWarps * 32, 0, s, x, rows, cols, static_cast<uint8_t*>(out));
  return launch_status("quantize_x8");
}

}  // namespace lamina::kernels
