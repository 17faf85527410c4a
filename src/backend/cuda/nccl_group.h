// NCCL communicators for the ranks of one process (issue #35): one per GPU, made together over
// devices 0 .. n-1. Each rank's CudaBackend takes its own (CudaOptions::nccl) and all-reduces
// device memory through it on the backend's stream (recorded graphs hold the NCCL kernels too).
// Without NCCL in the build, making a group fails with one line saying so.
#pragma once

#include <cstddef>
#include <vector>

struct ncclComm;

namespace lamina {

bool nccl_available();  // this build has NCCL

class NcclGroup {
 public:
  explicit NcclGroup(int ranks);  // throws lamina::Error (no NCCL, too few GPUs, NCCL's error)
  ~NcclGroup();
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;
  int ranks() const { return int(comms_.size()); }
  ncclComm* comm(int rank) const { return comms_.at(size_t(rank)); }

 private:
  std::vector<ncclComm*> comms_;
};

}  // namespace lamina
