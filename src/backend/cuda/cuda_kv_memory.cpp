// CudaKvMemory: plain allocations, or a reserved address range with whole-backed global layers
// and rings of chunks for the window layers (cuda_kv_memory.h).
#include "backend/cuda/cuda_kv_memory.h"

#include "backend/kv_window_ring.h"

#include "backend/cuda/cuda_check.h"
#include "core/error.h"
#include "core/units.h"

#include <cudaTypedefs.h>

#include <algorithm>

namespace lamina {

namespace {

// The driver's virtual memory calls through the runtime's entry points (the project links the
// runtime only).
struct Vmm {
  PFN_cuMemGetAllocationGranularity_v10020 granularity = nullptr;
  PFN_cuMemAddressReserve_v10020 reserve = nullptr;
  PFN_cuMemAddressFree_v10020 free_range = nullptr;
  PFN_cuMemCreate_v10020 create = nullptr;
  PFN_cuMemRelease_v10020 release = nullptr;
  PFN_cuMemMap_v10020 map = nullptr;
  PFN_cuMemUnmap_v10020 unmap = nullptr;
  PFN_cuMemSetAccess_v10020 set_access = nullptr;
  bool ok = false;
};

template <class F>
bool entry(const char* name, F& f) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q{};
  if (cudaGetDriverEntryPointByVersion(name, &fn, 10020, cudaEnableDefault, &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess)
    return false;
  f = reinterpret_cast<F>(fn);
  return true;
}

const Vmm& vmm() {
  static const Vmm v = [] {
    Vmm m;
    m.ok = entry("cuMemGetAllocationGranularity", m.granularity) && entry("cuMemAddressReserve", m.reserve) &&
           entry("cuMemAddressFree", m.free_range) && entry("cuMemCreate", m.create) &&
           entry("cuMemRelease", m.release) && entry("cuMemMap", m.map) && entry("cuMemUnmap", m.unmap) &&
           entry("cuMemSetAccess", m.set_access);
    return m;
  }();
  return v;
}

CUmemAllocationProp device_prop(int device) {
  CUmemAllocationProp p{};
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.location.id = device;
  return p;
}

// Read and write access for `device` to a mapped range.
CUmemAccessDesc read_write(int device) {
  CUmemAccessDesc a{};
  a.location.type = CU_MEM_LOCATION_TYPE_DEVICE, a.location.id = device, a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return a;
}

void drv_check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) fail("CUDA driver error {} in {} (the KV cache)", int(r), what);
}

size_t round_up(size_t x, size_t m) { return (x + m - 1) / m * m; }

}  // namespace

// Rings where a window's run of chunks (kv_ring::ring_chunks) is shorter than the whole layer.
CudaKvMemory::Plan CudaKvMemory::plan(int device, int n_layer, int64_t n_ctx, size_t row_bytes, std::span<const int> window,
                                      int pass_rows) {
  Plan p;
  const Vmm& d = vmm();
  const CUmemAllocationProp prop = device_prop(device);
  if (!d.ok || d.granularity(&p.chunk, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS || p.chunk == 0) return {};
  const size_t layer_bytes = size_t(n_ctx) * row_bytes;
  p.layer_span = round_up(layer_bytes, p.chunk);
  for (int l = 0; l < n_layer && l < int(window.size()); ++l) {
    const int w = window[size_t(l)];
    if (w <= 0) continue;
    const size_t n = kv_ring::ring_chunks(w, pass_rows, row_bytes, p.chunk);
    if (n < p.layer_span / p.chunk) p.ring_layers.push_back(l), p.ring_chunks = std::max(p.ring_chunks, n);
  }
  p.full_bytes = round_up((size_t(n_layer) - p.ring_layers.size()) * layer_bytes, p.chunk);
  return p;
}

size_t CudaKvMemory::bytes_for(int device, int n_layer, int64_t n_ctx, size_t row_bytes, std::span<const int> window,
                               int pass_rows) {
  const Plan p = plan(device, n_layer, n_ctx, row_bytes, window, pass_rows);
  return p.ring_layers.empty() ? 2 * size_t(n_layer) * size_t(n_ctx) * row_bytes : p.bytes();
}

void CudaKvMemory::init(int device, int n_layer, int64_t n_ctx, size_t row_bytes, std::span<const int> window,
                        int pass_rows) {
  release();
  device_ = device, n_ctx_ = n_ctx, row_bytes_ = row_bytes;
  k_base_.assign(size_t(n_layer), nullptr), v_base_.assign(size_t(n_layer), nullptr);
  const size_t layer_bytes = size_t(n_ctx) * row_bytes;
  const Plan p = plan(device, n_layer, n_ctx, row_bytes, window, pass_rows);
  const std::vector<int>& ring_layers = p.ring_layers;
  if (ring_layers.empty()) {
    const size_t total = std::max<size_t>(layer_bytes * size_t(n_layer), 256);
    if (cudaMalloc(&plain_k_, total) != cudaSuccess || cudaMalloc(&plain_v_, total) != cudaSuccess) {
      cudaGetLastError();
      release();
      fail("out of GPU memory for the KV cache: {} for {} positions", format_bytes(2 * total), n_ctx);
    }
    for (int l = 0; l < n_layer; ++l) {
      k_base_[size_t(l)] = static_cast<char*>(plain_k_) + size_t(l) * layer_bytes;
      v_base_[size_t(l)] = static_cast<char*>(plain_v_) + size_t(l) * layer_bytes;
    }
    return;
  }
  chunk_ = p.chunk, layer_span_ = p.layer_span;
  const Vmm& d = vmm();
  const CUmemAllocationProp prop = device_prop(device);

  // [global layers | one span per ring layer] for K, then the same for V.
  full_bytes_ = p.full_bytes;
  const size_t half = full_bytes_ + ring_layers.size() * layer_span_;
  va_bytes_ = 2 * half;
  drv_check(d.reserve(&va_, va_bytes_, chunk_, 0, 0), "cuMemAddressReserve");
  char* const k0 = reinterpret_cast<char*>(va_);
  char* const v0 = k0 + half;
  if (full_bytes_) {
    if (d.create(&full_k_, full_bytes_, &prop, 0) != CUDA_SUCCESS || d.create(&full_v_, full_bytes_, &prop, 0) != CUDA_SUCCESS) {
      release();
      fail("out of GPU memory for the KV cache: {} for the global layers' {} positions", format_bytes(2 * full_bytes_),
           n_ctx);
    }
    const CUmemAccessDesc a = read_write(device);
    for (auto [base, h] : {std::pair{k0, full_k_}, std::pair{v0, full_v_}}) {
      drv_check(d.map(CUdeviceptr(base), full_bytes_, 0, h, 0), "cuMemMap");
      drv_check(d.set_access(CUdeviceptr(base), full_bytes_, &a, 1), "cuMemSetAccess");
    }
  }
  size_t g = 0, r = 0;
  for (int l = 0; l < n_layer; ++l) {
    const bool ring = std::find(ring_layers.begin(), ring_layers.end(), l) != ring_layers.end();
    const size_t off = ring ? full_bytes_ + r++ * layer_span_ : g++ * layer_bytes;
    k_base_[size_t(l)] = k0 + off, v_base_[size_t(l)] = v0 + off;
    if (!ring) continue;
    Ring& x = rings_.emplace_back();
    x.layer = l, x.window = window[size_t(l)];
    x.slot_of_chunk.assign(layer_span_ / chunk_, -1);
  }
  // Each ring's chunks for a window, a pass and the slack, made now so that a sequence whose
  // passes fit them never allocates while it runs.
  for (Ring& x : rings_)
    for (size_t i = 0; i < p.ring_chunks; ++i)
      if (!add_chunk(x)) {
        release();
        fail("out of GPU memory for the KV cache's window layers ({} a chunk)", format_bytes(chunk_));
      }
  prepare(0, 0, nullptr);
}

void CudaKvMemory::release() {
  const Vmm& d = vmm();
  for (Ring& x : rings_) {
    for (size_t c = 0; c < x.slot_of_chunk.size(); ++c)  // (no throwing here: the destructor calls it)
      if (x.slot_of_chunk[c] >= 0)
        d.unmap(CUdeviceptr(k(x.layer) + c * chunk_), chunk_), d.unmap(CUdeviceptr(v(x.layer) + c * chunk_), chunk_);
    for (auto h : x.k_pool) d.release(h);
    for (auto h : x.v_pool) d.release(h);
  }
  rings_.clear();
  keep_all_ = false;
  if (va_) {
    if (full_bytes_) {
      char* const k0 = reinterpret_cast<char*>(va_);
      d.unmap(CUdeviceptr(k0), full_bytes_), d.unmap(CUdeviceptr(k0 + va_bytes_ / 2), full_bytes_);
    }
    if (full_k_) d.release(full_k_);
    if (full_v_) d.release(full_v_);
    d.free_range(va_, va_bytes_);
  }
  va_ = 0, va_bytes_ = 0, full_bytes_ = 0, full_k_ = full_v_ = 0;
  if (plain_k_) cudaFree(plain_k_);
  if (plain_v_) cudaFree(plain_v_);
  plain_k_ = plain_v_ = nullptr;
  k_base_.clear(), v_base_.clear();
}

// One more K and V chunk in the ring's pool, free; false where the GPU has no memory for them.
bool CudaKvMemory::add_chunk(Ring& x) {
  const Vmm& d = vmm();
  const CUmemAllocationProp prop = device_prop(device_);
  CUmemGenericAllocationHandle hk = 0, hv = 0;
  if (d.create(&hk, chunk_, &prop, 0) != CUDA_SUCCESS || d.create(&hv, chunk_, &prop, 0) != CUDA_SUCCESS) {
    if (hk) d.release(hk);
    return false;
  }
  x.k_pool.push_back(hk), x.v_pool.push_back(hv);
  x.free_slots.push_back(int(x.k_pool.size()) - 1);
  return true;
}

void CudaKvMemory::map_chunk(Ring& x, int64_t c) {
  const Vmm& d = vmm();
  if (x.free_slots.empty() && !add_chunk(x))  // a pass longer than the ring was made for: one more chunk
    fail("out of GPU memory for the KV cache of layer {} ({} a chunk, {} held)", x.layer, format_bytes(chunk_),
         format_bytes(bytes()));
  const int s = x.free_slots.back();
  const CUmemAccessDesc a = read_write(device_);
  const CUdeviceptr kp = CUdeviceptr(k(x.layer) + size_t(c) * chunk_), vp = CUdeviceptr(v(x.layer) + size_t(c) * chunk_);
  // Both or neither: on a failure what was mapped is unmapped again and the slot stays free.
  auto map_one = [&](CUdeviceptr p, CUmemGenericAllocationHandle h) {
    CUresult r = d.map(p, chunk_, 0, h, 0);
    if (r == CUDA_SUCCESS && (r = d.set_access(p, chunk_, &a, 1)) != CUDA_SUCCESS) d.unmap(p, chunk_);
    return r;
  };
  drv_check(map_one(kp, x.k_pool[size_t(s)]), "cuMemMap");
  if (const CUresult r = map_one(vp, x.v_pool[size_t(s)]); r != CUDA_SUCCESS) {
    d.unmap(kp, chunk_);
    drv_check(r, "cuMemMap");
  }
  x.free_slots.pop_back();
  x.slot_of_chunk[size_t(c)] = s;
}

void CudaKvMemory::unmap_chunk(Ring& x, int64_t c) {
  const Vmm& d = vmm();
  const size_t off = size_t(c) * chunk_;
  drv_check(d.unmap(CUdeviceptr(k(x.layer) + off), chunk_), "cuMemUnmap");
  drv_check(d.unmap(CUdeviceptr(v(x.layer) + off), chunk_), "cuMemUnmap");
  x.free_slots.push_back(x.slot_of_chunk[size_t(c)]);
  x.slot_of_chunk[size_t(c)] = -1;
}

void CudaKvMemory::prepare(int64_t lo, int64_t hi, cudaStream_t stream) {
  if (keep_all_) return;
  bool drained = false;
  for (Ring& x : rings_) {
    const kv_ring::Run run = kv_ring::chunks(lo, hi, x.window, n_ctx_, row_bytes_, chunk_);
    if (run.c0 == x.lo_c && run.c1 == x.hi_c) continue;  // (a decode step: nearly always)
    x.lo_c = 0, x.hi_c = -1;  // (until the run is whole: covers() says no, and the next call looks again)
    for (int64_t c = 0; c < int64_t(x.slot_of_chunk.size()); ++c) {
      if (x.slot_of_chunk[size_t(c)] < 0 || (c >= run.c0 && c <= run.c1)) continue;
      if (!drained) cuda_check(cudaStreamSynchronize(stream), "the KV cache's window"), drained = true;
      unmap_chunk(x, c);
    }
    for (int64_t c = run.c0; c <= run.c1; ++c)
      if (x.slot_of_chunk[size_t(c)] < 0) map_chunk(x, c);
    x.lo_c = run.c0, x.hi_c = run.c1;
  }
}

bool CudaKvMemory::covers(int64_t p) const {
  if (p < 0 || p >= n_ctx_) return false;
  if (rings_.empty()) return true;  // (and chunk_ is 0)
  const int64_t a = int64_t(size_t(p) * row_bytes_ / chunk_), b = int64_t((size_t(p + 1) * row_bytes_ - 1) / chunk_);
  for (const Ring& x : rings_)
    if (a < x.lo_c || b > x.hi_c) return false;
  return true;
}

int CudaKvMemory::rewind_floor() const {
  int64_t floor = 0;
  for (const Ring& x : rings_) {
    if (x.hi_c < x.lo_c) continue;
    floor = std::max(floor, kv_ring::rewind_floor(x.lo_c, x.window, row_bytes_, chunk_));
  }
  return int(floor);
}

void CudaKvMemory::keep_rows(int64_t window_rows, cudaStream_t stream) {
  if (rings_.empty() || keep_all_) return;
  const int64_t rows = std::clamp<int64_t>(window_rows, 1, n_ctx_);
  std::vector<int> windows;
  for (Ring& x : rings_) windows.push_back(x.window), x.window = int(rows);  // (every chunk from 0 on)
  try {
    prepare(0, rows - 1, stream);
  } catch (const Error& e) {
    for (size_t i = 0; i < rings_.size(); ++i) rings_[i].window = windows[i];
    fail("several sequences at once keep every row of the global layers' KV cache and {} of the window layers' ({} "
         "for {} positions), more than the GPU has ({}; lower --ctx)", rows,
         format_bytes(2 * (full_bytes_ + rings_.size() * std::min(layer_span_, size_t(rows) * row_bytes_))), n_ctx_,
         e.what());
  }
  // The window layers' rows start at zero: the prompt kernel's first key tile of a row may reach
  // before its window, into pages no sequence has written (masked, but a chunk mapped anew holds
  // any bits, NaN among them, which P V's zeros would not cancel).
  for (const Ring& x : rings_) {
    const size_t bytes = size_t(x.hi_c + 1) * chunk_;
    cuda_check(cudaMemsetAsync(k_base_[size_t(x.layer)], 0, bytes, stream), "the KV cache's window layers");
    cuda_check(cudaMemsetAsync(v_base_[size_t(x.layer)], 0, bytes, stream), "the KV cache's window layers");
  }
  keep_all_ = true;
}

size_t CudaKvMemory::bytes() const {
  if (plain_k_) return 2 * size_t(n_ctx_) * row_bytes_ * k_base_.size();
  size_t b = 2 * full_bytes_;
  for (const Ring& x : rings_) b += 2 * x.k_pool.size() * chunk_;
  return b;
}

}  // namespace lamina
