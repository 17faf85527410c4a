// Helpers shared by the GPU tests: a CUDA status assertion and an owning device buffer.
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
