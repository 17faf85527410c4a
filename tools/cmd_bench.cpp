// lamina bench: a llama-bench-style table. pp<N>: one forward pass over N prompt tokens from an
// empty cache; tg<N>: N single-token decode steps from an empty cache (as llama-bench); each
// test runs -r times after one warm-up, and the table gives mean ± sd of tokens per second.
#include "commands.h"
#include "core/error.h"
#include "session_args.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <random>

namespace lamina::cli {
namespace {

struct BenchArgs {
  SessionArgs s;
  int n_prompt = 512, n_gen = 128, reps = 5;
};

using Clock = std::chrono::steady_clock;

std::vector<int32_t> random_tokens(size_t n, size_t n_vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = int32_t(rng() % n_vocab);
  return t;
}

double time_prompt(Session& s, const std::vector<int32_t>& toks) {
  s.reset();
  const auto t0 = Clock::now();
  s.eval(toks);
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double time_gen(Session& s, int n, size_t n_vocab) {
  s.reset();
  int32_t t = int32_t(n_vocab / 2);
  const auto t0 = Clock::now();
  for (int i = 0; i < n; ++i) {
    const auto& logits = s.eval(std::span<const int32_t>(&t, 1));
    t = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

void run_bench(const BenchArgs& a) {
  SessionOptions o = a.s.resolve();
  if (o.n_ctx == 0) o.n_ctx = std::max(a.n_prompt, a.n_gen) + 16;
  o.n_batch = std::max(o.n_batch, a.n_prompt);
  Session sess(o);
  const ModelConfig& c = sess.config();
  uint64_t params = 0;
  for (const auto& t : sess.file().tensors()) params += uint64_t(t.nelements());
  const double gib = double(sess.file().file_size()) / double(1ull << 30);
  const std::string model = fmt::format("{} {}", c.arch, c.name.empty() ? "" : c.name);
  fmt::print("| {:<34} | {:>10} | {:>8} | {:<28} | {:>8} | {:>18} |\n", "model", "size", "params", "backend", "test", "t/s");
  fmt::print("| {:-<34} | {:->10} | {:->8} | {:-<28} | {:->8} | {:->18} |\n", "", "", "", "", "", "");
  auto row = [&](const std::string& test, int n, auto fn) {
    fn();  // warm-up
    std::vector<double> tps;
    for (int r = 0; r < a.reps; ++r) tps.push_back(double(n) / fn());
    double mean = 0, var = 0;
    for (double v : tps) mean += v / double(tps.size());
    for (double v : tps) var += (v - mean) * (v - mean) / double(std::max<size_t>(1, tps.size() - 1));
    fmt::print("| {:<34.34} | {:>6.2f} GiB | {:>6.2f} M | {:<28.28} | {:>8} | {:>9.2f} ± {:>6.2f} |\n", model, gib,
               double(params) / 1e6, sess.backend().name(), test, mean, std::sqrt(var));
    std::fflush(stdout);
  };
  if (a.n_prompt > 0) {
    const auto toks = random_tokens(size_t(a.n_prompt), c.n_vocab, 1);
    row(fmt::format("pp{}", a.n_prompt), a.n_prompt, [&] { return time_prompt(sess, toks); });
  }
  if (a.n_gen > 0) row(fmt::format("tg{}", a.n_gen), a.n_gen, [&] { return time_gen(sess, a.n_gen, c.n_vocab); });
}

}  // namespace

Run add_bench(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  auto* sub = app.add_subcommand("bench", "Measure prompt and generation speed (llama-bench style)");
  add_session_options(sub, a->s);
  sub->add_option("-p,--n-prompt", a->n_prompt, "Prompt tokens (0: skip)")->check(CLI::Range(0, 1 << 16));
  sub->add_option("-n,--n-gen", a->n_gen, "Generated tokens (0: skip)")->check(CLI::Range(0, 1 << 16));
  sub->add_option("-r,--repetitions", a->reps, "Repetitions per test")->check(CLI::Range(1, 1000));
  return [a] { run_bench(*a); };
}

}  // namespace lamina::cli
