// lamina kbench cpu (cmd_kbench_cpu.cpp): the CPU backend's matmuls against the machine's read
// bandwidth and each type's in-cache row-dot rate, measured in the same run. In every build (it
// needs no GPU); the GPU families are in the developer build (cmd_kbench.cpp).
#pragma once

#include <string>

namespace CLI {
class App;
}

namespace lamina::cli {

struct KbenchCpuArgs {
  std::string shapes;  // NxK list; default: SmolLM2's and Llama-2-7B's decode shapes
  std::string types;   // default: f16,q8_0,q4_0,q4_1,q4_K,q6_K
  std::string tokens;  // token counts per matmul; default 1,128 (decode, a prompt)
  std::string isa = "auto";
  int threads = 0;     // 0: every CPU this process may use
  int reps = 5;
};

// The options only the CPU family takes (-t, --tokens, --cpu-isa).
void add_kbench_cpu_options(CLI::App* sub, KbenchCpuArgs& a);
void run_kbench_cpu(const KbenchCpuArgs& a);

}  // namespace lamina::cli
