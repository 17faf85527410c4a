// `lamina kbench` in a build without it: one line saying how to get it (it links cuBLAS for its
// baseline, which the user's CLI does not need).
#include "commands.h"
#include "core/error.h"

namespace lamina::cli {

Run add_kbench(CLI::App& app) {
  auto* sub = app.add_subcommand("kbench", "Kernel benchmarks against cuBLAS (a developer build: -DLAMINA_KBENCH=ON)");
  sub->allow_extras();
  return [] { fail("kbench is a developer tool: configure with -DLAMINA_CUDA=ON -DLAMINA_KBENCH=ON (it links cuBLAS)"); };
}

}  // namespace lamina::cli
