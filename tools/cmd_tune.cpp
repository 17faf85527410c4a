// lamina tune -m MODEL: runs the model on the GPU once per pass size — `--batch` rows (GEMVs; a
// decode step for 1) and passes of `--prompt` rows (GEMMs; default 16, 32, 64, 128 — the buckets
// the batching engine's steps take, kernels::gemm_choice — and 512, a prompt) — with the CUDA
// backend collecting the GEMV and GEMM problems its step plans launch, then tunes each of those
// problems into the tune cache. Needs no cuBLAS: it ranks lamina's own variants (kbench, a
// developer build, compares them with cuBLAS).
#include "cli_checks.h"
#include "commands.h"
#include "core/error.h"
#include "tune_shapes.h"

#include <fmt/format.h>

#include <sstream>

#if defined(LAMINA_HAVE_CUDA)
#include "backend/cuda/cuda_backend.h"
#include "engine/session.h"
#include "kernels/autotune/autotune.h"
#include "kernels/gemm/gemm.h"
#include "kernels/gemv/gemv_tune.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <set>
#include <tuple>
#endif

namespace lamina::cli {

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string t;
  while (std::getline(ss, t, ',')) if (!t.empty()) out.push_back(t);
  return out;
}

std::vector<int64_t> parse_whole_list(const std::string& s, int64_t lo, int64_t hi, const std::string& what) {
  std::vector<int64_t> v;
  for (const std::string& item : split_list(s)) {
    size_t used = 0;
    int64_t x = 0;
    try {
      x = std::stoll(item, &used);
    } catch (...) {
      used = 0;
    }
    if (used != item.size() || x < lo || x > hi) fail("{} '{}': a whole number from {} to {}", what, item, lo, hi);
    v.push_back(x);
  }
  return v;
}

#if defined(LAMINA_HAVE_CUDA)
// Placeholder addresses that ask gemv_time_variants (which allocates the real buffers) for the
// shape as the CUDA backend runs it: the gate/up pair, x given as int8 blocks (after an RMSNorm
// or the decode attention), y's int8 copy made in the epilogue (decode's Wo, gate/up and W_down
// make their consumer's x8).
void mark_inputs(kernels::GemvProblem& p, bool pair, bool with_x8, bool with_y8) {
  static const int up_marker = 0, x8_marker = 0;
  static int y8_marker = 0;
  static unsigned y8_count_marker = 0;
  p.w_up = pair ? &up_marker : nullptr;
  p.x8 = with_x8 ? &x8_marker : nullptr;
  p.y8 = with_y8 ? &y8_marker : nullptr;
  p.y8_count = with_y8 ? &y8_count_marker : nullptr;
}

#endif

namespace {

struct TuneArgs {
  std::string model;
  std::string batches = "1,2,4,8";
  std::string prompts = "16,32,64,128,512";  // GEMM rows per pass to tune for (engine steps, prompts)
  std::string skip;             // GEMV variants or configs left out (gemv_tune)
  int tensor_parallel = 1;      // the shapes of one rank of so many (every rank's but the vocabulary's)
  int gemv_max_rows = 0;        // the passes' CudaOptions::gemv_max_rows (0: its default)
};

#if defined(LAMINA_HAVE_CUDA)
using namespace lamina::kernels;

void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail("{}: {}", what, cudaGetErrorString(e));
}

// The model's passes on the GPU, each run once with the backend collecting the problems its
// step plans launch: `batches` rows (a decode step for 1) and prompt passes of `prompts` rows.
CudaBackend::MatmulProblems run_passes(const std::string& model, const std::vector<int64_t>& batches,
                                       const std::vector<int64_t>& prompts, int tensor_parallel, int gemv_max_rows) {
  int64_t longest = 8;
  for (int64_t r : batches) longest = std::max(longest, r);
  for (int64_t r : prompts) longest = std::max(longest, r);
  SessionOptions o;
  o.model_path = model;
  o.device = "cuda";
  o.n_ctx = int(longest) + 8;
  o.n_batch = int(longest);
  o.cuda.graphs = false;  // every pass through the plan (a replayed graph launches no op)
  o.tensor_parallel = tensor_parallel;  // (rank 0's backend collects: every rank has its shapes)
  if (gemv_max_rows > 0) o.cuda.gemv_max_rows = gemv_max_rows;  // the passes of that many rows as GEMVs
  Session s(o);
  auto* cuda = dynamic_cast<CudaBackend*>(&s.backend());
  if (!cuda) fail("tune: the model did not load on the CUDA backend");
  CudaBackend::MatmulProblems seen;
  cuda->collect_matmul_problems(&seen);
  for (const auto* rows : {&batches, &prompts})
    for (int64_t r : *rows) {
      s.reset();
      s.eval(std::vector<int32_t>(size_t(r), 1));
    }
  cuda->collect_matmul_problems(nullptr);
  return seen;
}

std::vector<int64_t> rows_list(const std::string& s, const char* opt, int64_t lo, int64_t hi) {
  std::vector<int64_t> v;
  for (const auto& x : split_list(s)) {
    int64_t r = 0;
    try {
      r = std::stoll(x);
    } catch (...) {
      fail("{} {}: not a number", opt, x);
    }
    if (r < lo || r > hi) fail("{} {}: from {} to {}", opt, x, lo, hi);
    v.push_back(r);
  }
  return v;
}

void run_tune(const TuneArgs& a) {
  const auto batches = rows_list(a.batches, "--batch", 1, kGemvMaxBatch);
  const auto prompts = rows_list(a.prompts, "--prompt", kGemvMaxBatch + 1, 65536);
  const CudaBackend::MatmulProblems seen = run_passes(a.model, batches, prompts, a.tensor_parallel, a.gemv_max_rows);
  cudaStream_t s;
  cuda_check(cudaStreamCreate(&s), "no CUDA device available");
  // GEMVs by what their tune key holds (the shape, x as int8 blocks, y's blocks made in the
  // epilogue; a pending norm's GEMV is tuned as one with x8, where gemv() looks it up). y8 is
  // timed for one repacked row only, as decode makes it; others fall back to the shape without.
  std::set<std::tuple<GgmlType, WeightLayout, int64_t, int64_t, int, bool, bool, bool>> gemvs;
  for (const GemvProblem& p : seen.gemv) {
    const bool y8 = p.y8 && p.y8_count && p.batch == 1 && p.n % 32 == 0 && p.layout == WeightLayout::Repacked;
    gemvs.insert({p.wtype, p.layout, p.n, p.k, p.batch, p.w_up != nullptr, p.x8 || p.norm_w, y8});
  }
  for (const auto& [type, layout, n, k, batch, pair, with_x8, with_y8] : gemvs) {
    GemvProblem p;
    p.wtype = type, p.layout = layout, p.n = n, p.k = k, p.batch = batch;
    mark_inputs(p, pair, with_x8, with_y8);
    if (auto best = gemv_tune(p, s, a.skip))
      fmt::print("{:<6} {:>6} x {:<6} b{} {:<8}{}{}{}: {} ({}) {:.2f} µs\n", type_name(type), n, k, batch,
                 layout == WeightLayout::Repacked ? "repacked" : "gguf", pair ? " gate/up" : "", with_x8 ? " x8" : "",
                 with_y8 ? " y8" : "", best->variant->name, best->config.str(), best->best_us());
  }
  TuneCache::get("gemv").save();
  fmt::print("saved to {}\n", tune_cache_path("gemv"));
  // GEMMs by their tune key: types, layout, shape, and the GLU of a gated one (gate/up of many
  // rows; its C is the down projection's f16 input).
  static const int marker = 0;  // (a gated problem's b_up: gemm_time_variants allocates its own)
  enum class Gate { None, Silu, Gelu };
  std::set<std::tuple<GgmlType, GgmlType, GgmlType, WeightLayout, int64_t, int64_t, int64_t, Gate>> gemms;
  for (const GemmProblem& p : seen.gemm)
    gemms.insert({p.a_type, p.b_type, p.c_type, p.b_layout, p.m, p.n, p.k,
                  !p.b_up ? Gate::None : p.gelu ? Gate::Gelu : Gate::Silu});
  for (const auto& [a_type, b_type, c_type, layout, m, n, k, gate] : gemms) {
    GemmProblem p;
    p.a_type = a_type, p.b_type = b_type, p.b_layout = layout, p.c_type = c_type;
    p.m = m, p.n = n, p.k = k, p.lda = k, p.ldb = k, p.ldc = n;
    if (gate != Gate::None) p.b_up = &marker, p.gelu = gate == Gate::Gelu;
    // gemm_time_variants records the fastest production variant; the same one is printed
    std::vector<GemmTiming> t = gemm_time_variants(p, true, true, s);
    std::erase_if(t, [](const GemmTiming& x) { return x.variant->teaching; });
    if (t.empty()) continue;
    const auto best = *std::min_element(t.begin(), t.end(), [](auto& x, auto& y) { return x.us < y.us; });
    fmt::print("{:<6} {:>5} x {:>6} x {:<6} gemm{}: {} ({}) {:.2f} µs\n", type_name(b_type), m, n, k,
               gate == Gate::None ? "" : " gate/up", best.variant->name, best.config.str(), best.us);
  }
  if (!gemms.empty()) {
    TuneCache::get("gemm").save();
    fmt::print("saved to {}\n", tune_cache_path("gemm"));
  }
  cudaStreamDestroy(s);
}
#else
void run_tune(const TuneArgs&) { fail("this lamina was built without CUDA: tune needs an NVIDIA GPU build"); }
#endif

}  // namespace

Run add_tune(CLI::App& app) {
  auto a = std::make_shared<TuneArgs>();
  auto* sub = app.add_subcommand("tune", "Autotune a model's GEMV and prompt GEMM shapes on this GPU (writes the tune cache)");
  sub->add_option("-m,--model", a->model, "GGUF model")->required();
  sub->add_option("--batch", a->batches, "Comma-separated batch sizes (1..8)");
  sub->add_option("--prompt", a->prompts, "Comma-separated rows per pass to tune the GEMMs for (default 16,32,64,128,512; '' for none)");
  sub->add_option("--tensor-parallel,--tp", a->tensor_parallel, "Tune the shapes of one rank of N GPUs (--tensor-parallel)")
      ->check(CLI::Range(1, 64));
  sub->add_option("--gemv-max-rows", a->gemv_max_rows,
                  "Tune the GEMVs of passes up to this many rows (as run, chat, bench and serve take --gemv-max-rows)")
      ->check(whole_in(1, 8));
  sub->add_option("--skip", a->skip, "GEMV variants or configs the tuner leaves out, 'a;b(rows=2,warps=16,unroll=4)' (A/B of a rung)");
  return [a] { run_tune(*a); };
}

}  // namespace lamina::cli
