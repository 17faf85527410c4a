// lamina kbench experts (see cmd_kbench_experts.cpp).
#pragma once

#include <string>

namespace lamina::cli {

struct KbenchExpertsArgs {
  std::string models;  // comma-separated: qwen3-30b-a3b, mixtral-8x7b (empty: both)
  std::string tokens;  // comma-separated tokens a step (empty: 1,4,8,16,32,64)
  std::string types;   // comma-separated weight types (empty: q4_0)
  int reps = 20;
};

void run_kbench_experts(const KbenchExpertsArgs& a);

}  // namespace lamina::cli
