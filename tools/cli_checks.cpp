#include "cli_checks.h"

#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/scheduler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace lamina::cli {

CLI::Validator finite_in(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& s) -> std::string {
        char* end = nullptr;
        errno = 0;
        const double v = std::strtod(s.c_str(), &end);
        if (s.empty() || end != s.c_str() + s.size()) return fmt::format("'{}' is not a number", s);
        if (!std::isfinite(v) || errno == ERANGE) return fmt::format("'{}' is not a finite number", s);
        if (v < lo || v > hi) return fmt::format("{} is out of range (from {:g} to {:g})", s, lo, hi);
        return {};
      },
      fmt::format("[{:g}, {:g}]", lo, hi));
}

CLI::Validator whole_in(long long lo, long long hi) {
  return CLI::Validator(
      [lo, hi](std::string& s) -> std::string {
        char* end = nullptr;
        errno = 0;
        const long long v = std::strtoll(s.c_str(), &end, 10);
        if (s.empty() || end != s.c_str() + s.size()) return fmt::format("'{}' is not a whole number", s);
        if (errno == ERANGE || v < lo || v > hi) return fmt::format("{} is out of range (from {} to {})", s, lo, hi);
        return {};
      },
      fmt::format("[{}, {}]", lo, hi));
}

CLI::Option* add_seed_option(CLI::App* sub, const std::string& name, uint64_t& seed, bool* given,
                             const std::string& help) {
  auto parse = [&seed, given](const std::string& s) {
    seed = std::strtoull(s.c_str(), nullptr, 10);  // validated below before this runs
    if (given) *given = true;
  };
  return sub->add_option_function<std::string>(name, parse, help)
      ->check(CLI::Validator(
          [](std::string& s) -> std::string {
            bool digits = !s.empty() && s.size() <= 20;
            for (char c : s) digits = digits && c >= '0' && c <= '9';
            errno = 0;
            if (digits) std::strtoull(s.c_str(), nullptr, 10);
            if (!digits || errno == ERANGE)
              return fmt::format("'{}' is not a seed (a whole number from 0 to {}; leave it out for a random one)", s,
                                 UINT64_MAX);
            return {};
          },
          "UINT64"));
}

CLI::Option* add_threads_option(CLI::App* sub, int& threads) {
  return sub->add_option("-t,--threads", threads, "CPU threads (default: all the CPUs this process may use)")
      ->check(whole_in(0, 1 << 20));
}

int threads_to_run(int requested) {
  const int n = usable_threads(requested);
  if (requested > n)
    fmt::print(stderr, "note: --threads {}: this process may use {} CPUs; running {} threads\n", requested,
               available_cpus(), n);
  return n;
}

CLI::Option* add_step_tokens_option(CLI::App* sub, int& tokens) {
  return sub->add_option("--max-step-tokens", tokens,
                         "Tokens one engine step may take, decode rows first, then prompt chunks (default 2048 on CUDA, 512 "
                         "on the CPU, or the sequences at once when more)")
      ->check(whole_in(1, 1 << 16));
}

int step_tokens_to_run(int requested, int parallel) {
  if (requested && requested < parallel)
    fail("--max-step-tokens {} is below the {} sequences at once (--parallel): every running sequence needs its row in "
         "each step",
         requested, parallel);
  return requested;  // (0: the engine's choice, the backend's budget or the sequences at once when more)
}

}  // namespace lamina::cli
