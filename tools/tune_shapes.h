// Shared by `lamina tune` and the developer's `lamina kbench`: list options and the GEMV shapes
// as the CUDA backend runs them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#if defined(LAMINA_HAVE_CUDA)
#include "kernels/gemv/gemv.h"
#endif

namespace lamina::cli {

// "a,b,,c" -> {"a", "b", "c"} (the list options of kbench and tune).
std::vector<std::string> split_list(const std::string& s);
// split_list's items as whole numbers in [lo, hi]; anything else fails with
// "<what> '<item>': a whole number from lo to hi".
std::vector<int64_t> parse_whole_list(const std::string& s, int64_t lo, int64_t hi, const std::string& what);

#if defined(LAMINA_HAVE_CUDA)
// Placeholder addresses that ask gemv_time_variants for the shape as the CUDA backend runs it
// (the gate/up pair, x as int8 blocks, y's int8 copy made in the epilogue).
void mark_inputs(kernels::GemvProblem& p, bool pair, bool with_x8, bool with_y8);
#endif

}  // namespace lamina::cli
