// Internal to the GEMV family: variant registration and launch-status helpers.
#pragma once

#include "kernels/gemv/gemv.h"

#include <cuda_runtime.h>

#include <string>

namespace lamina::kernels {

inline Status launch_status(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return Status::error(std::string(what) + ": launch failed: " + cudaGetErrorString(e));
  return Status::success();
}

void register_float_variants(std::vector<GemvVariant>& out);   // gemv_float.cu
void register_quant_variants(std::vector<GemvVariant>& out);   // gemv_quant.cu
void register_dp4a_variants(std::vector<GemvVariant>& out);    // gemv_dp4a.cu
void register_mma_variants(std::vector<GemvVariant>& out);     // gemv_mma.cu
void register_q4k_variants(std::vector<GemvVariant>& out);     // gemv_q4k.cu

}  // namespace lamina::kernels
