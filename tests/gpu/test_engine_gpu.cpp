// The batching engine's path on the GPU: passes over the rows of several sequences on a paged KV
// cache (scattered block tables, prompt chunks beside decode rows) give the CPU backend's logits,
// and those of each sequence run alone through a Session; the engine's greedy tokens on CUDA
// equal the CPU engine's.
#include "backend/cuda/cuda_backend.h"
#include "engine/engine.h"
#include "golden_util.h"
#include "session_util.h"
#include "model/llama.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <sstream>

using namespace lamina;
using namespace lamina::test;

namespace {

std::string smol_path() {
  const char* m = std::getenv("LAMINA_MODEL");
  return m ? m : "";
}

std::string tiny_path() {
  const std::string path = ::testing::TempDir() + "/lamina-gpu-engine-tiny-q8_0.gguf";
  if (!std::filesystem::exists(path))
    shell(std::string(LAMINA_CLI) + " gen-model --preset tiny --type q8_0 --vocab '" + kVocab + "' --seed 11 -o '" + path +
          "' 2>&1");
  return path;
}

std::unique_ptr<Session> open(const std::string& model, const char* device, bool exact) {
  SessionOptions o;
  o.model_path = model;
  o.n_ctx = 256;  // 16 blocks of 16 positions
  o.exact_matmul = exact;
  o.device = device;
  o.n_threads = 4;
  return std::make_unique<Session>(o);
}

double rel_l2(std::span<const float> a, std::span<const float> b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]), den += double(b[i]) * b[i];
  return std::sqrt(num / den);
}

// Three sequences on scattered blocks; five passes: two prompts side by side, then decode rows of
// those two beside a third prompt, then two passes of three decode rows, then one row alone (a
// one-row pass stages its tables like any other). Each pass's picked rows are every sequence's
// last row in it.
struct Script {
  static constexpr int kBlock = 16;
  std::vector<std::vector<int32_t>> seqs;
  std::vector<std::vector<int32_t>> tables{{5, 2}, {9, 0, 14}, {7}};
  // per pass: (sequence, first position, rows)
  std::vector<std::vector<std::tuple<int, int, int>>> passes{
      {{0, 0, 20}, {1, 0, 34}}, {{0, 20, 1}, {1, 34, 1}, {2, 0, 10}}, {{0, 21, 1}, {1, 35, 1}, {2, 10, 1}}, {{2, 11, 1}, {0, 22, 1}, {1, 36, 1}}, {{0, 23, 1}}};

  explicit Script(int32_t vocab) {
    std::mt19937 rng(9);
    std::uniform_int_distribution<int32_t> id(3, vocab - 1);
    for (int len : {24, 37, 12}) {
      seqs.emplace_back();
      for (int i = 0; i < len; ++i) seqs.back().push_back(id(rng));
    }
  }

  // logits[pass][k]: the picked rows' logits, in the pass's sequence order.
  std::vector<std::vector<std::vector<float>>> run(Session& s) const {
    std::vector<std::span<const int32_t>> spans(tables.begin(), tables.end());
    std::vector<std::vector<std::vector<float>>> out;
    for (const auto& pass : passes) {
      std::vector<int32_t> tokens, pos, row_seq, pick;
      for (const auto& [q, first, rows] : pass) {
        for (int i = 0; i < rows; ++i) tokens.push_back(seqs[size_t(q)][size_t(first + i)]), pos.push_back(first + i), row_seq.push_back(q);
        pick.push_back(int32_t(tokens.size()) - 1);
      }
      KvLayout layout{kBlock, row_seq, spans};
      const Tensor lg = s.model().forward_batch(tokens, pos, layout, pick);
      std::vector<float> host(size_t(lg.rows * lg.cols));
      s.backend().read(lg, host.data());
      out.emplace_back();
      for (int64_t r = 0; r < lg.rows; ++r) out.back().emplace_back(host.begin() + r * lg.cols, host.begin() + (r + 1) * lg.cols);
    }
    return out;
  }
};

void paged_passes_match(const std::string& model, double fast_bound) {
  ASSERT_TRUE(std::filesystem::exists(model)) << model;
  auto cpu = open(model, "cpu", true);
  const Script sc(int32_t(cpu->config().n_vocab));
  const auto ref = sc.run(*cpu);
  for (bool exact : {true, false}) {
    auto cuda = open(model, "cuda", exact);
    const auto got = sc.run(*cuda);
    ASSERT_EQ(got.size(), ref.size());
    double worst = 0;
    for (size_t p = 0; p < ref.size(); ++p)
      for (size_t k = 0; k < ref[p].size(); ++k) {
        const double e = rel_l2(got[p][k], ref[p][k]);
        worst = std::max(worst, e);
        EXPECT_LE(e, exact ? 1e-3 : fast_bound) << (exact ? "exact" : "fast") << " pass " << p << " row " << k;
      }
    std::printf("paged passes, CUDA %s against CPU exact: largest rel. L2 of logits %.2e\n", exact ? "exact" : "fast", worst);
  }
  // The same sequence alone through a Session (the single-sequence path: prompt, then decode steps)
  // on CUDA, exact: sequence 1's logits at positions 33..36.
  auto alone = open(model, "cuda", true);
  auto paged = open(model, "cuda", true);
  const auto batch = sc.run(*paged);
  const std::vector<int32_t>& s1 = sc.seqs[1];
  std::vector<std::vector<float>> own{alone->eval(std::span<const int32_t>(s1.data(), 34))};
  for (int i = 34; i < 37; ++i) own.push_back(alone->eval(std::span<const int32_t>(&s1[size_t(i)], 1)));
  const std::vector<float>* in_batch[] = {&batch[0][1], &batch[1][1], &batch[2][1], &batch[3][2]};
  // (The sequence alone runs its prompt through the tensor-core prefill attention, whose f16
  // probabilities differ from the paged kernel's f32 ones by a few 1e-4.)
  for (int i = 0; i < 4; ++i) EXPECT_LE(rel_l2(*in_batch[i], own[size_t(i)]), 1e-3) << "position " << 33 + i;
}

TEST(CudaPaged, TinyPassesMatchCpuAndTheSequenceAlone) { paged_passes_match(tiny_path(), 2e-2); }

TEST(CudaPaged, SmolPassesMatchCpuAndTheSequenceAlone) {
  ASSERT_FALSE(smol_path().empty()) << "set LAMINA_MODEL to SmolLM2 (scripts/gpu-check.sh does)";
  paged_passes_match(smol_path(), 8e-2);
}

// Prompts of real text (the GPL-3 license every Debian and Ubuntu system has), drawn at
// `temperature` (0: greedy, the device's argmax rows; else the host's seeded sampler, seed 0).
std::vector<Request> text_requests(Session& s, int n, int max_tokens, float temperature) {
  std::ifstream f("/usr/share/common-licenses/GPL-3");
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  std::vector<Request> out;
  for (int i = 0; i < n; ++i) {
    Request r;
    const size_t at = size_t(i) * 997 % (text.size() - 2000);
    r.prompt = s.tokenizer().tokenize(text.substr(at, 60 + size_t(i) * 37 % 400), true, false);
    r.max_tokens = max_tokens;
    r.sampling.temperature = temperature;
    out.push_back(std::move(r));
  }
  return out;
}

EngineOptions step_of(int tokens) {
  EngineOptions eo;
  eo.schedule.max_step_tokens = tokens;
  return eo;
}

std::map<int64_t, std::vector<int32_t>> run_engine(Session& s, const std::vector<Request>& reqs, std::vector<int64_t>& ids,
                                                   const EngineOptions& eo = step_of(256)) {
  Engine engine(s, eo);
  std::mutex mu;
  std::map<int64_t, std::vector<int32_t>> tokens;
  ids.clear();
  for (const Request& r : reqs)
    ids.push_back(engine.submit(r, [&](const TokenEvent& e) {
      std::lock_guard lk(mu);
      if (e.token >= 0) tokens[e.id].push_back(e.token);
    }));
  engine.run_until_idle();
  EXPECT_EQ(engine.kv().used_blocks(), 0);
  return tokens;
}

// Where the two engines' greedy tokens part, the CPU's own logits at that point must show a near
// tie: the token CUDA took within 5e-2 of the CPU's best (the exact paths' logits differ by a few
// 1e-4 relative, up to about 2e-2 on one logit, so only a tie can flip a token). Up to the first
// parting, equal.
TEST(CudaEngine, GreedyTokensEqualTheCpuEnginesUpToNearTies) {
  ASSERT_FALSE(smol_path().empty()) << "set LAMINA_MODEL to SmolLM2 (scripts/gpu-check.sh does)";
  SessionOptions o;
  o.model_path = smol_path();
  o.n_ctx = 4096;
  o.exact_matmul = true;
  o.n_threads = 8;
  o.device = "cpu";
  Session cpu(o);
  o.device = "cuda";
  Session cuda(o);
  const std::vector<Request> reqs = text_requests(cpu, 24, 24, 0.f);
  std::vector<int64_t> cpu_ids, cuda_ids;
  auto want = run_engine(cpu, reqs, cpu_ids);
  auto got = run_engine(cuda, reqs, cuda_ids);
  o.device = "cpu";
  o.n_ctx = 1024;
  Session check(o);
  int parted = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const std::vector<int32_t>& w = want[cpu_ids[i]];
    const std::vector<int32_t>& g = got[cuda_ids[i]];
    ASSERT_EQ(w.size(), 24u);
    ASSERT_EQ(g.size(), 24u) << "request " << i;
    const size_t j = size_t(std::mismatch(w.begin(), w.end(), g.begin()).first - w.begin());
    if (j == w.size()) continue;
    ++parted;
    std::vector<int32_t> ctx = reqs[i].prompt;
    ctx.insert(ctx.end(), w.begin(), w.begin() + long(j));
    check.reset();
    const std::vector<float>& lg = check.eval(ctx);
    std::printf("request %zu (%zu prompt tokens) parts at token %zu: CPU margin %.4f\n", i, reqs[i].prompt.size(), j,
                double(lg[size_t(w[j])] - lg[size_t(g[j])]));
    EXPECT_LE(lg[size_t(w[j])] - lg[size_t(g[j])], 5e-2f) << "request " << i << " parts at token " << j << ": CPU "
                                                          << w[j] << ", CUDA " << g[j];
  }
  std::printf("engine, CUDA against CPU (exact): %d of %zu requests part at a near tie\n", parted, reqs.size());
}

// The local layers' blocks from a pool of their own (EngineOptions::window_pool; 4 sequences at
// once make it smaller than the cache) against every row kept in the main blocks: prompts past
// the window, more requests than run at once, greedy. The kernels read the same positions in the
// same order either way (the pool's room keeps the chunks whole), so the tokens are the same,
// bitwise. The tiny model (a window of 4), and the real Gemma 3 270M (512) with LAMINA_GEMMA3.
void window_pool_gives_every_rows_tokens(const std::string& model, int n_ctx, int prompt) {
  SessionOptions o;
  o.model_path = model;
  o.n_ctx = n_ctx;
  o.exact_matmul = true;
  o.device = "cuda";
  o.n_threads = 4;
  Session pooled(o), whole(o);
  std::mt19937 rng(5);
  std::uniform_int_distribution<int32_t> id(3, int32_t(pooled.config().n_vocab) - 1);
  std::vector<Request> reqs(6);
  for (size_t i = 0; i < reqs.size(); ++i) {
    for (int j = 0; j < prompt + int(i) * prompt / 5; ++j) reqs[i].prompt.push_back(id(rng));
    reqs[i].max_tokens = 24;
  }
  EngineOptions eo = step_of(64);
  eo.schedule.max_running = 4;
  std::vector<int64_t> pooled_ids, whole_ids;
  {
    Engine probe(pooled, eo);
    ASSERT_TRUE(probe.kv().windowed()) << "the pool would not be smaller than the cache";
  }
  const auto got = run_engine(pooled, reqs, pooled_ids, eo);
  eo.window_pool = false;
  const auto want = run_engine(whole, reqs, whole_ids, eo);
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(got.at(pooled_ids[i]).size(), 24u) << "request " << i;
    EXPECT_EQ(got.at(pooled_ids[i]), want.at(whole_ids[i])) << "request " << i << " (" << reqs[i].prompt.size() << " prompt tokens)";
  }
  std::printf("window pool, %s: KV cache %.1f MiB held against %.1f with every row\n", model.c_str(),
              pooled.backend().kv_cache_bytes() / 1048576.0, whole.backend().kv_cache_bytes() / 1048576.0);
}

TEST(CudaEngine, AWindowPoolGivesTheTokensOfEveryRowKept) {
  const std::string path = ::testing::TempDir() + "/lamina-gpu-engine-tiny-gemma3-q8_0.gguf";
  if (!std::filesystem::exists(path))
    shell(std::string(LAMINA_CLI) + " gen-model --preset tiny-gemma3 --type q8_0 --vocab '" + kVocab + "' --seed 11 -o '" +
          path + "' 2>&1");
  window_pool_gives_every_rows_tokens(path, 512, 40);
}

TEST(CudaEngine, AWindowPoolGivesTheTokensOfEveryRowKeptOnGemma3) {
  if (!std::getenv("LAMINA_GEMMA3")) GTEST_SKIP() << "LAMINA_GEMMA3 is not set";
  window_pool_gives_every_rows_tokens(gemma3_model(), 8192, 600);
}

// Requests whose draw needs the logits row on the host (log probabilities, a logit bias, a
// constraint), on the CUDA engine beside default ones: the log probabilities of the first token
// match the CPU engine's (exact paths, the same prompt row), a bias of 100 makes every token the
// biased one, and a constraint's tokens are all ones it allows.
TEST(CudaEngine, HostRowsForLogprobsBiasAndConstraints) {
  struct EvenIds final : TokenConstraint {  // (only even token ids)
    bool allows(int32_t t) const override { return t % 2 == 0; }
    void take(int32_t) override {}
    bool complete() const override { return false; }
  };
  auto cpu = open(tiny_path(), "cpu", true), cuda = open(tiny_path(), "cuda", true);
  std::vector<Request> reqs = text_requests(*cpu, 4, 12, 0.f);
  reqs[0].logprobs = 3;
  reqs[1].logit_bias = {{7, 100.f}};
  reqs[2].constraint = [] { return std::make_unique<EvenIds>(); };
  reqs[2].sampling.temperature = 0.9f, reqs[2].sampling.seed = 5;
  auto run = [&](Session& s, std::map<int64_t, std::vector<TokenEvent>>& events) {
    Engine engine(s, EngineOptions{});
    std::mutex mu;
    std::vector<int64_t> ids;
    for (const Request& r : reqs)
      ids.push_back(engine.submit(r, [&](const TokenEvent& e) {
        std::lock_guard lk(mu);
        if (e.token >= 0) events[e.id].push_back(e);
      }));
    engine.run_until_idle();
    return ids;
  };
  std::map<int64_t, std::vector<TokenEvent>> on_cpu, on_cuda;
  const std::vector<int64_t> cpu_ids = run(*cpu, on_cpu), ids = run(*cuda, on_cuda);
  const std::vector<TokenEvent>& lp = on_cuda[ids[0]];
  ASSERT_FALSE(lp.empty());
  for (const TokenEvent& e : lp) {
    ASSERT_TRUE(e.logprobs.has_value());
    ASSERT_EQ(e.logprobs->top.size(), 3u);
    EXPECT_EQ(e.logprobs->top[0].first, e.token);  // greedy: the row's best
    EXPECT_LE(e.logprobs->logprob, 0.f);
  }
  const TokenEvent& first_cpu = on_cpu[cpu_ids[0]].at(0);
  EXPECT_EQ(lp[0].token, first_cpu.token);
  EXPECT_NEAR(lp[0].logprobs->logprob, first_cpu.logprobs->logprob, 1e-2);
  for (size_t k = 0; k < 3; ++k) EXPECT_NEAR(lp[0].logprobs->top[k].second, first_cpu.logprobs->top[k].second, 1e-2);
  ASSERT_EQ(on_cuda[ids[1]].size(), 12u);
  for (const TokenEvent& e : on_cuda[ids[1]]) EXPECT_EQ(e.token, 7);
  ASSERT_EQ(on_cuda[ids[2]].size(), 12u);
  for (const TokenEvent& e : on_cuda[ids[2]]) EXPECT_EQ(e.token % 2, 0) << e.token;
  EXPECT_EQ(on_cuda[ids[3]].size(), 12u);  // (a default request beside them)
  EXPECT_FALSE(on_cuda[ids[3]][0].logprobs.has_value());
}

// The engine's decode steps (one row per sequence) are recorded as graphs per row count and
// length bucket and replayed: the same kernels on the same data, so the tokens are those of eager
// passes, bit for bit, on the fast and the exact path; with steps of 16 and fewer rows recurring,
// graphs must have been recorded.
void recorded_steps_give_eager_tokens(bool exact, int n_tokens, float temperature) {
  ASSERT_FALSE(smol_path().empty()) << "set LAMINA_MODEL to SmolLM2 (scripts/gpu-check.sh does)";
  std::map<int64_t, std::vector<int32_t>> runs[2];
  int recorded = 0;
  long launched = 0, taken = 0;  // steps run ahead (greedy rows only)
  for (bool graphs : {false, true}) {
    SessionOptions o;
    o.model_path = smol_path();
    o.n_ctx = 4096;
    o.device = "cuda";
    o.exact_matmul = exact;
    Session s(o);
    auto& cuda = dynamic_cast<CudaBackend&>(s.backend());
    cuda.set_graphs(graphs);
    std::vector<int64_t> ids;
    const auto got = run_engine(s, text_requests(s, 16, n_tokens, temperature), ids);
    for (size_t i = 0; i < ids.size(); ++i) runs[graphs][int64_t(i)] = got.at(ids[i]);
    if (graphs) recorded = cuda.recorded_graphs(), launched = cuda.run_ahead_launched(), taken = cuda.run_ahead_taken();
  }
  for (int64_t i = 0; i < 16; ++i) {
    ASSERT_EQ(runs[1][i].size(), size_t(n_tokens)) << "request " << i;
    EXPECT_EQ(runs[1][i], runs[0][i]) << "request " << i;
  }
  EXPECT_GT(recorded, 0);
  // Greedy decode steps of the same sequences run ahead of the host, and the next step takes them
  // (every sequence ends at the same length: the last step has none ahead).
  if (temperature == 0.f) {
    EXPECT_GT(taken, 0);
    EXPECT_LE(taken, launched);
  }
  std::printf("engine decode steps (%s): %d graphs recorded, %ld steps run ahead, %ld of them taken, tokens equal to "
              "eager passes\n", exact ? "exact" : "fast", recorded, launched, taken);
}

// One greedy request on the fast path: its recorded one-row steps take the id the logits GEMV
// leaves (fused argmax, no argmax kernel) and run ahead; the eager passes run the argmax kernel.
// The same tokens both ways.
TEST(CudaEngine, OneGreedyRequestTakesTheLogitsGemvsArgmax) {
  ASSERT_FALSE(smol_path().empty()) << "set LAMINA_MODEL to SmolLM2 (scripts/gpu-check.sh does)";
  std::vector<int32_t> runs[2];
  for (bool graphs : {false, true}) {
    SessionOptions o;
    o.model_path = smol_path();
    o.n_ctx = 4096;
    o.device = "cuda";
    Session s(o);
    auto& cuda = dynamic_cast<CudaBackend&>(s.backend());
    cuda.set_graphs(graphs);
    std::vector<int64_t> ids;
    runs[graphs] = run_engine(s, text_requests(s, 1, 120, 0.f), ids).at(ids[0]);
    if (graphs) {
      EXPECT_GT(cuda.recorded_graphs(), 0);
      EXPECT_GT(cuda.run_ahead_taken(), 0);
    }
  }
  ASSERT_EQ(runs[1].size(), 120u);
  EXPECT_EQ(runs[1], runs[0]);
}

// Seeded draws of many kinds on the CUDA engine, made on the device (one block a draw) and, with
// EngineOptions::device_sampling off, by the host's Sampler over the rows read back: the same
// tokens for every request. Top-k off and presence penalties are drawn on the host either way.
TEST(CudaEngine, DeviceDrawsGiveTheHostSamplersTokens) {
  auto s = open(tiny_path(), "cuda", true);
  std::vector<Request> reqs = text_requests(*s, 12, 20, 0.8f);
  for (size_t i = 0; i < reqs.size(); ++i) {
    SamplerParams& p = reqs[i].sampling;
    p.seed = 100 + i;
    p.temperature = 0.6f + 0.1f * float(i % 7);
    p.top_k = std::array{40, 1, 2048, 300, 0, 40}[i % 6];
    p.top_p = i % 3 ? 0.95f : 1.f;
    p.min_p = i % 4 ? 0.05f : 0.f;
    if (i % 5 == 2) p.repeat_penalty = 1.3f;
  }
  reqs[9].sampling.presence_penalty = 0.5f;
  reqs[10].sampling.temperature = 0, reqs[10].sampling.repeat_penalty = 1.2f;  // greedy with a penalty: a device draw
  std::vector<std::vector<int32_t>> runs[2];
  for (bool device : {false, true}) {
    EngineOptions eo;
    eo.schedule.max_step_tokens = 256;
    eo.device_sampling = device;
    Engine engine(*s, eo);
    s->backend().set_profiling(true);
    s->backend().profile_reset();
    runs[device] = engine_tokens(engine, reqs);
    const std::string report = s->backend().profile_report();
    EXPECT_EQ(report.find("sample rows") != std::string::npos, device) << report;
    s->backend().set_profiling(false);
  }
  for (size_t i = 0; i < reqs.size(); ++i) {
    ASSERT_EQ(runs[1][i].size(), 20u) << "request " << i;
    EXPECT_EQ(runs[1][i], runs[0][i]) << "request " << i;
  }
}

// Sampled rows (the logits to the host's sampler) and greedy rows (the device's argmax).
TEST(CudaEngine, RecordedDecodeStepsGiveTheEagerTokens) { recorded_steps_give_eager_tokens(false, 300, 0.8f); }
TEST(CudaEngine, RecordedExactDecodeStepsGiveTheEagerTokens) { recorded_steps_give_eager_tokens(true, 100, 0.f); }

}  // namespace
