// lamina kbench attn (see cmd_kbench_attn.cpp).
#pragma once

#include <string>

namespace lamina::cli {

struct KbenchAttnArgs {
  std::string lengths;  // comma-separated prompt lengths; empty: 1024,4096,8192,16384
  int n_head = 32, n_head_kv = 8, head_dim = 128;
  int reps = 20;
};

void run_kbench_attn(const KbenchAttnArgs& a);

}  // namespace lamina::cli
