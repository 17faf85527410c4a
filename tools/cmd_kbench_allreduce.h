// lamina kbench allreduce (see cmd_kbench_allreduce.cpp).
#pragma once

#include <string>

namespace lamina::cli {

struct KbenchAllReduceArgs {
  int ranks = 2;       // GPUs 0..ranks-1
  std::string widths;  // comma-separated vector widths; empty: 4096,8192,32768,131072,524288
  int reps = 20;
};

void run_kbench_allreduce(const KbenchAllReduceArgs& a);

}  // namespace lamina::cli
