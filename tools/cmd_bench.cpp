// lamina bench: a llama-bench-style table. pp<N>: one forward pass over N prompt tokens from an
// empty cache; tg<N>: N single-token decode steps from an empty cache (as llama-bench); each
// test runs -r times after one warm-up, and the table gives mean ± sd of tokens per second
// (--median: the median ± the median absolute deviation, which one slow repetition cannot move:
// what an A/B of two builds compares).
// --pg P,N: a prompt of P tokens followed by N generated ones, timed together (llama-bench's -pg).
// Generated tokens are sampled greedily where the backend samples (on the GPU: one id per step).
// --profile: after the table, the per-op breakdown of one more run of each test.
// --parallel N1,N2,...: many sequences at once through the batching engine instead
// (bench_parallel.cpp), with -p / -n per request, --prefix shared prompt tokens and --kv-block
// positions per KV block.
#include "bench_parallel.h"
#include "cli_checks.h"
#include "commands.h"
#include "core/error.h"
#include "model/sampler.h"
#include "session_args.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>

namespace lamina::cli {
namespace {

struct BenchArgs {
  SessionArgs s;
  int n_prompt = 512, n_gen = 128, reps = 5;
  bool median = false;
  std::string pg;  // "P,N"
  std::string parallel;  // "N1,N2,..."
  int prefix = 0;
  bool prefix_cache = true;
  bool window_pool = true;
  int waves = 2;
  double ramp_s = 0;
  int kv_block = 16;
  int max_step_tokens = 0;  // 0: step_tokens_to_run's choice
  float temperature = 0.f;
  bool device_sampling = true;
};

using Clock = std::chrono::steady_clock;

std::vector<int32_t> random_tokens(size_t n, size_t n_vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = int32_t(rng() % n_vocab);
  return t;
}

// "centre ± spread" of the repetitions' tokens per second: mean ± sd, or median ± MAD.
std::pair<double, double> centre_spread(const std::vector<double>& tps, bool median) {
  if (median) {
    const double m = percentile(tps, 0.5);
    std::vector<double> dev;
    for (double v : tps) dev.push_back(std::abs(v - m));
    return {m, percentile(dev, 0.5)};
  }
  double mean = 0, var = 0;
  for (double v : tps) mean += v / double(tps.size());
  for (double v : tps) var += (v - mean) * (v - mean) / double(std::max<size_t>(1, tps.size() - 1));
  return {mean, std::sqrt(var)};
}

double time_prompt(Session& s, const std::vector<int32_t>& toks) {
  s.reset();
  const auto t0 = Clock::now();
  s.eval(toks);
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// n decode steps after the history the session already holds.
void generate(Session& s, int n, size_t n_vocab) {
  SamplerParams greedy;
  greedy.temperature = 0;
  Sampler sampler(greedy);
  int32_t t = int32_t(n_vocab / 2);
  for (int i = 0; i < n; ++i) t = s.eval_sample(std::span<const int32_t>(&t, 1), sampler, i + 1 < n);
}

double time_gen(Session& s, int n, size_t n_vocab) {
  s.reset();
  const auto t0 = Clock::now();
  generate(s, n, n_vocab);
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double time_prompt_gen(Session& s, const std::vector<int32_t>& toks, int n, size_t n_vocab) {
  s.reset();
  const auto t0 = Clock::now();
  s.eval(toks);
  generate(s, n, n_vocab);
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

void run_parallel(const BenchArgs& a) {
  ParallelBenchSpec spec;
  spec.parallel = parse_parallel(a.parallel);
  spec.n_prompt = a.n_prompt, spec.n_gen = a.n_gen, spec.prefix = a.prefix, spec.block_tokens = a.kv_block;
  spec.prefix_cache = a.prefix_cache;
  spec.window_pool = a.window_pool;
  spec.waves = a.waves;
  spec.ramp_s = a.ramp_s;
  spec.temperature = a.temperature, spec.device_sampling = a.device_sampling;
  if (spec.n_prompt < 1 || spec.n_gen < 1) fail("--parallel wants -p and -n of at least 1");
  if (spec.prefix > spec.n_prompt) fail("--prefix {} is longer than the prompt of {} tokens (-p)", spec.prefix, spec.n_prompt);
  spec.max_step_tokens = step_tokens_to_run(a.max_step_tokens, *std::max_element(spec.parallel.begin(), spec.parallel.end()));
  SessionOptions o = a.s.resolve();
  // The cache: every sequence of the widest row at full length, in whole blocks, and one more.
  const int bt = spec.block_tokens;
  if (o.n_ctx == 0) o.n_ctx = *std::max_element(spec.parallel.begin(), spec.parallel.end()) * ((spec.n_prompt + spec.n_gen + bt - 1) / bt + 1) * bt;
  o.n_batch = 512;
  Session sess(o);
  const auto t0 = Clock::now();
  run_parallel_bench(sess, spec);
  // --profile: the per-op GPU time of the whole run, beside its wall time (the rest is the host's)
  if (o.profile)
    fmt::print("\nall runs ({:.2f} ms wall):\n{}", std::chrono::duration<double>(Clock::now() - t0).count() * 1e3,
               sess.backend().profile_report());
}

// --pg P,N: two whole numbers from 1 to kPgMax, digits only (no sign, spaces or trailing text;
// P + N cannot overflow the context's int).
constexpr int kPgMax = 1 << 24;
bool parse_pg(const std::string& s, int& p, int& n) {
  const size_t comma = s.find(',');
  auto one = [](const std::string& t, int& v) {
    const auto digit = [](char ch) { return ch >= '0' && ch <= '9'; };
    if (t.empty() || t.size() > 8 || !std::all_of(t.begin(), t.end(), digit)) return false;
    v = std::stoi(t);
    return v >= 1 && v <= kPgMax;
  };
  return comma != std::string::npos && one(s.substr(0, comma), p) && one(s.substr(comma + 1), n);
}

void run_bench(const BenchArgs& a) {
  if (!a.parallel.empty()) return run_parallel(a);
  SessionOptions o = a.s.resolve();
  int pg_p = 0, pg_n = 0;
  if (!a.pg.empty() && !parse_pg(a.pg, pg_p, pg_n))
    fail("--pg wants two positive numbers 'P,N' (digits, at most {}), got '{}'", kPgMax, a.pg);
  if (o.n_ctx == 0) o.n_ctx = std::max({a.n_prompt, a.n_gen, pg_p + pg_n}) + 16;
  o.n_batch = std::max(o.n_batch, std::max(a.n_prompt, pg_p));
  const bool profile = o.profile;
  o.profile = false;  // timed runs without per-op events; profiled runs after the table
  Session sess(o);
  const ModelConfig& c = sess.config();
  uint64_t params = 0;
  for (const auto& t : sess.file().tensors()) params += uint64_t(t.nelements());
  const double gib = double(sess.file().file_size()) / double(1ull << 30);
  const std::string model = fmt::format("{} {}", c.arch, c.name.empty() ? "" : c.name);
  fmt::print("| {:<34} | {:>10} | {:>8} | {:<28} | {:>8} | {:>18} |\n", "model", "size", "params", "backend", "test",
             a.median ? "t/s (median ± MAD)" : "t/s");
  fmt::print("| {:-<34} | {:->10} | {:->8} | {:-<28} | {:->8} | {:->18} |\n", "", "", "", "", "", "");
  std::vector<std::pair<std::string, std::function<double()>>> profiled;
  auto row = [&](const std::string& test, int n, auto fn) {
    profiled.emplace_back(test, fn);
    fn();  // warm-up
    std::vector<double> tps;
    for (int r = 0; r < a.reps; ++r) tps.push_back(double(n) / fn());
    const auto [centre, spread] = centre_spread(tps, a.median);
    fmt::print("| {:<34.34} | {:>6.2f} GiB | {:>6.2f} M | {:<28.28} | {:>8} | {:>9.2f} ± {:>6.2f} |\n", model, gib,
               double(params) / 1e6, sess.backend_name(), test, centre, spread);
    std::fflush(stdout);
  };
  // token lists outlive the rows: --profile runs each test again after the table
  const auto toks = random_tokens(size_t(a.n_prompt), c.n_vocab, 1);
  const auto pg_toks = random_tokens(size_t(pg_p), c.n_vocab, 2);
  if (a.n_prompt > 0) {
    row(fmt::format("pp{}", a.n_prompt), a.n_prompt, [&] { return time_prompt(sess, toks); });
  }
  if (a.n_gen > 0) row(fmt::format("tg{}", a.n_gen), a.n_gen, [&] { return time_gen(sess, a.n_gen, c.n_vocab); });
  if (pg_p > 0) {
    row(fmt::format("pp{}+tg{}", pg_p, pg_n), pg_p + pg_n, [&] { return time_prompt_gen(sess, pg_toks, pg_n, c.n_vocab); });
  }
  print_memory_summary(sess);
  if (!profile) return;
  sess.backend().set_profiling(true);
  for (auto& [test, fn] : profiled) {
    sess.backend().profile_reset();
    const double sec = fn();
    fmt::print("\n{} ({:.2f} ms wall):\n{}", test, sec * 1e3, sess.backend().profile_report());
  }
  sess.backend().set_profiling(false);
}

}  // namespace

Run add_bench(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  auto* sub = app.add_subcommand("bench", "Measure prompt and generation speed (llama-bench style)");
  add_session_options(sub, a->s);
  sub->add_option("-p,--n-prompt", a->n_prompt, "Prompt tokens (0: skip)")->check(whole_in(0, 1 << 16));
  sub->add_option("-n,--n-gen", a->n_gen, "Generated tokens (0: skip)")->check(whole_in(0, 1 << 16));
  sub->add_option("-r,--repetitions", a->reps, "Repetitions per test")->check(whole_in(1, 1000));
  sub->add_flag("--median", a->median, "Give the median ± the median absolute deviation of the repetitions, not mean ± sd");
  sub->add_option("--pg", a->pg, "Prompt then generation, timed together: P,N (e.g. 4096,128)");
  sub->add_option("--parallel", a->parallel,
                  "Sequences at once through the batching engine, closed loop: N1,N2,... (each request -p prompt and -n generated tokens)");
  sub->add_option("--prefix", a->prefix, "With --parallel: leading prompt tokens all requests share")->check(whole_in(0, 1 << 16));
  sub->add_option("--waves", a->waves,
                  "With --parallel: requests per row as a multiple of its sequence count (default 2; more for a "
                  "steadier state past the first wave's start)")
      ->check(whole_in(1, 1000));
  sub->add_option("--ramp", a->ramp_s,
                  "With --parallel: seconds over which each row's first requests start, evenly spaced (default 0: "
                  "all at once; requests that start together finish together and return as bursts)")
      ->check(finite_in(0, 3600));
  sub->add_flag("!--no-prefix-cache", a->prefix_cache,
                "With --parallel: compute every prompt whole (no KV blocks shared with earlier prompts)");
  sub->add_flag("!--no-window-pool", a->window_pool,
                "With --parallel: the sliding-window layers keep every row, in the other layers' blocks (no pool of "
                "their own)");
  sub->add_option("--temp", a->temperature,
                  "With --parallel: the requests' temperature (default 0: greedy; else seeded draws with top-k 40, "
                  "top-p 0.95, min-p 0.05)")
      ->check(finite_in(0, 100));
  sub->add_flag("!--no-device-sampling", a->device_sampling,
                "With --parallel: draw every sampled token on the host from its logits row read back (for A/B runs)");
  sub->add_option("--kv-block", a->kv_block, "With --parallel: positions per KV block (default 16)")->check(whole_in(1, 4096));
  add_step_tokens_option(sub, a->max_step_tokens);
  return [a] { run_bench(*a); };
}

}  // namespace lamina::cli
