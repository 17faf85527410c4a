// lamina tune -m MODEL: tunes the model's matrix shapes for batch 1..8 (GEMV) and for prompt
// passes of --prompt rows (GEMM, default 512) into the tune cache. Needs no cuBLAS: it ranks
// lamina's own variants (kbench, a developer build, compares them with cuBLAS).
#include "cli_checks.h"
#include "commands.h"
#include "core/error.h"
#include "tune_shapes.h"

#include <fmt/format.h>

#include <sstream>

#if defined(LAMINA_HAVE_CUDA)
#include "format/gguf.h"
#include "kernels/autotune/autotune.h"
#include "kernels/gemm/gemm.h"
#include "kernels/gemv/gemv_tune.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <set>
#endif

namespace lamina::cli {

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string t;
  while (std::getline(ss, t, ',')) if (!t.empty()) out.push_back(t);
  return out;
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
  std::string prompts = "512";  // GEMM rows (prompt tokens per pass) to tune for
  std::string skip;             // GEMV variants or configs left out (gemv_tune)
};

#if defined(LAMINA_HAVE_CUDA)
using namespace lamina::kernels;

void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail("{}: {}", what, cudaGetErrorString(e));
}

// The GEMMs a prompt of m rows runs, as the CUDA backend sets them up: A in f16 (bf16 for bf16
// weights, f32 for f32), quantised weights in the layout it loads them in, C in f32.
void tune_prompt_gemms(const std::set<std::tuple<GgmlType, int64_t, int64_t, bool>>& shapes, const std::string& prompts,
                       cudaStream_t s) {
  if (prompts.empty()) return;
  std::set<std::tuple<GgmlType, int64_t, int64_t>> mats;  // the gate/up pair is the gate's shape
  for (const auto& [type, n, k, pair] : shapes) mats.insert({type, n, k});
  for (const auto& ms : split_list(prompts)) {
    const int64_t m = std::stoll(ms);
    if (m <= kGemvMaxBatch) fail("--prompt {}: prompt passes of up to {} rows run GEMVs", m, kGemvMaxBatch);
    for (const auto& [type, n, k] : mats) {
      GemmProblem p;
      p.b_type = type;
      p.a_type = type == GgmlType::F32 ? GgmlType::F32 : type == GgmlType::BF16 ? GgmlType::BF16 : GgmlType::F16;
      p.b_layout = repacked_layout_preferred(type) ? WeightLayout::Repacked : WeightLayout::Gguf;
      p.m = m, p.n = n, p.k = k, p.lda = k, p.ldb = k, p.ldc = n;
      // gemm_time_variants records the fastest production variant; the same one is printed
      std::vector<GemmTiming> t = gemm_time_variants(p, true, true, s);
      std::erase_if(t, [](const GemmTiming& x) { return x.variant->teaching; });
      if (t.empty()) continue;
      const auto best = *std::min_element(t.begin(), t.end(), [](auto& x, auto& y) { return x.us < y.us; });
      fmt::print("{:<6} {:>5} x {:>6} x {:<6} gemm: {} ({}) {:.2f} µs\n", type_name(type), m, n, k, best.variant->name,
                 best.config.str(), best.us);
    }
  }
  TuneCache::get("gemm").save();
  fmt::print("saved to {}\n", tune_cache_path("gemm"));
}

void run_tune(const TuneArgs& a) {
  const GgufFile f = GgufFile::open(a.model);
  cudaStream_t s;
  cuda_check(cudaStreamCreate(&s), "no CUDA device available");
  // (type, n, k, gate/up pair): every matmul weight, plus the shapes the CUDA backend runs:
  // Q/K/V stacked into one matrix, and the gate/up pair with its fused SwiGLU.
  std::set<std::tuple<GgmlType, int64_t, int64_t, bool>> shapes;
  for (const auto& t : f.tensors())
    if (t.n_dims == 2 && t.name.ends_with(".weight") && t.name != "token_embd.weight")
      shapes.insert({t.type, t.ne[1], t.ne[0], false});
  if (const GgufTensor* te = f.find_tensor("token_embd.weight"); te && !f.find_tensor("output.weight"))
    shapes.insert({te->type, te->ne[1], te->ne[0], false});  // tied output
  for (int l = 0; const GgufTensor* q = f.find_tensor("blk." + std::to_string(l) + ".attn_q.weight"); ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    const GgufTensor *k = f.find_tensor(b + "attn_k.weight"), *v = f.find_tensor(b + "attn_v.weight");
    if (k && v && k->type == q->type && v->type == q->type) shapes.insert({q->type, q->ne[1] + k->ne[1] + v->ne[1], q->ne[0], false});
    const GgufTensor *g = f.find_tensor(b + "ffn_gate.weight"), *u = f.find_tensor(b + "ffn_up.weight");
    if (g && u && g->type == u->type) shapes.insert({g->type, g->ne[1], g->ne[0], true});
  }
  // Each shape with x as f32 only, with x also given as int8 blocks, and, for one row with x8,
  // also with y's int8 copy made in the epilogue (mark_inputs).
  for (const auto& [type, n, k, pair] : shapes)
    for (const auto& bs : split_list(a.batches)) {
      for (WeightLayout layout : {WeightLayout::Gguf, WeightLayout::Repacked})
      for (int mode : {0, 1, 2}) {  // x; x8; x8 and y8
        const bool with_x8 = mode > 0, with_y8 = mode == 2;
        if (with_x8 && k % 32) continue;
        GemvProblem p;
        p.wtype = type;
        p.layout = layout;
        p.n = n;
        p.k = k;
        p.batch = std::stoi(bs);
        if (with_y8 && (p.batch != 1 || n % 32 || layout != WeightLayout::Repacked)) continue;
        mark_inputs(p, pair, with_x8, with_y8);
        if (auto best = gemv_tune(p, s, a.skip))
          fmt::print("{:<6} {:>6} x {:<6} b{} {:<8}{}{}{}: {} ({}) {:.2f} µs\n", type_name(type), n, k, p.batch,
                     layout == WeightLayout::Repacked ? "repacked" : "gguf", pair ? " gate/up" : "", with_x8 ? " x8" : "",
                     with_y8 ? " y8" : "", best->variant->name, best->config.str(), best->best_us());
      }
    }
  TuneCache::get("gemv").save();
  fmt::print("saved to {}\n", tune_cache_path("gemv"));
  tune_prompt_gemms(shapes, a.prompts, s);
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
  sub->add_option("--prompt", a->prompts, "Comma-separated prompt rows per pass to tune the GEMMs for ('' for none)");
  sub->add_option("--skip", a->skip, "GEMV variants or configs the tuner leaves out, 'a;b(rows=2,warps=16,unroll=4)' (A/B of a rung)");
  return [a] { run_tune(*a); };
}

}  // namespace lamina::cli
