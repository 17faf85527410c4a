// Option checks shared by the subcommands: numbers that must be finite and in range (NaN and
// infinities are refused, bounds printed short), whole numbers, seeds over the full 64-bit
// range (a sign or an overflow is refused, never wrapped or saturated), and the thread count.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

namespace lamina::cli {

// A real number in [lo, hi]; NaN and infinities refused.
CLI::Validator finite_in(double lo, double hi);
// A whole number in [lo, hi] (no sign where lo >= 0, no fraction, no overflow).
CLI::Validator whole_in(long long lo, long long hi);
// `name` as a 64-bit seed: 0 .. 2^64-1, digits only. `given` (if any) is set when present.
CLI::Option* add_seed_option(CLI::App* sub, const std::string& name, uint64_t& seed, bool* given,
                             const std::string& help);
// -t/--threads on `sub` into `threads` (0: all the CPUs this process may use).
CLI::Option* add_threads_option(CLI::App* sub, int& threads);
// The thread count a command runs (usable_threads), with a note on stderr when the request
// was more than the CPUs this process may use.
int threads_to_run(int requested);
// --max-step-tokens on `sub` into `tokens` (0, its default: step_tokens_to_run's choice).
CLI::Option* add_step_tokens_option(CLI::App* sub, int& tokens);
// The engine step's token budget for `parallel` sequences at once: `requested`, or unset 0 (the
// engine's choice: Backend::engine_step_tokens, or the sequences at once when more); a budget below
// `parallel` fails in one line (decode rows come first, so the newest sequences would wait).
int step_tokens_to_run(int requested, int parallel);

}  // namespace lamina::cli
