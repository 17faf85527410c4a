#include "engine/backend_factory.h"

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "core/thread_pool.h"

#include <optional>

#if LAMINA_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/nccl_group.h"
#endif


namespace lamina {

namespace {

// "cuda" or "cpu": what o.device names on this machine.
std::string resolve_device(const BackendOptions& o) {
  std::string dev = o.device;
  if (dev != "auto" && dev != "cpu" && dev != "cuda") fail("unknown device '{}' (cpu, cuda or auto)", dev);
#if LAMINA_HAVE_CUDA
  if (dev == "auto") dev = cuda_device_count() > 0 ? "cuda" : "cpu";
  if (dev == "cuda" && cuda_device_count() == 0) fail("--device cuda: no CUDA GPU is available");
#else
  if (dev == "auto") dev = "cpu";
  if (dev == "cuda") fail("--device cuda: this lamina was built without CUDA");
#endif
  return dev;
}

class HostGroup final : public DeviceGroup {
 public:
  void configure(int, BackendOptions&) const override {}
};

#if LAMINA_HAVE_CUDA
class GpuGroup final : public DeviceGroup {
 public:
  GpuGroup(int ranks, int64_t max_vector) : nccl_(ranks, max_vector) {}
  void configure(int rank, BackendOptions& o) const override {
    o.gpu = rank, o.cuda.nccl = nccl_.comm(rank), o.cuda.peer = nccl_.peer(rank);
  }

 private:
  NcclGroup nccl_;
};
#endif

}  // namespace

std::unique_ptr<DeviceGroup> make_device_group(const BackendOptions& o, int ranks, int64_t max_vector) {
#if LAMINA_HAVE_CUDA
  // (no peer buffers where every all-reduce goes to NCCL)
  if (resolve_device(o) == "cuda")
    return std::make_unique<GpuGroup>(ranks, o.cuda.all_reduce == CudaOptions::AllReduce::Nccl ? 0 : max_vector);
#endif
  (void)resolve_device(o);
  (void)ranks, (void)max_vector;
  return std::make_unique<HostGroup>();
}

std::unique_ptr<Backend> make_backend(const BackendOptions& o) {
  const std::string dev = resolve_device(o);
#if LAMINA_HAVE_CUDA
  if (dev == "cuda") {
    if (o.gpu < 0 || o.gpu >= cuda_device_count()) fail("CUDA device {} of {}", o.gpu, cuda_device_count());
    return std::make_unique<CudaBackend>(o.gpu, o.exact_matmul, o.cuda);
  }
#endif
  (void)dev;
  const std::optional<CpuIsa> isa = parse_isa(o.cpu_isa);
  if (!isa) fail("unknown CPU kernel set '{}' (auto, scalar, avx2, avx-vnni, avx512 or amx)", o.cpu_isa);
  if (!cpu_runs(*isa)) fail("--cpu-isa {}: this CPU does not run it (its best: {})", o.cpu_isa, isa_name(detect_isa()));
  return std::make_unique<CpuBackend>(usable_threads(o.n_threads), o.exact_matmul, *isa);
}

}  // namespace lamina
