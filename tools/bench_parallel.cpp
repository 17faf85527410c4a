// lamina bench --parallel N1,N2,...: many sequences at once through the batching engine, closed
// loop (llama-batched-bench's table with latencies): N requests run concurrently, each finished
// one replaced at once, until --waves x N (default 2N) have finished; with --ramp S the first N
// start evenly spread over S seconds, not at once. Each request is a prompt of -p random tokens (the
// first --prefix of them shared by all) and -n greedy tokens. Reported per N: aggregate
// generated tokens per second over the run, the mean per-sequence decode rate, time to first
// token and inter-token latency (p50 / p99), the most KV blocks in use, and the KV waste: the
// used blocks' positions that hold no token (each sequence's last block is part full), as a
// share of the used blocks' positions, averaged over the engine's steps.
#include "bench_parallel.h"

#include "core/error.h"
#include "core/units.h"
#include "engine/engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <random>
#include <thread>

namespace lamina::cli {
double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(p * double(v.size() - 1) + 0.5))];
}

namespace {

using Clock = std::chrono::steady_clock;

struct Timing {
  Clock::time_point submitted, last;
  int tokens = 0;
  double first_s = 0;  // time to first token
};

}  // namespace

std::vector<int> parse_parallel(const std::string& list) {
  std::vector<int> out;
  size_t i = 0;
  while (i <= list.size()) {
    const size_t j = std::min(list.find(',', i), list.size());
    const std::string item = list.substr(i, j - i);
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end || v < 1 || v > 4096) fail("--parallel wants sequence counts from 1 to 4096 like '1,16,64', got '{}'", list);
    out.push_back(int(v));
    i = j + 1;
  }
  return out;
}

void run_parallel_bench(Session& sess, const ParallelBenchSpec& spec) {
  const ModelConfig& c = sess.config();
  EngineOptions eo;
  eo.block_tokens = spec.block_tokens;
  eo.prefix_cache = spec.prefix_cache;
  eo.window_pool = spec.window_pool;
  eo.device_sampling = spec.device_sampling;
  eo.schedule.max_step_tokens = spec.max_step_tokens;
  // (the most sequences a row runs at once: a window pool is sized for them)
  eo.schedule.max_running = *std::max_element(spec.parallel.begin(), spec.parallel.end());
  Engine engine(sess, eo);
  std::mt19937_64 rng(11);
  std::vector<int32_t> prefix(size_t(spec.prefix));
  for (auto& t : prefix) t = int32_t(rng() % c.n_vocab);
  fmt::print("| {:>8} | {:>8} | {:>10} | {:>10} | {:>12} | {:>12} | {:>11} | {:>11} | {:>9} | {:>10} |\n", "parallel",
             "requests", "gen t/s", "seq t/s", "TTFT p50 ms", "TTFT p99 ms", "ITL p50 ms", "ITL p99 ms", "KV blocks",
             "KV waste %");
  fmt::print("| {:->8} | {:->8} | {:->10} | {:->10} | {:->12} | {:->12} | {:->11} | {:->11} | {:->9} | {:->10} |\n", "", "", "", "",
             "", "", "", "", "", "");
  for (int n_par : spec.parallel) {
    const int total = spec.waves * n_par;
    std::map<int64_t, Timing> timing;
    std::vector<double> ttft, itl, seq_rate;
    int submitted = 0, finished = 0, max_blocks = 0;
    int started = 0;  // of the row's first n_par requests (the ramp's), those submitted
    double waste_sum = 0;  // the KV blocks' positions holding no token, summed over the steps
    int64_t steps = 0;
    int64_t generated = 0;
    std::function<void()> submit_one;
    TokenCallback on_token = [&](const TokenEvent& e) {
      Timing& t = timing[e.id];
      const auto now = Clock::now();
      if (e.token >= 0) {
        if (t.tokens == 0) {
          t.first_s = std::chrono::duration<double>(now - t.submitted).count();
          ttft.push_back(t.first_s * 1e3);
        } else {
          itl.push_back(std::chrono::duration<double>(now - t.last).count() * 1e3);
        }
        t.last = now;
        ++t.tokens;
        ++generated;
      }
      if (e.finish == Finish::None) return;
      if (e.finish == Finish::Error) fail("bench: a request failed: {}", e.error);
      const double decode_s = std::chrono::duration<double>(t.last - t.submitted).count() - t.first_s;
      if (t.tokens > 1 && decode_s > 0) seq_rate.push_back(double(t.tokens - 1) / decode_s);
      ++finished;
      if (submitted + (n_par - started) < total) submit_one();  // (keeping the ramp's requests yet to start)
    };
    submit_one = [&] {
      Request r;
      r.prompt = prefix;
      while (int(r.prompt.size()) < spec.n_prompt) r.prompt.push_back(int32_t(rng() % c.n_vocab));
      r.max_tokens = spec.n_gen;
      r.sampling.temperature = spec.temperature;
      r.sampling.seed = uint64_t(submitted);
      const auto now = Clock::now();
      const int64_t id = engine.submit(std::move(r), on_token);
      timing[id].submitted = now;
      ++submitted;
    };
    const auto t0 = Clock::now();
    // Request i of the first n_par starts at t0 + i * ramp / n_par (all at t0 without a ramp).
    const auto due = [&](int i) {
      return t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(spec.ramp_s * i / n_par));
    };
    const auto start_due = [&] {
      for (const auto now = Clock::now(); started < n_par && due(started) <= now; ++started) submit_one();
    };
    start_due();
    while (finished < total) {
      const bool ran = engine.step();
      start_due();
      if (!ran) {
        if (started == n_par)
          fail("bench: the engine stopped with {} of {} requests unfinished", total - finished, total);
        std::this_thread::sleep_until(due(started));  // idle until the ramp's next request
        start_due();
        continue;
      }
      max_blocks = std::max(max_blocks, engine.kv().used_blocks());
      waste_sum += engine.kv().waste(), ++steps;
    }
    const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
    double seq_mean = 0;
    for (double v : seq_rate) seq_mean += v / double(seq_rate.size());
    fmt::print("| {:>8} | {:>8} | {:>10.2f} | {:>10.2f} | {:>12.1f} | {:>12.1f} | {:>11.2f} | {:>11.2f} | {:>9} | {:>10.2f} |\n",
               n_par, total, double(generated) / wall, seq_mean, percentile(ttft, 0.5), percentile(ttft, 0.99),
               percentile(itl, 0.5), percentile(itl, 0.99), max_blocks, steps ? 100 * waste_sum / double(steps) : 0.0);
    std::fflush(stdout);
  }
  const EngineStats s = engine.stats();
  fmt::print("engine: {} steps of up to {} tokens, {} rows ({} prompt tokens found in the prefix cache), {} preemptions; {} on {}\n",
             s.steps, engine.step_tokens(), s.step_tokens, s.cached_tokens, s.preemptions, c.arch, sess.backend_name());
  const std::string held = format_bytes(sess.backend().kv_cache_bytes());
  if (s.kv_window_blocks > 0)
    fmt::print("KV cache: {} held; the sliding-window layers' pool {} blocks of {} positions (the others' {})\n", held,
               s.kv_window_blocks, engine.kv().block_tokens(), s.kv_blocks);
  else
    fmt::print("KV cache: {} held\n", held);
}

}  // namespace lamina::cli
