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
  int gpu = 0;                  // CUDA: the device index (a tensor-parallel rank's GPU)
  CudaOptions cuda;
};

std::unique_ptr<Backend> make_backend(const BackendOptions& o);

// The device side of a tensor-parallel group (issue #35): on CUDA, one GPU per rank and their
// NCCL communicators (made together); on the CPU, nothing (the ranks sum in host memory).
class DeviceGroup {
 public:
  virtual ~DeviceGroup() = default;
  // Rank r's backend options: its GPU and communicator.
  virtual void configure(int rank, BackendOptions& o) const = 0;
};
// Throws lamina::Error when the device cannot hold `ranks` ranks (too few GPUs, no NCCL).
// max_vector: the most floats a small all-reduce takes (the peer all-reduce's slots).
std::unique_ptr<DeviceGroup> make_device_group(const BackendOptions& o, int ranks, int64_t max_vector);

}  // namespace lamina
