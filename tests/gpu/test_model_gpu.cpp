// End to end on the GPU: the CUDA backend's logits against the independent NumPy reference
// (tests/golden) with the CPU suite's bounds, CUDA against CPU over decode steps (graph
// replays included), graphs against eager passes, and SmolLM2's greedy continuations.
#include "backend/cuda/cuda_backend.h"
#include "golden_util.h"
#include "gpu_test_util.h"
#include "model/sampler.h"
#include "engine/session.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>
#include <cstdio>
#include <filesystem>
#include <memory>

using namespace lamina;
using namespace lamina::test;

namespace {

std::unique_ptr<Session> open(const std::string& model, const char* device, bool exact, bool graphs = true,
                              const CudaOptions& cuda = {}, int n_ctx = 256) {
  SessionOptions o;
  o.cuda = cuda;
  o.model_path = model;
  o.n_ctx = n_ctx;
  o.exact_matmul = exact;
  o.device = device;
  auto s = std::make_unique<Session>(o);
  if (auto* cuda = dynamic_cast<CudaBackend*>(&s->backend())) cuda->set_graphs(graphs);
  return s;
}

// Logits of the prompt, then of `steps` greedy decode steps chosen by `lead`'s logits.
std::vector<std::vector<float>> run(Session& s, const std::vector<int32_t>& prompt, const std::vector<int32_t>& follow) {
  std::vector<std::vector<float>> out{s.eval(prompt)};
  for (int32_t t : follow) out.push_back(s.eval(std::span<const int32_t>(&t, 1)));
  return out;
}

std::string gen_tiny(const json& c) {
  const std::string path = ::testing::TempDir() + "/lamina-gpu-" + c["name"].get<std::string>() + ".gguf";
  if (!std::filesystem::exists(path)) gen_model(c["gen"]["preset"], c["gen"]["type"], 42, path);
  return path;
}

class CudaTiny : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaTiny, LogitsMatchReferenceAndCpu) {
  const json c = golden_case(GetParam());
  ASSERT_FALSE(c.is_null());
  const std::string path = gen_tiny(c);
  ASSERT_EQ(sha256(path), c["sha256"].get<std::string>());
  const std::string type = c["gen"]["type"];
  const bool flt = type == "f32" || type == "f16" || type == "bf16";
  // bf16 weights: the prompt's GEMM rounds activations to bf16 (8-bit mantissa): 6e-3 measured.
  // f16: to f16 (and the prompt attention q and P): tiny-phi3 9.8e-4, tiny-phi3-longrope 1.29e-3
  // measured (LongRoPE's attn_factor 1.13 scales the scores by 1.29: a sharper softmax); the
  // exact path stays within 1e-3.
  const double tol_flt = type == "bf16" ? 1e-2 : type == "f16" ? 2e-3 : 1e-3;
  const std::vector<float> want = read_f32(kGolden + "/" + c["logits"].get<std::string>());
  const std::vector<int32_t> prompt = c["tokens"].get<std::vector<int32_t>>();

  auto fast = open(path, "cuda", false), exact = open(path, "cuda", true), cpu = open(path, "cpu", false);
  // Decode steps: the greedy choice from CPU logits, then fixed ids.
  std::vector<int32_t> follow = {argmax(cpu->eval(prompt)), 1, 2, 3, 100, 200, 300, 400, 500, 600};
  cpu->reset();
  const auto lf = run(*fast, prompt, follow), le = run(*exact, prompt, follow), lc = run(*cpu, prompt, follow);
  EXPECT_LE(rel_l2(le[0], want), 1e-3) << "exact";
  EXPECT_LE(rel_l2(lf[0], want), flt ? tol_flt : 3e-2) << "fast";
  double worst = 0;
  for (size_t i = 1; i < lf.size(); ++i) {
    worst = std::max(worst, rel_l2(lf[i], lc[i]));
    EXPECT_LE(rel_l2(lf[i], lc[i]), flt ? tol_flt : 4e-2) << "decode step " << i << " CUDA vs CPU";
    EXPECT_LE(rel_l2(le[i], lc[i]), flt ? 1e-3 : 4e-2) << "decode step " << i << " CUDA exact vs CPU";
  }
  std::printf("%s: CUDA fast prompt logits rel. L2 %.2e to the reference; decode steps %.2e to CPU fast at most\n",
              GetParam().c_str(), rel_l2(lf[0], want), worst);
  // Recorded graphs (steps 2 on) give what eager passes give.
  auto eager = open(path, "cuda", false, false);
  const auto lg = run(*eager, prompt, follow);
  for (size_t i = 0; i < lg.size(); ++i) EXPECT_LE(rel_l2(lf[i], lg[i]), 1e-6) << "graph vs eager, step " << i;
}

// A mixture of experts' prompt routed on the device (moe_route over every row, then the (token,
// pick) pairs' GEMVs grouped by expert, add_routed over the rows): CudaOptions::moe_pairs_per_expert
// 16 takes the tiny files' 11-token prompt (2 picks of 4 or 8 experts) through the GEMVs; 0 through
// the grouped GEMM where the experts have one (tiny-moe on Hopper: moe_sort, gemm_experts; its
// matrices' k are 256 and 512), else the host's grouping (tiny-qwen3moe: its down matrices' k =
// 128 is no multiple of 256). The prompt's logits and the decode steps' after it against each other
// and the CPU, within the fast path's bound; recorded graphs against eager passes.
TEST(CudaTinyMoe, RowsRoutedOnTheDeviceMatchTheHostGroupingAndCpu) {
  struct Case {
    const char* name;
    int64_t n_expert, k;
    bool gemm;  // option 0 takes the grouped GEMM (else the host's grouping)
  };
  for (const Case m : {Case{"tiny-moe-q8_0", 4, 2, sm90_device()}, Case{"tiny-qwen3moe-q8_0", 8, 2, false}}) {
    SCOPED_TRACE(m.name);
    const json c = golden_case(m.name);
    ASSERT_FALSE(c.is_null());
    const std::string path = gen_tiny(c);
    const std::vector<int32_t> prompt = c["tokens"].get<std::vector<int32_t>>();
    CudaOptions gemvs, other;
    gemvs.moe_pairs_per_expert = 16, other.moe_pairs_per_expert = 0;
    auto dev = open(path, "cuda", false, true, gemvs), alt = open(path, "cuda", false, true, other),
         eager = open(path, "cuda", false, false, gemvs), alt_eager = open(path, "cuda", false, false, other),
         cpu = open(path, "cpu", false);
    const auto* cd = dynamic_cast<const CudaBackend*>(&dev->backend());
    const auto* ca = dynamic_cast<const CudaBackend*>(&alt->backend());
    ASSERT_TRUE(cd && ca);
    const int64_t rows = int64_t(prompt.size());
    ASSERT_TRUE(cd->routes_experts(rows, m.n_expert, m.k)) << "the prompt's rows on the device (GEMVs)";
    ASSERT_EQ(ca->routes_experts(rows, m.n_expert, m.k), m.gemm) << "option 0: the grouped GEMM, or the host";
    std::vector<int32_t> follow = {argmax(cpu->eval(prompt)), 1, 2, 3, 100, 200};
    cpu->reset();
    const auto ld = run(*dev, prompt, follow), la = run(*alt, prompt, follow), lc = run(*cpu, prompt, follow),
               le = run(*eager, prompt, follow), lae = run(*alt_eager, prompt, follow);
    const char* other_path = m.gemm ? "grouped GEMM" : "host's grouping";
    for (size_t i = 0; i < ld.size(); ++i) {
      EXPECT_LE(rel_l2(ld[i], la[i]), 4e-2) << "step " << i << ": GEMVs against the " << other_path;
      EXPECT_LE(rel_l2(ld[i], lc[i]), 4e-2) << "step " << i << ": GEMVs against the CPU";
      EXPECT_LE(rel_l2(la[i], lc[i]), 4e-2) << "step " << i << ": " << other_path << " against the CPU";
      EXPECT_LE(rel_l2(ld[i], le[i]), 1e-6) << "step " << i << ": graph against eager";
      EXPECT_LE(rel_l2(la[i], lae[i]), 1e-6) << "step " << i << ": graph against eager (option 0)";
    }
    std::printf("%s: prompt of %lld rows; device GEMVs rel. L2 %.2e to the %s, %.2e to the CPU; the %s %.2e to the CPU\n",
                m.name, static_cast<long long>(rows), rel_l2(ld[0], la[0]), other_path, rel_l2(ld[0], lc[0]), other_path,
                rel_l2(la[0], lc[0]));
  }
}

// Run-ahead (CudaBackend): eval_sample with `more` enqueues the next decode step before the host
// has the sampled id. The ids it gives are those of eager passes (graphs off: no run-ahead); a
// caller that then feeds another token instead, or rewinds and feeds new tokens, gets the logits
// eager passes give (the step that ran ahead wrote a cache row that the next pass rewrites).
TEST(CudaRunAhead, StepsAndDivergingCallersMatchEagerPasses) {
  const json c = golden_case("tiny-q8_0");
  ASSERT_FALSE(c.is_null());
  const std::string path = gen_tiny(c);
  const std::vector<int32_t> prompt = c["tokens"].get<std::vector<int32_t>>();
  auto ahead = open(path, "cuda", false), eager = open(path, "cuda", false, false);
  SamplerParams g;
  g.temperature = 0;
  Sampler sa(g), se(g);
  std::vector<int32_t> got{ahead->eval_sample(prompt, sa, true)}, want{eager->eval_sample(prompt, se)};
  for (int i = 0; i < 12; ++i) {
    got.push_back(ahead->eval_sample(std::span<const int32_t>(&got.back(), 1), sa, true));
    want.push_back(eager->eval_sample(std::span<const int32_t>(&want.back(), 1), se));
  }
  EXPECT_EQ(got, want);
  // Another token where the sampled one ran ahead.
  const int32_t other = got.back() == 1 ? 2 : 1;
  EXPECT_LE(rel_l2(ahead->eval(std::span<const int32_t>(&other, 1)), eager->eval(std::span<const int32_t>(&other, 1))),
            1e-6) << "another token";
  // A rewind and three new tokens where a step ran ahead.
  const int32_t next = ahead->eval_sample(std::span<const int32_t>(&other, 1), sa, true);
  EXPECT_EQ(next, eager->eval_sample(std::span<const int32_t>(&other, 1), se));
  const std::vector<int32_t> more_tokens{5, 6, 7};
  ahead->rewind(int(prompt.size()) + 3);
  eager->rewind(int(prompt.size()) + 3);
  EXPECT_LE(rel_l2(ahead->eval(more_tokens), eager->eval(more_tokens)), 1e-6) << "rewind";
}

// The greedy id made by the logits GEMV (the step plan's argmax: q6k_dp4a's epilogue for q4_0's q6_K
// output, gemv()'s argmax kernel after f16's) and the lookup that reads the staged inputs itself
// give the ids of the sampling kernel after an upload kernel (both switched off), run-ahead on.
TEST(CudaRunAhead, FusedArgmaxAndStagedLookupMatchTheKernelsApart) {
  for (const char* name : {"tiny-q4_0", "tiny-f16"}) {
    SCOPED_TRACE(name);
    const json c = golden_case(name);
    ASSERT_FALSE(c.is_null());
    const std::string path = gen_tiny(c);
    const std::vector<int32_t> prompt = c["tokens"].get<std::vector<int32_t>>();
    CudaOptions kernels_apart;
    kernels_apart.fused_argmax = false;
    kernels_apart.staged_lookup = false;
    auto apart = open(path, "cuda", false, true, kernels_apart);
    auto fused = open(path, "cuda", false);
    SamplerParams g;
    g.temperature = 0;
    Sampler sa(g), sf(g);
    std::vector<int32_t> want{apart->eval_sample(prompt, sa, true)}, got{fused->eval_sample(prompt, sf, true)};
    for (int i = 0; i < 12; ++i) {
      want.push_back(apart->eval_sample(std::span<const int32_t>(&want.back(), 1), sa, true));
      got.push_back(fused->eval_sample(std::span<const int32_t>(&got.back(), 1), sf, true));
    }
    EXPECT_EQ(got, want);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, CudaTiny,
                         ::testing::Values("tiny-f32", "tiny-f16", "tiny-bf16", "tiny-q8_0", "tiny-q4_0", "tiny-q4_1",
                                           "tiny-q4_K", "tiny-q6_K", "tiny-qwen2-f16", "tiny-qwen2-q8_0",
                                           "tiny-llama3-f16", "tiny-llama3-q8_0", "tiny-qwen3-f16", "tiny-qwen3-q8_0",
                                           "tiny-gemma3-f16", "tiny-gemma3-q8_0", "tiny-phi3-f16", "tiny-phi3-q8_0",
                                           "tiny-phi3-longrope-f16", "tiny-phi3-longrope-q8_0", "tiny-moe-f16",
                                           "tiny-moe-q8_0", "tiny-qwen3moe-f16", "tiny-qwen3moe-q8_0",
                                           "tiny-qwen2moe-f16", "tiny-qwen2moe-q8_0"),
                         [](const auto& info) { return case_param_name(info.param); });

// Greedy tokens with GPU sampling (Session::eval_sample).
std::vector<int32_t> greedy(Session& s, const std::vector<int32_t>& prompt, size_t n) {
  SamplerParams g;
  g.temperature = 0;
  Sampler sampler(g);
  std::vector<int32_t> got{s.eval_sample(prompt, sampler, n > 1)};
  while (got.size() < n)  // more: the decode step of each id runs ahead of the host (CUDA)
    got.push_back(s.eval_sample(std::span<const int32_t>(&got.back(), 1), sampler, got.size() + 1 < n));
  return got;
}

// A real model's golden case: "smollm2-pN" (the default model, LAMINA_MODEL) or "gemma3-pN"
// (Gemma 3 270M, LAMINA_GEMMA3: scripts/gpu-check.sh sets it where the file was carried).
class CudaReal : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const bool gemma = GetParam().starts_with("gemma3");
    if (gemma && !std::getenv("LAMINA_GEMMA3")) GTEST_SKIP() << "LAMINA_GEMMA3 is not set";
    model_ = gemma ? gemma3_model() : default_model();
    ASSERT_TRUE(std::filesystem::exists(model_)) << "model not found at " << model_;
  }
  std::string model_;
};

// The exact path reproduces all 32 reference tokens. The fast path (int8-block activations that
// scale each block to its second-largest element, kernels/common/q8_blocks.h) agrees up to the
// reference's first near tie, the first step whose top-2 margin is below 0.2. The line is
// empirical, not a bound: the fast path's largest error on the prompt pass's logits is 0.12-0.16
// (the line printed below; H200, 2026-11-29), a choice flips when two logits' errors together
// pass the margin, and the decode steps' errors are not measured here. At 0.1, gemma3-p2's step 3
// (a margin of 0.119) flipped when the q6_K GEMV changed kernels with no loss of accuracy (pooled
// rel. L2 9.98e-3 -> 7.80e-3: docs/benchmarks.md, forty-third session). Its prompt logits
// are bounded too, loosely: one 5- to 10-token prompt's last logits are a single sample of a
// chaotic error (a last-bit change upstream moves int8 roundings downstream); rel. L2 measured
// 1.71e-2, 6.58e-3 and 7.72e-3 on the three prompts, then 3.36e-2, 7.98e-3 and 7.32e-3 once
// SmolLM2's q4_1 matmuls of 3+ rows became GEMMs on f16 activations (7478db7; before, GEMV
// slices on int8 blocks): smollm2-p0's 5 rows. Over many positions the same change was no worse:
// the pooled rel. L2 over the 99 positions below went from 1.20e-2 to 1.15e-2, the fast path's
// mean KLD over 2,048 tokens from 3.4e-4 to 2.2e-4 (H200, docs/benchmarks.md, fiftieth
// session). So the line is 5e-2, twice the worst sample seen. The tight bounds
// pool many positions (the tests below); the fast path's faithfulness over 2,000 tokens is held by
// scripts/gpu-check.sh's perplexity/KLD step. CUDA and CPU fast are compared too (reported).
TEST_P(CudaReal, GreedyTokens) {
  const std::string& model = model_;
  const json c = golden_case(GetParam());
  ASSERT_FALSE(c.is_null()) << GetParam();
  const auto want = c["greedy"].get<std::vector<int32_t>>();
  const auto margins = c["greedy_margins"].get<std::vector<double>>();
  const auto prompt = c["tokens"].get<std::vector<int32_t>>();
  auto ex = open(model, "cuda", true), fast = open(model, "cuda", false), cpu = open(model, "cpu", false);
  EXPECT_EQ(greedy(*ex, prompt, want.size()), want) << "CUDA exact";
  const auto f = greedy(*fast, prompt, want.size()), fc = greedy(*cpu, prompt, want.size());
  const std::vector<float> ref_logits = read_f32(kGolden + "/" + c["logits"].get<std::string>());
  auto fast2 = open(model, "cuda", false);
  const std::vector<float> fast_logits = fast2->eval(prompt);
  EXPECT_LE(rel_l2(fast_logits, ref_logits), 5e-2) << "CUDA fast, prompt logits";
  double max_err = 0;
  for (size_t i = 0; i < ref_logits.size() && i < fast_logits.size(); ++i)
    max_err = std::max(max_err, std::fabs(double(fast_logits[i]) - ref_logits[i]));
  const double near_tie = 0.2;
  size_t must = 0;
  while (must < want.size() && margins[must] >= near_tie) ++must;
  for (size_t i = 0; i < must; ++i) ASSERT_EQ(f[i], want[i]) << "CUDA fast, step " << i;
  const size_t same = size_t(std::mismatch(f.begin(), f.end(), fc.begin()).first - f.begin());
  std::printf("%s: CUDA fast = reference for %zu/%zu tokens (first near tie at %zu: margin < %.3f; "
              "fast prompt logits rel. L2 %.2e, max error %.3f), = CPU fast for %zu\n",
              GetParam().c_str(), size_t(std::mismatch(f.begin(), f.end(), want.begin()).first - f.begin()), want.size(), must,
              near_tie, rel_l2(fast_logits, ref_logits), max_err, same);
  // logits of the prompt against the reference
  auto ex2 = open(model, "cuda", true);
  EXPECT_LE(rel_l2(ex2->eval(prompt), ref_logits), 1e-3);
}

// rel. L2 of a run's logits against another's, pooled over positions (golden_util.h's rel_l2 of
// the positions laid end to end).
double pooled_rel_l2(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  const auto flat = [](const std::vector<std::vector<float>>& v) {
    std::vector<float> f;
    for (const auto& p : v) f.insert(f.end(), p.begin(), p.end());
    return f;
  };
  return rel_l2(flat(a), flat(b));
}

// One golden prompt's logits along the reference's greedy path on four paths (CUDA / CPU, fast /
// exact): the prompt pass, then the 32 decode steps of the reference's greedy tokens fed one by
// one (the same sequence on every path, so no divergence compounds). SmolLM2's are kept (26 MB a
// prompt), so that the per-prompt test and the three prompts' pooled one run each path once.
struct AlongTheGreedyPath {
  std::vector<std::vector<float>> cuda_fast, cuda_exact, cpu_fast, cpu_exact;
};
const AlongTheGreedyPath& along_the_greedy_path(const std::string& model, const json& c) {
  static std::map<std::string, AlongTheGreedyPath> runs;  // SmolLM2's, by case
  static AlongTheGreedyPath other;
  const bool keep = model == default_model();
  const std::string key = c["name"].get<std::string>();
  if (const auto it = runs.find(key); keep && it != runs.end()) return it->second;
  const auto follow = c["greedy"].get<std::vector<int32_t>>();
  const auto prompt = c["tokens"].get<std::vector<int32_t>>();
  const auto at = [&](const char* dev, bool exact) {
    auto s = open(model, dev, exact);
    return run(*s, prompt, follow);
  };
  AlongTheGreedyPath r;
  r.cuda_fast = at("cuda", false), r.cuda_exact = at("cuda", true);
  r.cpu_fast = at("cpu", false), r.cpu_exact = at("cpu", true);
  auto& slot = keep ? runs[key] : other;
  slot = std::move(r);
  return slot;
}

// The fast path's faithfulness where it runs: each step's fast logits against the exact path's at
// the same step (the exact path is the f64 reference's within 1e-3, GreedyTokens, so it stands in
// for the f64 logits the reference keeps only for the prompt's last position), pooled over the 33
// positions, so one sample's chaos (GreedyTokens' prompt logits) averages out. The CPU's fast path
// (8-bit with an outlier split) is measured the same way: on SmolLM2 the CUDA fast path must be as
// faithful, within 25 %, and under 2e-2 on each prompt (measured on an H200: CUDA 1.07e-2 /
// 1.36e-2 / 1.58e-2, CPU 1.17e-2 / 1.21e-2 / 1.57e-2; docs/benchmarks.md). One prompt's 33
// positions still move by about 25 % with any change of rounding (the CPU's figures above range
// 1.1e-2 .. 1.7e-2 on p2 as its outlier threshold goes from 2 to 4 x rms), so the 1.5e-2 bound is
// held over the three prompts together (CudaSmol.FastLogitsOverTheGoldenPrompts). Gemma 3 is
// reported, bounded loosely.
TEST_P(CudaReal, FastLogitsAlongTheGreedyPathStayNearTheExactOnes) {
  const json c = golden_case(GetParam());
  ASSERT_FALSE(c.is_null()) << GetParam();
  const AlongTheGreedyPath& r = along_the_greedy_path(model_, c);
  const double gpu = pooled_rel_l2(r.cuda_fast, r.cuda_exact), cpu = pooled_rel_l2(r.cpu_fast, r.cpu_exact);
  const double ex = pooled_rel_l2(r.cuda_exact, r.cpu_exact);
  std::printf("%s: fast against exact logits over the prompt and %zu decode steps, pooled rel. L2: CUDA %.2e, "
              "CPU %.2e (CUDA exact against CPU exact %.2e)\n",
              GetParam().c_str(), r.cuda_fast.size() - 1, gpu, cpu, ex);
  EXPECT_LE(ex, 1e-3) << "CUDA exact against CPU exact";
  if (GetParam().starts_with("smollm2")) {
    EXPECT_LE(gpu, 2e-2) << "CUDA fast against CUDA exact";
    EXPECT_LE(gpu, 1.25 * cpu) << "CUDA fast against CUDA exact, beside CPU fast against CPU exact";
  } else {
    EXPECT_LE(gpu, 5e-2) << "CUDA fast against CUDA exact";
  }
}

// Issue #29's bound on the fast path, 1.5e-2, over SmolLM2's three golden prompts together: the
// 99 positions (3 x 33) of the test above pooled into one rel. L2, for CUDA and, reported beside
// it, for the CPU.
TEST(CudaSmol, FastLogitsOverTheGoldenPromptsStayNearTheExactOnes) {
  const std::string model = default_model();
  ASSERT_TRUE(std::filesystem::exists(model)) << "model not found at " << model;
  AlongTheGreedyPath all;
  for (const char* name : {"smollm2-p0", "smollm2-p1", "smollm2-p2"}) {
    const json c = golden_case(name);
    ASSERT_FALSE(c.is_null()) << name;
    const AlongTheGreedyPath& r = along_the_greedy_path(model, c);
    const auto add = [](auto& to, const auto& from) { to.insert(to.end(), from.begin(), from.end()); };
    add(all.cuda_fast, r.cuda_fast), add(all.cuda_exact, r.cuda_exact), add(all.cpu_fast, r.cpu_fast),
        add(all.cpu_exact, r.cpu_exact);
  }
  const double gpu = pooled_rel_l2(all.cuda_fast, all.cuda_exact), cpu = pooled_rel_l2(all.cpu_fast, all.cpu_exact);
  std::printf("SmolLM2's three golden prompts, %zu positions: fast against exact, pooled rel. L2: CUDA %.2e, CPU %.2e\n",
              all.cuda_fast.size(), gpu, cpu);
  EXPECT_LE(gpu, 1.5e-2) << "CUDA fast against CUDA exact";
  EXPECT_LE(gpu, 1.25 * cpu) << "CUDA fast against CUDA exact, beside CPU fast against CPU exact";
}

INSTANTIATE_TEST_SUITE_P(Prompts, CudaReal,
                         ::testing::Values("smollm2-p0", "smollm2-p1", "smollm2-p2", "gemma3-p0", "gemma3-p1", "gemma3-p2"),
                         [](const auto& info) { return case_param_name(info.param); });

// Gemma 3 270M past its sliding window (512 positions): a 700-token prompt and 8 decode steps,
// CUDA against CPU, exact (f32 activations) and fast; the local layers' window and RoPE base
// and the global layers' full attention are all exercised at the real shape (head_dim 256).
TEST(CudaGemma3, PastTheSlidingWindowMatchesCpu) {
  if (!std::getenv("LAMINA_GEMMA3")) GTEST_SKIP() << "LAMINA_GEMMA3 is not set";
  std::vector<int32_t> prompt = {2};
  for (int i = 0; i < 699; ++i) prompt.push_back(1000 + (i * 7919) % 50000);  // arbitrary ordinary tokens
  for (const bool exact : {true, false}) {
    auto gpu = open(gemma3_model(), "cuda", exact, true, {}, 1024), cpu = open(gemma3_model(), "cpu", exact, true, {}, 1024);
    std::vector<float> lg = gpu->eval(prompt), lc = cpu->eval(prompt);
    double worst = rel_l2(lg, lc);
    for (int step = 0; step < 8; ++step) {
      const int32_t t = argmax(lc);
      lg = gpu->eval(std::span<const int32_t>(&t, 1)), lc = cpu->eval(std::span<const int32_t>(&t, 1));
      worst = std::max(worst, rel_l2(lg, lc));
    }
    std::printf("gemma3 700-token prompt + 8 steps, CUDA vs CPU (%s): largest rel. L2 of logits %.2e\n",
                exact ? "exact" : "fast", worst);
    EXPECT_LE(worst, exact ? 1e-3 : 8e-2) << (exact ? "exact" : "fast");
  }
}

// Gemma 3 270M with its local layers on rings of chunks (a 2 MiB chunk holds 4,096 of its
// positions): a 5,100-token prompt and 24 greedy steps, in which the run of backed chunks (the
// window, 512 rows of slack and room to cut back, backend/kv_window_ring.h) leaves the first chunk,
// then cut back above the kept rows (the cache read on) and below them (the kept tokens evaluated
// again), against the same model with every row kept (--no-window-ring): the same kernels over
// the same rows, so the greedy tokens are equal and the logits agree to rounding.
TEST(CudaGemma3, WindowRingsMatchTheWholeCache) {
  if (!std::getenv("LAMINA_GEMMA3")) GTEST_SKIP() << "LAMINA_GEMMA3 is not set";
  CudaOptions whole;
  whole.window_ring = false;
  // (Exact: f32 activations, so that two sessions' kernel choices cannot round apart.)
  auto ring = open(gemma3_model(), "cuda", true, true, {}, 16384);
  auto all = open(gemma3_model(), "cuda", true, true, whole, 16384);
  std::vector<int32_t> prompt = {2};
  for (int i = 1; i < 5100; ++i) prompt.push_back(1000 + (i * 7919) % 50000);  // arbitrary ordinary tokens
  std::vector<float> a = ring->eval(prompt), b = all->eval(prompt);
  double worst = rel_l2(a, b);
  for (int step = 0; step < 24; ++step) {
    const int32_t t = argmax(b);
    EXPECT_EQ(argmax(a), t) << "step " << step;
    a = ring->eval(std::span<const int32_t>(&t, 1)), b = all->eval(std::span<const int32_t>(&t, 1));
    worst = std::max(worst, rel_l2(a, b));
  }
  const size_t ring_bytes = ring->backend().kv_cache_bytes(), all_bytes = all->backend().kv_cache_bytes();
  EXPECT_LT(ring_bytes, all_bytes);
  const int floor = ring->backend().kv_rewind_floor();
  EXPECT_GT(floor, 0) << "the window never left the first chunk";
  const int above = ring->n_past() - 5;
  EXPECT_GE(above, floor);
  const std::vector<int32_t> hist = all->history();
  std::vector<int32_t> more;
  for (int i = 0; i < 8; ++i) more.push_back(2000 + 37 * i);
  // Above the floor both read on from their caches.
  ring->rewind(above), all->rewind(above);
  a = ring->eval(more), b = all->eval(more);
  EXPECT_EQ(argmax(a), argmax(b)) << "cut back to " << above;
  const double after_above = rel_l2(a, b);
  // Below it the ring's session evaluates the 600 kept tokens again (passes of 512 and 88 rows,
  // which round differently from the first 512 and 512): the whole cache's session does the same.
  ring->rewind(600), all->reset();
  all->eval(std::span<const int32_t>(hist.data(), 600));
  a = ring->eval(more), b = all->eval(more);
  EXPECT_EQ(argmax(a), argmax(b)) << "cut back to 600";
  const double after_below = rel_l2(a, b);
  std::printf("gemma3 window rings against the whole cache: largest rel. L2 of logits %.2e over the steps, %.2e and %.2e "
              "after cutting back above and below the floor (%d); KV %.1f MiB against %.1f MiB\n",
              worst, after_above, after_below, floor, ring_bytes / 1048576.0, all_bytes / 1048576.0);
  EXPECT_LE(std::max({worst, after_above, after_below}), 1e-4);
}

// A generated 7B-shape model (scripts/gpu-check.sh sets LAMINA_7B_MODEL): 16 greedy tokens from
// CUDA and CPU, both exact (f32 activations). Random weights give flat logits, so the check is
// the golden tests' rule: identical up to the first step where the CPU's own top-2 margin is a
// near tie (< 1e-3 of the logits' spread), which either backend may break either way.
TEST(CudaLlama7B, GreedyTokensMatchCpu) {
  const char* model = std::getenv("LAMINA_7B_MODEL");
  if (!model) GTEST_SKIP() << "LAMINA_7B_MODEL is not set (scripts/gpu-check.sh sets it)";
  ASSERT_TRUE(std::filesystem::exists(model)) << model;
  auto gpu = open(model, "cuda", true), cpu = open(model, "cpu", true);
  const std::vector<int32_t> prompt = {1, 450, 7483, 310, 3444, 338};  // "<s> The capital of France is" (llama spm)
  std::vector<float> lg = gpu->eval(prompt), lc = cpu->eval(prompt);
  size_t same = 0;
  for (; same < 16; ++same) {
    const int32_t tg = argmax(lg), tc = argmax(lc);
    if (tg != tc) {
      std::vector<float> sorted = lc;
      std::nth_element(sorted.begin(), sorted.begin() + 1, sorted.end(), std::greater<float>());
      const float margin = sorted[0] - sorted[1];
      double mean = 0, var = 0;
      for (float v : lc) mean += v / double(lc.size());
      for (float v : lc) var += (v - mean) * (v - mean) / double(lc.size());
      std::printf("7B: CUDA and CPU (exact) agree on %zu tokens; at step %zu the CPU's top-2 margin is %.3g (logit sd %.3g)\n",
                  same, same, double(margin), std::sqrt(var));
      EXPECT_LT(margin, 1e-3 * std::sqrt(var)) << "CUDA and CPU differ at step " << same << " without a near tie";
      return;
    }
    lg = gpu->eval(std::span<const int32_t>(&tg, 1));
    lc = cpu->eval(std::span<const int32_t>(&tc, 1));
  }
  std::printf("7B: CUDA and CPU (exact) agree on all %zu tokens\n", same);
}

}  // namespace
