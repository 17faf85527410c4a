#include "backend/cuda/nccl_group.h"

#include "backend/cuda/cuda_backend.h"
#include "core/error.h"

#include <cstddef>

#include <cuda_runtime.h>

#if LAMINA_HAVE_NCCL
#include <nccl.h>
#endif

namespace lamina {

#if LAMINA_HAVE_NCCL

bool nccl_all_reduce_sum(ncclComm* comm, float* x, size_t n, cudaStream_t s, std::string* why) {
  const ncclResult_t e = ncclAllReduce(x, x, n, ncclFloat, ncclSum, comm, s);
  if (e != ncclSuccess && why) *why = ncclGetErrorString(e);
  return e == ncclSuccess;
}

NcclGroup::NcclGroup(int ranks, int64_t peer_elems) {
  const int gpus = cuda_device_count();
  if (ranks < 1 || ranks > gpus) fail("--tensor-parallel {}: {} CUDA GPU(s) are available", ranks, gpus);
  std::vector<int> devices(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r) devices[size_t(r)] = r;
  comms_.resize(size_t(ranks));
  const ncclResult_t e = ncclCommInitAll(comms_.data(), ranks, devices.data());
  if (e != ncclSuccess) {
    comms_.clear();
    fail("NCCL: making a group of {} GPUs failed: {}", ranks, ncclGetErrorString(e));
  }
  make_peer_buffers(peer_elems);
}

// Peer access between every pair of the group's GPUs, then each GPU's slots and each
// rank's epochs and grid-barrier words, zeroed. Any refusal leaves the group without them (NCCL does every all-reduce).
void NcclGroup::make_peer_buffers(int64_t elems) {
  const int n = ranks();
  if (n > kernels::kPeerMaxRanks || elems <= 0) return;
  for (int r = 0; r < n; ++r)
    for (int p = 0; p < n; ++p) {
      int ok = 0;
      if (p != r && (cudaDeviceCanAccessPeer(&ok, r, p) != cudaSuccess || !ok)) return;
    }
  // A zeroed buffer on the current GPU, owned by the group (null where refused).
  const auto zeroed = [&](size_t bytes) -> void* {
    void* p = nullptr;
    if (cudaMalloc(&p, bytes) != cudaSuccess) return nullptr;
    owned_.push_back(p);
    return cudaMemset(p, 0, bytes) == cudaSuccess ? p : nullptr;
  };
  std::vector<kernels::PeerAllReduce> views(static_cast<size_t>(n));
  bool fine = true;
  for (int r = 0; r < n && fine; ++r) {
    fine = cudaSetDevice(r) == cudaSuccess;
    for (int p = 0; p < n && fine; ++p) {
      if (p == r) continue;
      const cudaError_t e = cudaDeviceEnablePeerAccess(p, 0);
      if (e == cudaErrorPeerAccessAlreadyEnabled) cudaGetLastError();
      else fine = e == cudaSuccess;
    }
    if (!fine) break;
    void* slots = zeroed(kernels::peer_slots_bytes(n, elems));
    void* local = zeroed(kernels::kPeerLocalBytes);  // epochs, the grid barrier's counter and sums
    fine = slots && local && cudaDeviceSynchronize() == cudaSuccess;
    if (!fine) break;
    for (auto& v : views) v.slots[r] = static_cast<uint64_t*>(slots);
    kernels::set_peer_local(views[size_t(r)], local);
  }
  cudaSetDevice(0);
  if (!fine) {
    cudaGetLastError();
    return;
  }
  for (int r = 0; r < n; ++r) views[size_t(r)].ranks = n, views[size_t(r)].rank = r, views[size_t(r)].max_elems = elems;
  peers_ = std::move(views);
}

NcclGroup::~NcclGroup() {
  for (ncclComm* c : comms_) ncclCommDestroy(c);
  for (void* p : owned_) cudaFree(p);
}

#else

bool nccl_all_reduce_sum(ncclComm*, float*, size_t, cudaStream_t, std::string* why) {
  if (why) *why = "built without NCCL";
  return false;
}

NcclGroup::NcclGroup(int ranks, int64_t) {
  fail("--tensor-parallel {} across GPUs: this lamina was built without NCCL (see README: LAMINA_NCCL_ROOT)", ranks);
}

NcclGroup::~NcclGroup() = default;
void NcclGroup::make_peer_buffers(int64_t) {}

#endif

}  // namespace lamina
