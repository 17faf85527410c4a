#include "backend/cuda/nccl_group.h"

#include "backend/cuda/cuda_backend.h"
#include "core/error.h"

#include <cstddef>

#if LAMINA_HAVE_NCCL
#include <nccl.h>
#endif

namespace lamina {

#if LAMINA_HAVE_NCCL

bool nccl_available() { return true; }

NcclGroup::NcclGroup(int ranks) {
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
}

NcclGroup::~NcclGroup() {
  for (ncclComm* c : comms_) ncclCommDestroy(c);
}

#else

bool nccl_available() { return false; }

NcclGroup::NcclGroup(int ranks) {
  fail("--tensor-parallel {} across GPUs: this lamina was built without NCCL (see README: LAMINA_NCCL_ROOT)", ranks);
}

NcclGroup::~NcclGroup() = default;

#endif

}  // namespace lamina
