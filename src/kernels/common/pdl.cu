#include "kernels/common/pdl.cuh"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace lamina::kernels {
namespace {

std::atomic<int>& pdl_state() {  // -1: not decided yet, then 0 or 1
  static std::atomic<int> state{-1};
  return state;
}

}  // namespace

bool pdl_enabled() {
  int s = pdl_state().load(std::memory_order_relaxed);
  if (s < 0) {
    const char* env = std::getenv("LAMINA_PDL");
    s = env && std::strcmp(env, "0") == 0 ? 0 : 1;
    pdl_state().store(s, std::memory_order_relaxed);
  }
  return s == 1;
}

void set_pdl(bool on) { pdl_state().store(on ? 1 : 0, std::memory_order_relaxed); }

}  // namespace lamina::kernels
