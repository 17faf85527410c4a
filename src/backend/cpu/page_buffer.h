// A zero-filled buffer whose pages are committed only when first written: the KV cache for a
// long context costs address space up front and memory only as positions are used.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

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

  // Gives the whole pages inside [offset, offset + bytes) back to the system: they read as zeros
  // and cost memory again only when written.
  void discard(size_t offset, size_t bytes) {
    const size_t page = page_size(), b = (offset + page - 1) / page * page;
    const size_t e = std::min(offset + bytes, size_) / page * page;
    if (data_ && e > b) madvise(data_ + b, e - b, MADV_DONTNEED);
  }
  // Bytes of the pages held in memory now (mincore).
  size_t resident() const {
    const size_t page = page_size(), pages = (size_ + page - 1) / page;
    std::vector<unsigned char> in(pages);
    if (!data_ || mincore(data_, size_, in.data()) != 0) return 0;
    return size_t(std::count_if(in.begin(), in.end(), [](unsigned char c) { return c & 1; })) * page;
  }

 private:
  void release() {
    if (data_) munmap(data_, size_);
    data_ = nullptr;
    size_ = 0;
  }
  static size_t page_size() { return size_t(sysconf(_SC_PAGESIZE)); }
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace lamina
