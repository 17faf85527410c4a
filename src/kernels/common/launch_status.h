// The Status of the kernel launches just made on this thread (cudaGetLastError), named `what`.
// Shared by every kernel family's launchers.
#pragma once

#include "kernels/common/status.h"

#include <cuda_runtime.h>

#include <string>

namespace lamina::kernels {

inline Status launch_status(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return Status::error(std::string(what) + ": launch failed: " + cudaGetErrorString(e));
  return Status::success();
}

}  // namespace lamina::kernels
