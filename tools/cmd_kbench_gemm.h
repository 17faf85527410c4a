// lamina kbench gemm (see cmd_kbench_gemm.cpp).
#pragma once

#include <string>
#include <vector>

namespace lamina::cli {

struct KbenchGemmArgs {
  std::string shapes;  // MxNxK list; empty: the default set
  std::string types;   // with --shapes; default f16
  bool best = false, all = false;
  bool configs = false;  // every config's row, not only each variant's fastest
  int reps = 10;
};

void run_kbench_gemm(const KbenchGemmArgs& a);

}  // namespace lamina::cli
