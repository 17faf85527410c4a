// Helpers shared by the GPU tests: a CUDA status assertion and an owning device buffer.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstddef>

#define CUDA_OK(x) ASSERT_EQ((x), cudaSuccess) << cudaGetErrorString(x)

struct DeviceBuf {
  void* p = nullptr;
  explicit DeviceBuf(size_t n) { cudaMalloc(&p, n); }
  ~DeviceBuf() { cudaFree(p); }
  DeviceBuf(const DeviceBuf&) = delete;
  DeviceBuf& operator=(const DeviceBuf&) = delete;
  template <class T> T* as() const { return static_cast<T*>(p); }
};
