// Backend selection: "cpu", "cuda", or "auto" (cuda when this build has CUDA and a GPU is
// present). The library reads no environment: the CLI maps LAMINA_DEVICE onto `device`.
#pragma once

#include "backend/backend.h"
#include "backend/cuda_options.h"

#include <memory>
#include <string>

namespace lamina {

struct BackendOptions {
  std::string device = "auto";  // "cuda", "cpu" or "auto"
  int n_threads = 0;            // CPU: 0 for every CPU this process may use
  bool exact_matmul = false;    // f32 activations for quantised weights
  std::string cpu_isa = "auto"; // CPU dot-product kernels: "auto" or "scalar"
  CudaOptions cuda;
};

std::unique_ptr<Backend> make_backend(const BackendOptions& o);

}  // namespace lamina
