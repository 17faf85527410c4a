// lamina kbench cpu: the CPU backend's matmuls against the machine's own limits, measured in
// the same run (the CPU side of the GPU's roofline view):
//   - read bandwidth: every thread summing its share of a 1 GiB buffer (past the caches);
//   - each weight type's row-dot rate in cache: one row of K against one token, L1-resident,
//     repeated (the kernel's compute ceiling, in int8 or f32 multiply-adds per second);
//   - CpuBackend::matmul of an N x K weight at each token count: µs (median), the weight bytes
//     read per second and their % of the read bandwidth (decode is a pass over the weights), and
//     multiply-adds per second against the row-dot rate times the threads (prompts are compute).
// Weights are random, quantised to the type; copies rotate so that a call rarely finds its
// matrix in cache from the call before (up to 256 MiB of copies).
#include "cmd_kbench_cpu.h"

#include "backend/cpu/cpu_backend.h"
#include "cli_checks.h"
#include "backend/cpu/vec_dot.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "format/ggml_type.h"
#include "format/gguf.h"
#include "format/quant.h"
#include "tune_shapes.h"

#include <unistd.h>
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <vector>

namespace lamina::cli {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

template <class F>
double median_seconds(int reps, F&& f) {
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    f(r);
    t.push_back(seconds_since(t0));
  }
  std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
  return t[t.size() / 2];
}

// GB/s of all threads reading a 1 GiB buffer (64-bit sums, so the loads are not optimised away).
double read_bandwidth(ThreadPool& pool, int reps) {
  const size_t words = (size_t(1) << 30) / 8;
  std::vector<uint64_t> buf(words);
  pool.parallel_for(int64_t(words), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) buf[size_t(i)] = uint64_t(i) * 0x9E3779B97F4A7C15ull;
  }, 1 << 16);
  std::atomic<uint64_t> sink{0};
  const double s = median_seconds(reps, [&](int) {
    pool.parallel_for(int64_t(words), [&](int64_t b, int64_t e) {
      uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
      for (int64_t i = b; i + 3 < e; i += 4) a0 += buf[size_t(i)], a1 += buf[size_t(i + 1)], a2 += buf[size_t(i + 2)], a3 += buf[size_t(i + 3)];
      sink.fetch_xor(a0 ^ a1 ^ a2 ^ a3, std::memory_order_relaxed);
    }, 1 << 20);
  });
  return double(words * 8) / s / 1e9;
}

std::vector<float> random_floats(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// Multiply-adds per second of the type's row dot on one thread, L1-resident.
double dot_rate(GgmlType t, int64_t k, CpuIsa isa, int reps, std::mt19937& rng) {
  const VecDot vd = vec_dot_for(t, isa);
  if (!vd.fn) return 0;
  const auto w = random_floats(size_t(k), rng), x = random_floats(size_t(k), rng);
  std::vector<uint8_t> wq(row_bytes(t, k));
  quantize_row(t, w.data(), wq.data(), k);
  std::vector<uint8_t> xq(vd.act == ActType::F32 ? size_t(k) * 4 : act_row_bytes(vd.act, k));
  if (vd.act == ActType::F32) std::memcpy(xq.data(), x.data(), xq.size());
  else quantize_activations(vd.act, x.data(), xq.data(), k);
  constexpr int kCalls = 20000;
  volatile float sink = 0;
  const double s = median_seconds(reps, [&](int) {
    float acc = 0;
    for (int i = 0; i < kCalls; ++i) acc += vd.fn(k, wq.data(), xq.data());
    sink = acc;
  });
  return double(kCalls) * double(k) / s;
}

struct Shape {
  int64_t n, k;
};

Shape parse_shape(const std::string& s) {
  const auto x = s.find('x');
  try {
    if (x != std::string::npos) {
      size_t used = 0;
      const int64_t n = std::stoll(s.substr(0, x), &used);
      const std::string rest = s.substr(x + 1);
      size_t used2 = 0;
      const int64_t k = std::stoll(rest, &used2);
      if (used == x && used2 == rest.size() && n > 0 && k > 0 && k % 32 == 0 && n <= (1 << 20) && k <= (1 << 20))
        return {n, k};
    }
  } catch (const std::exception&) {
  }
  fail("kbench cpu: shape '{}' is not NxK with K a multiple of 32 (e.g. 4096x4096)", s);
}

}  // namespace

void run_kbench_cpu(const KbenchCpuArgs& a) {
  const std::optional<CpuIsa> isa = parse_isa(a.isa);
  if (!isa) fail("kbench cpu: unknown CPU kernel set '{}' (auto, scalar, avx2, avx-vnni, avx512 or amx)", a.isa);
  if (!cpu_runs(*isa))
    fail("kbench cpu: --cpu-isa {}: this CPU does not run it (its best: {})", a.isa, isa_name(detect_isa()));
  std::vector<Shape> shapes;
  for (const auto& s : split_list(a.shapes.empty() ? "1536x576,576x1536,4096x4096,11008x4096" : a.shapes))
    shapes.push_back(parse_shape(s));
  if (shapes.empty()) fail("kbench cpu: --shapes '{}' names no shape", a.shapes);
  std::vector<GgmlType> types;
  for (const auto& s : split_list(a.types.empty() ? "f16,q8_0,q4_0,q4_1,q4_K,q6_K" : a.types)) {
    const std::optional<GgmlType> t = parse_type(s);
    if (!t || !can_quantize(*t)) fail("kbench cpu: weight type '{}' is not one the CPU backend can quantise", s);
    types.push_back(*t);
  }
  if (types.empty()) fail("kbench cpu: --types '{}' names no type", a.types);
  std::vector<int64_t> tokens;
  for (const auto& s : split_list(a.tokens.empty() ? "1,128" : a.tokens)) {
    const long long v = std::atoll(s.c_str());
    if (v < 1 || v > 4096 || std::to_string(v) != s) fail("kbench cpu: token count '{}' is not 1..4096", s);
    tokens.push_back(v);
  }
  if (tokens.empty()) fail("kbench cpu: --tokens '{}' names no count", a.tokens);
  // A shape's weights are held quantised, then loaded by the backend (its own copy): refuse what
  // would not fit in the machine's memory before allocating any of it.
  const double phys = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE));
  for (GgmlType t : types)
    for (const Shape& sh : shapes)
      if (sh.k % traits(t).block_elems == 0 && 2.0 * double(row_bytes(t, sh.k)) * double(sh.n) > 0.8 * phys)
        fail("kbench cpu: {}x{} in {} needs {:.1f} GiB of weights twice over; this machine has {:.1f} GiB", sh.n, sh.k,
             type_name(t), double(row_bytes(t, sh.k)) * double(sh.n) / double(1 << 30), phys / double(1 << 30));
  const int threads = usable_threads(a.threads);
  CpuBackend be(threads, false, *isa);
  ThreadPool pool(threads);
  std::mt19937 rng(7);
  const double bw = read_bandwidth(pool, a.reps);
  fmt::print("kbench cpu: {} threads, kernels {}; read bandwidth {:.1f} GB/s (1 GiB buffer, all threads)\n", threads,
             isa_name(*isa), bw);
  fmt::print("| type | NxK | tokens | µs | weight GB/s | % read BW | GMAC/s | % of {} x dot rate |\n", threads);
  fmt::print("|---|---|---|---|---|---|---|---|\n");
  for (GgmlType t : types) {
    const double rate = dot_rate(t, 4096, *isa, a.reps, rng);
    fmt::print("| {} row dot in cache | 1x4096 | 1 | | | | {:.2f} | (one thread) |\n", type_name(t), rate / 1e9);
    for (const Shape& sh : shapes) {
      if (sh.k % traits(t).block_elems) {
        fmt::print("| {} | {}x{} | | K is not a whole number of {}-element blocks | | | | |\n", type_name(t), sh.n, sh.k,
                   traits(t).block_elems);
        continue;
      }
      const size_t bytes = row_bytes(t, sh.k) * size_t(sh.n);
      const int copies = int(std::clamp<size_t>((size_t(256) << 20) / std::max<size_t>(bytes, 1), 1, 16));
      std::vector<std::vector<uint8_t>> data(static_cast<size_t>(copies), std::vector<uint8_t>(bytes));
      {
        const auto w = random_floats(size_t(sh.k), rng);
        for (auto& d : data)
          for (int64_t r = 0; r < sh.n; ++r) quantize_row(t, w.data(), d.data() + size_t(r) * row_bytes(t, sh.k), sh.k);
      }
      std::vector<Weight> ws;
      for (auto& d : data) {
        GgufTensor g;
        g.name = "w", g.n_dims = 2, g.ne[0] = sh.k, g.ne[1] = sh.n, g.type = t, g.nbytes = bytes, g.data = d.data();
        ws.push_back(be.load_weight(g, WeightUse::Matmul));
      }
      for (int64_t T : tokens) {
        be.reset_scratch();
        Tensor x = be.alloc(T, sh.k), y = be.alloc(T, sh.n);
        const auto xs = random_floats(size_t(T * sh.k), rng);
        std::copy(xs.begin(), xs.end(), x.data);
        be.matmul(ws[0], x, y);  // warm-up
        const double s = median_seconds(a.reps, [&](int r) { be.matmul(ws[size_t(r) % ws.size()], x, y); });
        const double macs = double(T) * double(sh.n) * double(sh.k);
        fmt::print("| {} | {}x{} | {} | {:.1f} | {:.1f} | {:.0f} % | {:.2f} | {:.0f} % |\n", type_name(t), sh.n, sh.k, T,
                   s * 1e6, double(bytes) / s / 1e9, 100.0 * double(bytes) / s / 1e9 / bw, macs / s / 1e9,
                   rate > 0 ? 100.0 * macs / s / (rate * threads) : 0.0);
        std::fflush(stdout);
      }
    }
  }
}

void add_kbench_cpu_options(CLI::App* sub, KbenchCpuArgs& a) {
  sub->add_option("-t,--threads", a.threads, "cpu: threads (default: every CPU this process may use)")->check(whole_in(0, 4096));
  sub->add_option("--tokens", a.tokens, "cpu: comma-separated token counts per matmul (default 1,128)");
  sub->add_option("--cpu-isa", a.isa, "cpu: kernel set: auto, scalar, avx2, avx-vnni, avx512, amx")
      ->check(CLI::IsMember({"auto", "scalar", "avx2", "avx-vnni", "avx512", "amx"}));
}

}  // namespace lamina::cli
