// Helpers shared by the GPU tests: a CUDA status assertion and an owning device buffer.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstddef>

#define CUDA_OK(x) ASSERT_EQ((x), cudaSuccess) << cudaGetErrorString(x)

struct DeviceBuf {
  void* p = nullptr;
  size_t n = 0;
  explicit DeviceBuf(size_t bytes) : n(bytes) { cudaMalloc(&p, bytes); }
  ~DeviceBuf() { cudaFree(p); }
  DeviceBuf(const DeviceBuf&) = delete;
  DeviceBuf& operator=(const DeviceBuf&) = delete;
  template <class T> T* as() const { return static_cast<T*>(p); }
};
