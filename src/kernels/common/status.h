// Kernel launch status: kernels validate their arguments and return an error instead of
// launching on bad input. Kernels know nothing of the engine: raw pointers, sizes, type ids.
#pragma once

#include <string>

namespace lamina::kernels {

struct Status {
  bool ok = true;
  std::string message;  // empty when ok
  static Status success() { return {}; }
  static Status error(std::string m) { return {false, std::move(m)}; }
  explicit operator bool() const { return ok; }
};

}  // namespace lamina::kernels
