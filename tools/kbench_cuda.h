// What the CUDA kbench families share: a check of CUDA calls that fails with the family's name,
// and an owning device buffer.
#pragma once

#include "core/error.h"

#include <cuda_runtime.h>

#include <cstddef>

namespace lamina::cli {

inline void kbench_check(cudaError_t e, const char* family, const char* what) {
  if (e != cudaSuccess) fail("kbench {}: {}: {}", family, what, cudaGetErrorString(e));
}

struct KbenchBuf {
  void* p = nullptr;
  KbenchBuf(size_t n, const char* family) { kbench_check(cudaMalloc(&p, n), family, "allocation"); }
  ~KbenchBuf() { cudaFree(p); }
  KbenchBuf(const KbenchBuf&) = delete;
  KbenchBuf& operator=(const KbenchBuf&) = delete;
};

}  // namespace lamina::cli
