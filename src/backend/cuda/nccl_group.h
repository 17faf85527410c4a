// NCCL communicators for the ranks of one process (issue #35): one per GPU, made together over
// devices 0 .. n-1. Each rank's CudaBackend takes its own (CudaOptions::nccl) and all-reduces
// device memory through it on the backend's stream (recorded graphs hold the NCCL kernels too).
// Where every pair of GPUs reaches the other's memory (peer access), the group also holds the
// buffers of the one-shot peer all-reduce (kernels/ops/peer_all_reduce.h) for vectors of up to
// `peer_elems` floats, which a backend takes for small ones (CudaOptions::peer).
// Without NCCL in the build, making a group fails with one line saying so.
#pragma once

#include "kernels/ops/peer_all_reduce.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

struct ncclComm;
typedef struct CUstream_st* cudaStream_t;

namespace lamina {

// The in-place sum of x[0..n) over comm's group, on stream s (every rank calls it in the same
// order). False with NCCL's message in *why on failure (and always in a build without NCCL).
bool nccl_all_reduce_sum(ncclComm* comm, float* x, size_t n, cudaStream_t s, std::string* why);

class NcclGroup {
 public:
  // Throws lamina::Error (no NCCL, too few GPUs, NCCL's error).
  NcclGroup(int ranks, int64_t peer_elems);
  ~NcclGroup();
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;
  int ranks() const { return int(comms_.size()); }
  ncclComm* comm(int rank) const { return comms_.at(size_t(rank)); }
  // Rank r's view of the peer all-reduce's buffers, or null where peer access is missing.
  const kernels::PeerAllReduce* peer(int rank) const { return peers_.empty() ? nullptr : &peers_.at(size_t(rank)); }

 private:
  std::vector<ncclComm*> comms_;
  std::vector<kernels::PeerAllReduce> peers_;
  std::vector<void*> owned_;  // the peer buffers
  void make_peer_buffers(int64_t elems);
};

}  // namespace lamina
