// A/B switches read from the environment: a path that is on by default and that a measurement
// run turns off with NAME=0. Callers keep the answer in a function-local static (read once).
#pragma once

#include <cstdlib>
#include <cstring>

namespace lamina::kernels {

// True unless the environment variable `name` is set to "0".
inline bool env_switch_on(const char* name) {
  const char* e = std::getenv(name);
  return !(e && std::strcmp(e, "0") == 0);
}

// True only when the environment variable `name` is set to "1" (a measured rung kept off).
inline bool env_switch_opt_in(const char* name) {
  const char* e = std::getenv(name);
  return e && std::strcmp(e, "1") == 0;
}

}  // namespace lamina::kernels
