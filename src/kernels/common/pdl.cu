#include "kernels/common/pdl.cuh"

#include <cstdlib>
#include <cstring>

namespace lamina::kernels {

bool pdl_enabled() {
  static const bool on = [] {
    const char* env = std::getenv("LAMINA_PDL");
    return !(env && std::strcmp(env, "0") == 0);
  }();
  return on;
}

}  // namespace lamina::kernels
