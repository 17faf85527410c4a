#include "kernels/common/pdl.cuh"

#include "kernels/common/env_switch.h"

#include <cstdlib>
#include <unordered_set>

namespace lamina::kernels {

bool pdl_enabled() {
  static const bool on = env_switch_on("LAMINA_PDL");
  return on;
}

int smem_carveout() {
  static const int pct = [] {
    const char* env = std::getenv("LAMINA_CARVEOUT");
    return env && *env ? std::atoi(env) : -1;
  }();
  return pct;
}

void apply_carveout(const void* kernel) {
  static std::unordered_set<const void*> done;
  const int pct = smem_carveout();
  if (pct < 0 || !done.insert(kernel).second) return;
  cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, pct);
}

}  // namespace lamina::kernels
