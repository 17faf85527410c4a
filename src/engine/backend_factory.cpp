#include "engine/backend_factory.h"

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "core/thread_pool.h"

#include <optional>

#if LAMINA_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif


namespace lamina {

std::unique_ptr<Backend> make_backend(const BackendOptions& o) {
  std::string dev = o.device;
  if (dev != "auto" && dev != "cpu" && dev != "cuda") fail("unknown device '{}' (cpu, cuda or auto)", dev);
#if LAMINA_HAVE_CUDA
  if (dev == "auto") dev = cuda_device_count() > 0 ? "cuda" : "cpu";
  if (dev == "cuda") {
    if (cuda_device_count() == 0) fail("--device cuda: no CUDA GPU is available");
    return std::make_unique<CudaBackend>(0, o.exact_matmul, o.cuda);
  }
#else
  if (dev == "auto") dev = "cpu";
  if (dev == "cuda") fail("--device cuda: this lamina was built without CUDA");
#endif
  const std::optional<CpuIsa> isa = parse_isa(o.cpu_isa);
  if (!isa) fail("unknown CPU kernel set '{}' (auto, scalar, avx2, avx-vnni, avx512 or amx)", o.cpu_isa);
  if (!cpu_runs(*isa)) fail("--cpu-isa {}: this CPU does not run it (its best: {})", o.cpu_isa, isa_name(detect_isa()));
  return std::make_unique<CpuBackend>(usable_threads(o.n_threads), o.exact_matmul, *isa);
}

}  // namespace lamina
