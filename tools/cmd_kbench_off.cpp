// `lamina kbench` in a build without the GPU families: cpu runs (cmd_kbench_cpu.cpp); gemv and
// gemm say in one line how to get them (they link cuBLAS for their baseline, which the user's
// CLI does not need).
#include "cli_checks.h"
#include "cmd_kbench_cpu.h"
#include "commands.h"
#include "core/error.h"

#include <memory>

namespace lamina::cli {

Run add_kbench(CLI::App& app) {
  auto a = std::make_shared<KbenchCpuArgs>();
  auto family = std::make_shared<std::string>();
  auto* sub = app.add_subcommand("kbench", "Kernel benchmarks: cpu (the CPU backend against this machine's limits); "
                                           "gemv and gemm against cuBLAS in a developer build");
  sub->add_option("family", *family, "cpu (gemv, gemm: a build with -DLAMINA_CUDA=ON -DLAMINA_KBENCH=ON)")->required();
  sub->add_option("--shapes", a->shapes, "Comma-separated NxK shapes");
  sub->add_option("--types", a->types, "Comma-separated weight types");
  sub->add_option("-r,--reps", a->reps, "Timed repetitions (median)")->check(whole_in(1, 1000));
  add_kbench_cpu_options(sub, *a);
  sub->allow_extras();  // the GPU families' flags: refused below with the line that says why
  return [a, family, sub] {
    if (*family != "cpu")
      fail("kbench {}: a developer tool: configure with -DLAMINA_CUDA=ON -DLAMINA_KBENCH=ON (it links cuBLAS)", *family);
    if (!sub->remaining().empty()) fail("kbench cpu: unknown option '{}'", sub->remaining().front());
    run_kbench_cpu(*a);
  };
}

}  // namespace lamina::cli
