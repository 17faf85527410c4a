// Sizes in messages and summaries.
#pragma once

#include <fmt/format.h>

#include <cstddef>
#include <string>

namespace lamina {

// "N.NN <unit>" (B, KiB, MiB, GiB, TiB).
inline std::string format_bytes(size_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double b = double(bytes);
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  return fmt::format("{:.2f} {}", b, units[u]);
}

}  // namespace lamina
