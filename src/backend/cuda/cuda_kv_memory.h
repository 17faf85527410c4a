// The CUDA backend's KV cache memory: every layer's K and V rows at fixed device addresses,
// [n_ctx][row_bytes] a layer, which the kernels (and the recorded graphs) address as one array.
//
// A sliding-window layer (Gemma 3's local layers) reads only the rows of its window. With one
// sequence, its address range is backed by a ring of physical chunks (CUDA's virtual memory
// management, chunks of the device's allocation granularity) that moves up behind the sequence:
// the layer holds its window, one pass and some slack (backend/kv_window_ring.h: the arithmetic)
// instead of n_ctx rows, at the same
// addresses, so no kernel changes. Global layers are backed whole, and so is every window layer's
// range up to the rows the batching engine shares out as pages (keep_rows: its window pool's, or
// all). Without window layers the cache is two plain allocations, as before.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace lamina {

class CudaKvMemory {
 public:
  CudaKvMemory() = default;
  CudaKvMemory(const CudaKvMemory&) = delete;
  CudaKvMemory& operator=(const CudaKvMemory&) = delete;
  ~CudaKvMemory() { release(); }

  // n_layer layers of n_ctx rows of row_bytes each for K and for V on `device`. window[l] > 0: layer
  // l attends to its last window[l] positions (empty: every layer global); pass_rows: the most
  // rows a pass is expected to write (the ring's size; a larger pass grows it).
  void init(int device, int n_layer, int64_t n_ctx, size_t row_bytes, std::span<const int> window, int pass_rows);
  // The bytes init would hold with these arguments.
  static size_t bytes_for(int device, int n_layer, int64_t n_ctx, size_t row_bytes, std::span<const int> window,
                          int pass_rows);
  void release();

  char* k(int layer) const { return k_base_[size_t(layer)]; }
  char* v(int layer) const { return v_base_[size_t(layer)]; }

  // Backs the rows a pass at positions lo .. hi reads and writes (and the next position's, which
  // a decode step launched ahead writes). Chunks that leave the window are unmapped after `stream`
  // has drained, then mapped where the sequence goes; rows in a chunk mapped anew hold stale data
  // until written (kv_rewind_floor keeps a cut-back sequence from reading them).
  void prepare(int64_t lo, int64_t hi, cudaStream_t stream);
  // Whether position p's rows are backed in every layer.
  bool covers(int64_t p) const;
  // The fewest tokens a sequence may be cut back to and go on reading its cache (0: any).
  int rewind_floor() const;
  // Every row of every global layer and the first window_rows rows of every window layer (zeroed)
  // backed from now on (the batching engine's pages); throws if the memory is not there.
  void keep_rows(int64_t window_rows, cudaStream_t stream);
  // Device memory held now (both K and V).
  size_t bytes() const;
  // Whether some layer is backed by a ring.
  bool rings() const { return !rings_.empty(); }

 private:
  struct Ring {  // a window layer's chunks: K's and V's handles in pairs
    int layer = 0;
    int window = 0;
    std::vector<int> slot_of_chunk;  // the pool slot mapped at chunk c of the layer's range, or -1 (the truth)
    std::vector<CUmemGenericAllocationHandle> k_pool, v_pool;
    std::vector<int> free_slots;
    int64_t lo_c = 0, hi_c = -1;  // the run the last prepare backed whole (empty while hi_c < lo_c)
  };
  struct Plan {  // what init makes
    size_t chunk = 0, layer_span = 0, full_bytes = 0;
    std::vector<int> ring_layers;
    size_t ring_chunks = 0;  // made at first for each ring, K's (V's as many)
    size_t bytes() const { return ring_layers.empty() ? 0 : 2 * (full_bytes + ring_layers.size() * ring_chunks * chunk); }
  };
  static Plan plan(int device, int n_layer, int64_t n_ctx, size_t row_bytes, std::span<const int> window, int pass_rows);
  bool add_chunk(Ring& r);
  void map_chunk(Ring& r, int64_t c);
  void unmap_chunk(Ring& r, int64_t c);

  int device_ = 0;
  int64_t n_ctx_ = 0;
  size_t row_bytes_ = 0;
  size_t chunk_ = 0;       // the allocation granularity
  size_t layer_span_ = 0;  // a ring layer's address range: n_ctx rows rounded up to chunks
  std::vector<char*> k_base_, v_base_;
  std::vector<Ring> rings_;
  bool keep_all_ = false;  // keep_every_row was called: prepare maps and unmaps nothing
  // Plain allocations (no ring), or the reserved range and the whole-backed layers' handle.
  void* plain_k_ = nullptr;
  void* plain_v_ = nullptr;
  CUdeviceptr va_ = 0;
  size_t va_bytes_ = 0;
  size_t full_bytes_ = 0;  // the global layers' K (and V) handle, at the start of each half
  CUmemGenericAllocationHandle full_k_ = 0, full_v_ = 0;
};

}  // namespace lamina
