// Helpers shared by the GPU tests: a CUDA status assertion, an owning device buffer, and whether
// the device is sm_90 (where the Hopper kernels must run as themselves).
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <vector>

#define CUDA_OK(x) ASSERT_EQ((x), cudaSuccess) << cudaGetErrorString(x)

struct DeviceBuf {
  void* p = nullptr;
  size_t n = 0;
  explicit DeviceBuf(size_t bytes) : n(bytes) { cudaMalloc(&p, bytes); }
  // A copy of host's elements (p stays null if the allocation or the copy fails: the kernels
  // under test refuse null pointers).
  template <class T>
  explicit DeviceBuf(const std::vector<T>& host) : n(host.size() * sizeof(T)) {
    if (cudaMalloc(&p, n) == cudaSuccess && cudaMemcpy(p, host.data(), n, cudaMemcpyHostToDevice) != cudaSuccess)
      cudaFree(p), p = nullptr;
  }
  ~DeviceBuf() { cudaFree(p); }
  DeviceBuf(const DeviceBuf&) = delete;
  DeviceBuf& operator=(const DeviceBuf&) = delete;
  template <class T> T* as() const { return static_cast<T*>(p); }
};

inline bool sm90_device() {
  int dev = 0, major = 0, minor = 0;
  return cudaGetDevice(&dev) == cudaSuccess &&
         cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
         cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) == cudaSuccess && major == 9 && minor == 0;
}
