// Tensor parallelism on the GPU (issue #35). On any machine: two ranks sharing GPU 0 and summing
// in host memory (ThreadGroup) give the whole model's greedy tokens on CUDA in exact mode, which
// checks the CUDA backend's split shapes and its all-reduce node. With several GPUs: sessions of
// 2 (and 4) ranks, decode rows through the peer all-reduce or NCCL, give the one-GPU session's tokens in exact mode and its logits
// within rounding in both modes, with the decode steps recorded as graphs (NCCL inside them).
#include "backend/cuda/cuda_backend.h"
#include "engine/engine.h"
#include "engine/session.h"
#include "golden_util.h"
#include "model/llama.h"
#include "model/sampler.h"
#include "session_util.h"
#include "thread_ranks.h"

#include <gtest/gtest.h>

#include <array>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>
#include <thread>

using namespace lamina;
using namespace lamina::test;

namespace {

constexpr int kSteps = 12;
const std::vector<int32_t> kPrompt{1, 450, 4996, 17354, 1701, 432, 17204, 975};

std::string tiny_path(const std::string& type = "q8_0", const std::string& preset = "tiny") {
  const std::string path = ::testing::TempDir() + "/lamina-gpu-tp-" + preset + "-" + type + ".gguf";
  if (!std::filesystem::exists(path)) gen_model(preset, type, 5, path);
  return path;
}

// The architectures whose split differs from llama's: phi3's fused QKV and gate/up tensors split
// part by part, and the mixtures of experts (experts split as dense FFNs, routers replicated).
const char* const kOtherArchs[] = {"tiny-phi3", "tiny-moe", "tiny-qwen2moe", "tiny-qwen3moe"};

double rel_l2(std::span<const float> a, std::span<const float> b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]), den += double(b[i]) * b[i];
  return std::sqrt(num / den);
}

// Greedy decoding of one rank on GPU 0 (the whole model when tp is null).
std::vector<int32_t> decode(const GgufFile& f, const LlamaModel::TpRank* tp) {
  CudaOptions o;
  o.graphs = tp == nullptr;  // (an all-reduce in host memory cannot be recorded)
  CudaBackend be(0, true, o);
  LlamaModel m(f, be, tp);
  m.init_cache(64, GgmlType::F16);
  std::vector<int32_t> out, step = kPrompt, pos(kPrompt.size());
  for (size_t i = 0; i < pos.size(); ++i) pos[i] = int32_t(i);
  for (int s = 0; s < kSteps; ++s) {
    const Tensor lg = m.forward(step, pos, LlamaModel::Logits::Last);
    std::vector<float> host(size_t(lg.cols));
    be.read(lg, host.data());
    const int32_t next = tp ? tp_argmax(*tp->comm, host.data(), lg.cols, tp->plan.vocab.first)
                            : int32_t(std::max_element(host.begin(), host.end()) - host.begin());
    out.push_back(next);
    step = {next};
    pos = {pos.back() + 1};
  }
  return out;
}

TEST(CudaTensorParallel, TwoHostRanksOnOneGpuGiveTheWholeModelsTokens) {
  std::vector<std::string> presets{"tiny"};
  presets.insert(presets.end(), std::begin(kOtherArchs), std::end(kOtherArchs));
  for (const std::string& preset : presets) {
    const GgufFile f = GgufFile::open(tiny_path("q8_0", preset));
    const std::vector<int32_t> whole = decode(f, nullptr);
    constexpr int n = 2;
    std::vector<std::string> errors;
    const auto runs = on_thread_ranks<std::vector<int32_t>>(
        ModelConfig::from_gguf(f), n, [&](const LlamaModel::TpRank& rank) { return decode(f, &rank); }, errors,
        tp_ff_block(f));
    for (int r = 0; r < n; ++r) {
      ASSERT_EQ(errors[size_t(r)], "") << preset << ", rank " << r;
      EXPECT_EQ(runs[size_t(r)], whole) << preset << ", rank " << r;
    }
  }
}

struct TpRun : SessionRun {
  int graphs = 0;            // decode passes recorded on rank 0
  std::vector<float> steps;  // the logits of one-token passes after the prompt (decode rows)
};

// The session's options for `ranks` GPUs; all_reduce: "peer" (decode rows by the peer kernel),
// "fused" (with the add, and the norm pending or, where it cannot pend, computed), "nccl".
SessionOptions tp_options(int ranks, bool exact, const std::string& all_reduce, const std::string& type,
                          const std::string& preset = "tiny") {
  SessionOptions o;
  o.model_path = tiny_path(type, preset), o.device = "cuda", o.n_ctx = 64, o.exact_matmul = exact, o.tensor_parallel = ranks;
  using AR = CudaOptions::AllReduce;
  o.cuda.all_reduce = all_reduce == "peer" ? AR::Peer : all_reduce == "nccl" ? AR::Nccl : AR::Fused;
  return o;
}

// Rank 0's per-op profile of a few greedy decode steps: which all-reduce kernels ran.
std::string decode_profile(int ranks, const std::string& all_reduce, const std::string& type) {
  SessionOptions o = tp_options(ranks, false, all_reduce, type);
  o.profile = true;
  Session s(o);
  greedy_run(s, kPrompt, 3);
  return s.backend().profile_report();
}

// The prompt's logits, greedy tokens, and the logits of 6 forced one-token passes after the prompt.
TpRun run_session(int ranks, bool exact, const std::string& all_reduce = "peer", const std::string& type = "q8_0",
                  const std::string& preset = "tiny") {
  Session s(tp_options(ranks, exact, all_reduce, type, preset));
  TpRun out;
  static_cast<SessionRun&>(out) = greedy_run(s, kPrompt, kSteps);
  s.reset();
  s.eval(kPrompt);
  for (size_t i = 0; i < 6; ++i) {
    const std::vector<float>& l = s.eval(std::span<const int32_t>(&kPrompt[i + 1], 1), true);
    out.steps.insert(out.steps.end(), l.begin(), l.end());
  }
  out.graphs = dynamic_cast<CudaBackend&>(s.backend()).recorded_graphs();
  return out;
}

// One GPU's session, exact and fast, and how far the fast logits are from the exact ones.
struct OneGpu {
  TpRun exact, fast;
  double fast_e = 0, fast_es = 0;  // rel. L2 of the prompt's and the decode steps' logits
};
OneGpu one_gpu(const std::string& preset) {
  OneGpu o;
  o.exact = run_session(1, true, "fused", "q8_0", preset), o.fast = run_session(1, false, "fused", "q8_0", preset);
  o.fast_e = rel_l2(o.fast.all, o.exact.all), o.fast_es = rel_l2(o.fast.steps, o.exact.steps);
  return o;
}

// A session of several GPUs against one GPU's. Exact mode: the same greedy tokens, the logits
// within 1e-5. Fast mode rounds activations to int8 blocks at other points when split (the pending
// norm, the partial sums) and a near tie in a router's top-k flips an expert: its logits are held
// to the one-GPU exact logits no further than the one-GPU fast logits are (twice that distance,
// plus 1e-4). The decode steps recorded as graphs where `graphs` (a mixture of experts routes on
// the host between its matmuls: eagerly).
void expect_like_one_gpu(const OneGpu& one, const TpRun& r, bool exact, bool graphs, const std::string& what) {
  ASSERT_EQ(r.all.size(), one.exact.all.size()) << what;
  const double e = rel_l2(r.all, one.exact.all), es = rel_l2(r.steps, one.exact.steps);
  const TpRun& same_mode = exact ? one.exact : one.fast;
  int same = 0;
  while (same < kSteps && r.tokens[size_t(same)] == same_mode.tokens[size_t(same)]) ++same;
  std::printf("tensor parallel %s %s: against 1 GPU exact, prompt logits rel. L2 %.2e, decode steps' %.2e (1 GPU "
              "fast: %.2e, %.2e); %d of %d greedy tokens equal 1 GPU's, %d graphs recorded\n",
              what.c_str(), exact ? "exact" : "fast", e, es, one.fast_e, one.fast_es, same, kSteps, r.graphs);
  EXPECT_LE(e, exact ? 1e-5 : 2 * one.fast_e + 1e-4) << what;
  EXPECT_LE(es, exact ? 1e-5 : 2 * one.fast_es + 1e-4) << what << ", decode steps";
  if (exact) EXPECT_EQ(r.tokens, one.exact.tokens) << what;
  if (graphs) EXPECT_GT(r.graphs, 0) << what << ": the decode steps ran eagerly";
}

// Decode rows all-reduce through the peer kernel (peer), the peer kernel with the add and the norm
// (fused), or NCCL; prompts through NCCL.
TEST(CudaTensorParallel, SessionsOfSeveralGpusGiveTheOneGpuSessionsTokens) {
  const int gpus = cuda_device_count();
  if (gpus < 2) GTEST_SKIP() << "needs 2 GPUs (this machine has " << gpus << ")";
  const OneGpu one = one_gpu("tiny");
  for (bool exact : {true, false})
    for (const char* ar : {"peer", "fused", "nccl"})
      for (int n : {2, 4}) {
        if (n > gpus) break;
        expect_like_one_gpu(one, run_session(n, exact, ar), exact, true, std::to_string(n) + " GPUs (" + ar + ")");
      }
}

// phi3 and the mixtures of experts on 2 (and 4) GPUs, the default all-reduce (fused).
TEST(CudaTensorParallel, OtherArchitecturesOnSeveralGpusGiveTheOneGpuTokens) {
  const int gpus = cuda_device_count();
  if (gpus < 2) GTEST_SKIP() << "needs 2 GPUs (this machine has " << gpus << ")";
  for (const std::string preset : kOtherArchs) {
    const OneGpu one = one_gpu(preset);
    for (bool exact : {true, false})
      for (int n : {2, 4}) {
        if (n > gpus) break;
        expect_like_one_gpu(one, run_session(n, exact, "fused", "q8_0", preset), exact,
                            preset.find("moe") == std::string::npos, preset + ", " + std::to_string(n) + " GPUs");
      }
  }
}

// The fast path's decode steps run the fused kernels where asked: the pending-norm kernel for
// the q8_0 model, the one that computes the norm for f16 (both fused, the default), and neither
// with peer.
TEST(CudaTensorParallel, TheFusedKernelsRunWhereAsked) {
  const int gpus = cuda_device_count();
  if (gpus < 2) GTEST_SKIP() << "needs 2 GPUs (this machine has " << gpus << ")";
  const std::string pend = "all_reduce+add, norm pending (peer)", computed = "all_reduce+add+norm (peer)";
  const std::string fused = decode_profile(2, "fused", "q8_0"), wide = decode_profile(2, "fused", "f16"),
                    peer = decode_profile(2, "peer", "q8_0");
  EXPECT_NE(fused.find(pend), std::string::npos) << fused;
  EXPECT_NE(wide.find(computed), std::string::npos) << wide;
  EXPECT_EQ(peer.find(pend), std::string::npos) << peer;
  EXPECT_EQ(peer.find(computed), std::string::npos) << peer;
}

// f16 weights take f32 rows, not int8 blocks, so no norm can pend: fused runs the peer
// kernel that computes the norm itself (peer_all_reduce_add_norm) runs after Wo and down.
TEST(CudaTensorParallel, TheFusedNormKernelGivesTheOneGpuSessionsTokens) {
  const int gpus = cuda_device_count();
  if (gpus < 2) GTEST_SKIP() << "needs 2 GPUs (this machine has " << gpus << ")";
  const TpRun one = run_session(1, false, "peer", "f16");
  for (int n : {2, 4}) {
    if (n > gpus) break;
    const TpRun r = run_session(n, false, "fused", "f16");
    ASSERT_EQ(r.all.size(), one.all.size());
    const double e = rel_l2(r.all, one.all), es = rel_l2(r.steps, one.steps);
    std::printf("tensor parallel fast f16, %d GPUs (fused): prompt logits rel. L2 %.2e, decode steps' %.2e\n", n,
                e, es);
    EXPECT_LE(e, 1e-3) << n << " GPUs";
    EXPECT_LE(es, 1e-3) << n << " GPUs, decode steps";
    EXPECT_GT(r.graphs, 0) << n << " GPUs";
  }
}

// The batching engine over 2 GPUs (exact path): greedy requests of several lengths, prompts in
// chunks beside decode rows on the paged cache, give the tokens a one-GPU session gives each alone.
TEST(CudaTensorParallel, TheEngineOnTwoGpusGivesTheOneGpuTokens) {
  const int gpus = cuda_device_count();
  if (gpus < 2) GTEST_SKIP() << "needs 2 GPUs (this machine has " << gpus << ")";
  SessionOptions o;
  o.model_path = tiny_path(), o.device = "cuda", o.n_ctx = 512, o.exact_matmul = true;
  SessionOptions o2 = o;
  o2.tensor_parallel = 2;
  Session es(o2), ref(o);
  EngineOptions eo;
  eo.schedule.max_step_tokens = 24;
  Engine engine(es, eo);
  std::mt19937 rng(3);
  std::vector<Request> reqs;
  for (int len : {3, 17, 40, 5, 33}) {
    Request r;
    std::uniform_int_distribution<int32_t> id(3, 31999);
    for (int i = 0; i < len; ++i) r.prompt.push_back(id(rng));
    r.max_tokens = 10, r.sampling.temperature = 0.f;
    reqs.push_back(r);
  }
  const std::vector<std::vector<int32_t>> got = engine_tokens(engine, reqs);
  for (size_t i = 0; i < reqs.size(); ++i) {
    ref.reset();
    Sampler smp(reqs[i].sampling);
    std::vector<int32_t> want{ref.eval_sample(reqs[i].prompt, smp)};
    while (int(want.size()) < reqs[i].max_tokens) want.push_back(ref.eval_sample(std::span<const int32_t>(&want.back(), 1), smp));
    EXPECT_EQ(got[i], want) << "request " << i;
  }
}

// Seeded draws on 2 GPUs: each rank ranks its share's best tokens on its device, the host merges
// them and the request's Sampler draws (sample_sorted); with EngineOptions::device_sampling off,
// the rows are read back and drawn whole. The same tokens either way, for draws of every kind the
// device takes (top-k 1 to 2048, top-p, min-p, the repetition penalty, greedy with a penalty);
// rank 0's profile shows the candidates kernel only in the first run.
TEST(CudaTensorParallel, TheEngineOnTwoGpusDrawsAsTheHostDoes) {
  const int gpus = cuda_device_count();
  if (gpus < 2) GTEST_SKIP() << "needs 2 GPUs (this machine has " << gpus << ")";
  SessionOptions o;
  o.model_path = tiny_path(), o.device = "cuda", o.n_ctx = 512, o.exact_matmul = true, o.tensor_parallel = 2;
  Session es(o);
  std::mt19937 rng(5);
  std::vector<Request> reqs;
  for (int i = 0; i < 8; ++i) {
    Request r;
    std::uniform_int_distribution<int32_t> id(3, 31999);
    for (int j = 0; j < 5 + 7 * i; ++j) r.prompt.push_back(id(rng));
    r.max_tokens = 12;
    SamplerParams& p = r.sampling;
    p.seed = 40 + uint64_t(i), p.temperature = 0.7f + 0.1f * float(i % 4);
    p.top_k = std::array{40, 1, 2048, 300}[size_t(i % 4)];
    p.top_p = i % 3 ? 0.95f : 1.f, p.min_p = i % 2 ? 0.05f : 0.f;
    if (i % 3 == 1) p.repeat_penalty = 1.3f;
    reqs.push_back(r);
  }
  reqs[7].sampling.temperature = 0, reqs[7].sampling.repeat_penalty = 1.2f;
  std::vector<std::vector<int32_t>> runs[2];
  for (bool device : {false, true}) {
    EngineOptions eo;
    eo.schedule.max_step_tokens = 24;
    eo.device_sampling = device;
    Engine engine(es, eo);
    es.backend().set_profiling(true);
    es.backend().profile_reset();
    runs[device] = engine_tokens(engine, reqs);
    const std::string report = es.backend().profile_report();
    EXPECT_EQ(report.find("top candidates") != std::string::npos, device) << report;
    es.backend().set_profiling(false);
  }
  for (size_t i = 0; i < reqs.size(); ++i) {
    ASSERT_EQ(runs[1][i].size(), 12u) << "request " << i;
    EXPECT_EQ(runs[1][i], runs[0][i]) << "request " << i;
  }
}

}  // namespace
