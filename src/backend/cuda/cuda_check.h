// The CUDA backend's runtime-call check: a failed call becomes a lamina::Error naming it.
#pragma once

#include "core/error.h"

#include <cuda_runtime.h>

namespace lamina {

inline void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail("CUDA error in {}: {}", what, cudaGetErrorString(e));
}

}  // namespace lamina
