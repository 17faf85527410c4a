// A zero-filled buffer whose pages are committed only when first written: the KV cache for a
// long context costs address space up front and memory only as positions are used.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <utility>

namespace lamina {

class PageBuffer {
 public:
  PageBuffer() = default;
  // Returns false when the address space cannot be reserved.
  bool reset(size_t bytes) {
    release();
    if (bytes == 0) return true;
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return false;
    data_ = static_cast<uint8_t*>(p);
    size_ = bytes;
    return true;
  }
  ~PageBuffer() { release(); }
  PageBuffer(const PageBuffer&) = delete;
  PageBuffer& operator=(const PageBuffer&) = delete;

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  void release() {
    if (data_) munmap(data_, size_);
    data_ = nullptr;
    size_ = 0;
  }
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace lamina
