// Issuing an L2Prefetch (l2_prefetch.h) from inside a kernel: each of `workers` threads takes
// every workers-th item of the spans, one bulk prefetch instruction per item. A hint: nothing
// waits for it and nothing reads the lines through it.
#pragma once

#include "kernels/common/l2_prefetch.h"

#include <cstdint>

namespace lamina::kernels {

// This thread's rank among the issuers, interleaved over the blocks (thread t of block b: t *
// blocks + b), so that consecutive items go to different SMs.
__device__ __forceinline__ int64_t l2_worker() { return int64_t(threadIdx.x) * gridDim.x + blockIdx.x; }
__device__ __forceinline__ int64_t l2_workers() { return int64_t(blockDim.x) * gridDim.x; }

__device__ __forceinline__ void l2_prefetch(const L2Prefetch& p, int64_t worker = l2_worker(), int64_t workers = l2_workers()) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  int64_t i = worker;
  for (int s = 0; s < p.count; ++s) {
    const L2Span& sp = p.span[s];
    for (; i < sp.rows; i += workers) {
      const int64_t off = i * sp.stride;
      const int64_t left = sp.extent - off;
      const uint32_t size = left < int64_t(sp.take) ? uint32_t(left) : sp.take;
      const uint8_t* at = static_cast<const uint8_t*>(sp.base) + off;
      if (p.lines) {
        for (uint32_t b = 0; b < size; b += 128) asm volatile("prefetch.global.L2 [%0];" ::"l"(at + b));
      } else {
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(at), "r"(size) : "memory");
      }
    }
    i -= sp.rows;  // this worker's first item in the next span
  }
#endif
}

}  // namespace lamina::kernels
