// The batching engine on the CPU backend against one request at a time: many requests with
// chunked prefill and mixed decode rows, sampled with their own seeds, give exactly the tokens a
// Session gives each alone (the CPU's rows are computed independently, so equality is exact);
// so do requests that reuse a cached prefix and requests preempted for lack of blocks. Cancels,
// submissions from several threads and bad requests.
#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "engine/engine.h"
#include "golden_util.h"
#include "model/sampler.h"

#include <gtest/gtest.h>

#include <cmath>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include <unistd.h>

using namespace lamina;
using namespace lamina::test;

namespace {

// The tokens a Session alone gives the request.
std::vector<int32_t> alone(Session& s, const Request& r) {
  s.reset();
  Sampler smp(r.sampling);
  std::vector<int32_t> out{s.eval_sample(r.prompt, smp)};
  auto stops = [&](int32_t t) { return std::find(r.stop.begin(), r.stop.end(), t) != r.stop.end(); };
  while (int(out.size()) < r.max_tokens && !stops(out.back()))
    out.push_back(s.eval_sample(std::span<const int32_t>(&out.back(), 1), smp));
  return out;
}

class EngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { generate("tiny"); }
  static void TearDownTestSuite() { std::filesystem::remove(path_); }
  // The suite's model: a gen-model preset in q8_0, one file per process (ctest runs each test in
  // its own, in parallel).
  static void generate(const std::string& preset) {
    path_ = ::testing::TempDir() + "/lamina-engine-" + preset + "-q8_0-" + std::to_string(getpid()) + ".gguf";
    shell(std::string(LAMINA_CLI) + " gen-model --preset " + preset + " --type q8_0 --vocab '" + kVocab + "' --seed 7 -o '" +
          path_ + "' 2>&1");
  }

  static SessionOptions options(int n_ctx) {
    SessionOptions o;
    o.model_path = path_;
    o.device = "cpu";
    o.n_ctx = n_ctx;
    o.n_threads = 2;
    return o;
  }

  static Request request(std::mt19937& rng, int prompt_len, int max_tokens, bool sampled, uint64_t seed) {
    Request r;
    std::uniform_int_distribution<int32_t> id(3, 31999);
    for (int i = 0; i < prompt_len; ++i) r.prompt.push_back(id(rng));
    r.max_tokens = max_tokens;
    r.sampling.temperature = sampled ? 0.9f : 0.f;
    r.sampling.seed = seed;
    return r;
  }

  // Streams of the engine's requests, by id.
  struct Streams {
    std::mutex mu;
    std::map<int64_t, std::vector<int32_t>> tokens;
    std::map<int64_t, Finish> finish;
    TokenCallback callback() {
      return [this](const TokenEvent& e) {
        std::lock_guard lk(mu);
        if (e.token >= 0) tokens[e.id].push_back(e.token);
        if (e.finish != Finish::None) finish[e.id] = e.finish;
      };
    }
  };

  static EngineOptions steps_of_16() {
    EngineOptions eo;
    eo.schedule.max_step_tokens = 16;
    return eo;
  }
  // Requests of these prompt lengths (greedy and sampled in turn), `max_tokens` each, prompts in
  // chunks of at most 16 step tokens beside decode rows: each gives what it gives alone, and
  // every block (of a window pool too) comes back. ranks: thread ranks of the engine's session
  // and of the one it is compared with.
  static void expect_each_as_alone(std::initializer_list<int> lens, int max_tokens, unsigned seed,
                                   const EngineOptions& eo = steps_of_16(), int ranks = 1) {
    SessionOptions so = options(512);
    so.tensor_parallel = ranks;
    Session es(so), ref(so);
    Engine engine(es, eo);
    std::mt19937 rng(seed);
    std::vector<Request> reqs;
    for (int len : lens) reqs.push_back(request(rng, len, max_tokens, reqs.size() % 2 == 1, seed * 100 + reqs.size()));
    Streams st;
    std::vector<int64_t> ids;
    for (const Request& r : reqs) ids.push_back(engine.submit(r, st.callback()));
    engine.run_until_idle();
    for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(st.tokens[ids[i]], alone(ref, reqs[i])) << "request " << i;
    EXPECT_EQ(engine.kv().used_blocks(), 0);
    EXPECT_EQ(engine.kv().window_used_blocks(), 0);
  }
  static inline std::string path_;
};

// A token's log probability: the log-softmax of its row, computed here in f64; the top list in
// order of probability, the lower id first among equals.
TEST(Engine, TokenLogprobsAreTheLogSoftmax) {
  const std::vector<float> l = {1.f, 3.f, -2.f, 3.f, 0.5f};
  double z = 0;
  for (float v : l) z += std::exp(double(v));
  const TokenLogprobs lp = token_logprobs(l, 4, 3);
  EXPECT_NEAR(lp.logprob, 0.5 - std::log(z), 1e-6);
  ASSERT_EQ(lp.top.size(), 3u);
  EXPECT_EQ(lp.top[0].first, 1);
  EXPECT_EQ(lp.top[1].first, 3);
  EXPECT_EQ(lp.top[2].first, 0);
  EXPECT_NEAR(lp.top[2].second, 1.0 - std::log(z), 1e-6);
  EXPECT_TRUE(token_logprobs(l, 2, 0).top.empty());
  EXPECT_EQ(token_logprobs(l, 2, 9).top.size(), l.size());
}

TEST_F(EngineTest, ManyRequestsGiveWhatEachGivesAlone) {
  Session es(options(512)), ref(options(512));
  EngineOptions eo;
  eo.schedule.max_step_tokens = 24;  // prompts in chunks, beside the decode rows
  Engine engine(es, eo);
  std::mt19937 rng(1);
  std::vector<Request> reqs;
  for (int len : {3, 17, 40, 5, 33, 64}) reqs.push_back(request(rng, len, 10, reqs.size() % 2 == 1, 100 + reqs.size()));
  Streams st;
  std::vector<int64_t> ids;
  for (const Request& r : reqs) ids.push_back(engine.submit(r, st.callback()));
  engine.run_until_idle();
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(st.tokens[ids[i]], alone(ref, reqs[i])) << "request " << i;
    EXPECT_EQ(st.finish[ids[i]], Finish::Length) << "request " << i;
  }
  const EngineStats s = engine.stats();
  EXPECT_EQ(s.generated, 60);
  // Every prompt token and every generated token but the last of each request is a row once.
  EXPECT_EQ(s.step_tokens, 3 + 17 + 40 + 5 + 33 + 64 + 6 * 9);
  EXPECT_GE(s.steps, (s.step_tokens + 23) / 24);
  EXPECT_EQ(engine.kv().used_blocks(), 0);
}

// The engine over a session of 2 thread ranks (--tensor-parallel 2 on the CPU): each request gives
// what a 2-rank session gives it alone (the ranks' sums run element by element in rank order, so
// a row does not depend on its neighbours), and the greedy ones what one rank gives (exact path).
TEST_F(EngineTest, TwoRanksGiveWhatEachGivesAlone) {
  SessionOptions o = options(512);
  o.exact_matmul = true, o.kv_type = GgmlType::F32;
  SessionOptions o2 = o;
  o2.tensor_parallel = 2;
  Session es(o2), ref2(o2), ref1(o);
  EngineOptions eo;
  eo.schedule.max_step_tokens = 24;
  Engine engine(es, eo);
  std::mt19937 rng(4);
  std::vector<Request> reqs;
  for (int len : {3, 17, 40, 5}) reqs.push_back(request(rng, len, 8, reqs.size() % 2 == 1, 200 + reqs.size()));
  Streams st;
  std::vector<int64_t> ids;
  for (const Request& r : reqs) ids.push_back(engine.submit(r, st.callback()));
  engine.run_until_idle();
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(st.tokens[ids[i]], alone(ref2, reqs[i])) << "request " << i;
    if (reqs[i].sampling.temperature == 0.f) {
      EXPECT_EQ(st.tokens[ids[i]], alone(ref1, reqs[i])) << "request " << i;
    }
  }
  EXPECT_EQ(engine.kv().used_blocks(), 0);
}

// Gemma 3 on the paged cache: the tiny model's local layers see the last 4 positions only (its
// sliding window), its global layer all of them; prompts longer than the window.
class EngineGemma3Test : public EngineTest {
 protected:
  static void SetUpTestSuite() { generate("tiny-gemma3"); }
  // 3 running sequences, steps of 16 tokens: a window pool of 3 x 3 + 1 + 3 = 13 blocks, of the
  // cache's 32 (the default 256 sequences would need more than the cache has: no pool).
  static EngineOptions pooled() {
    EngineOptions eo = steps_of_16();
    eo.schedule.max_running = 3;
    return eo;
  }
};

TEST_F(EngineGemma3Test, ManyRequestsGiveWhatEachGivesAlone) { expect_each_as_alone({2, 9, 30, 5, 21}, 12, 3); }

// One sequence on the CPU: the local layers give back the cache before their window (no slack
// here), so cutting the conversation back below kv_rewind_floor evaluates the kept tokens again,
// and above it goes on from the cache; either way the logits are those of a session that ran
// the same tokens from the start.
TEST_F(EngineGemma3Test, CuttingBackBelowTheKeptWindowEvaluatesTheTokensAgain) {
  Session s(options(512)), ref(options(512));
  auto* cpu = dynamic_cast<CpuBackend*>(&s.backend());
  ASSERT_NE(cpu, nullptr);
  cpu->set_window_slack(0);
  std::mt19937 rng(9);
  std::uniform_int_distribution<int32_t> id(3, 31999);
  std::vector<int32_t> toks(420);
  for (int32_t& t : toks) t = id(rng);
  auto from_start = [&](std::span<const int32_t> a, std::span<const int32_t> b) {
    std::vector<int32_t> all(a.begin(), a.end());
    all.insert(all.end(), b.begin(), b.end());
    ref.reset();
    return ref.eval(all);
  };
  const std::span<const int32_t> t(toks);
  s.eval(t.first(300));
  ASSERT_GT(s.backend().kv_rewind_floor(), 200);
  s.rewind(150);  // below the floor
  EXPECT_EQ(s.n_past(), 150);
  EXPECT_EQ(s.eval(t.subspan(300, 10)), from_start(t.first(150), t.subspan(300, 10)));
  const int floor = s.backend().kv_rewind_floor();
  ASSERT_LE(floor, 158);
  s.rewind(158);  // at or above it: on from the cache
  std::vector<int32_t> kept(t.begin(), t.begin() + 150);
  kept.insert(kept.end(), t.begin() + 300, t.begin() + 308);
  EXPECT_EQ(s.eval(t.subspan(310, 110)), from_start(kept, t.subspan(310, 110)));
}

// The same over two thread ranks (tensor parallelism on the CPU): each rank gives its share of
// the cache back on its own, a cut-back below the ranks' floor evaluates again on both, and the
// logits are those of two ranks that ran the same tokens from the start.
TEST_F(EngineGemma3Test, CuttingBackOverTwoRanksEvaluatesTheTokensAgain) {
  SessionOptions o = options(1024);
  o.tensor_parallel = 2;
  Session s(o), ref(o);
  std::mt19937 rng(10);
  std::uniform_int_distribution<int32_t> id(3, 31999);
  std::vector<int32_t> toks(640);
  for (int32_t& t : toks) t = id(rng);
  const std::span<const int32_t> t(toks);
  s.eval(t.first(600));  // two passes: the local layers give back what is 256 positions past their window
  ASSERT_GT(s.backend().kv_rewind_floor(), 300);
  s.rewind(200);
  const std::vector<float> got = s.eval(t.subspan(600, 20));
  std::vector<int32_t> all(t.begin(), t.begin() + 200);
  all.insert(all.end(), t.begin() + 600, t.begin() + 620);
  ref.reset();
  EXPECT_LE(rel_l2(got, ref.eval(all)), 1e-6);
}

// The local layers' blocks from a pool of their own: prompts and generations past the
// 4-position window, more requests than run at once, sampled and greedy; each gives what it gives
// alone, and the pool's blocks all come back.
TEST_F(EngineGemma3Test, AWindowPoolGivesWhatEachGivesAlone) {
  expect_each_as_alone({40, 9, 70, 5, 33}, 24, 21, pooled());
}

// The same over two thread ranks (each rank's cache takes the same window tables).
TEST_F(EngineGemma3Test, AWindowPoolOverTwoRanksGivesWhatEachGivesAlone) {
  expect_each_as_alone({40, 9, 70}, 16, 23, pooled(), 2);
}

// A prefix found in the cache comes with the local layers' blocks of its last window: a prompt
// of an earlier one's 40 tokens and 10 more reuses its first two blocks (32 tokens) and gives
// what it gives alone. With the default options there is no pool: the local layers then use the
// main blocks.
TEST_F(EngineGemma3Test, APrefixFromTheCacheBringsItsWindow) {
  Session es(options(512)), ref(options(512));
  Engine engine(es, pooled());
  ASSERT_TRUE(engine.kv().windowed());
  EXPECT_EQ(engine.kv().window_blocks(), 13);
  std::mt19937 rng(22);
  const Request first = request(rng, 40, 8, false, 0);
  Request again = request(rng, 10, 12, false, 0);
  again.prompt.insert(again.prompt.begin(), first.prompt.begin(), first.prompt.end());
  Streams st;
  const int64_t a = engine.submit(first, st.callback());
  engine.run_until_idle();
  EXPECT_EQ(engine.stats().cached_tokens, 0);
  const int64_t b = engine.submit(again, st.callback());
  engine.run_until_idle();
  EXPECT_EQ(engine.stats().cached_tokens, 32);
  EXPECT_EQ(st.tokens[a], alone(ref, first));
  EXPECT_EQ(st.tokens[b], alone(ref, again));
  Session es2(options(512));
  EXPECT_FALSE(Engine(es2, EngineOptions{}).kv().windowed());
}

// A mixture of experts (4 experts, 2 per token): the router groups a pass's rows by expert, so a
// batch mixes tokens of several sequences in each expert's matmuls.
class EngineMoeTest : public EngineTest {
 protected:
  static void SetUpTestSuite() { generate("tiny-moe"); }
};

TEST_F(EngineMoeTest, ManyRequestsGiveWhatEachGivesAlone) { expect_each_as_alone({3, 12, 25, 7}, 10, 5); }

TEST_F(EngineTest, CachedPrefixesAreNotComputedAgain) {
  Session es(options(512)), ref(options(512));
  Engine engine(es, EngineOptions{});
  std::mt19937 rng(2);
  const Request first = request(rng, 50, 4, false, 0);
  Streams st;
  engine.submit(first, st.callback());
  engine.run_until_idle();
  std::vector<Request> more;
  std::vector<int64_t> ids;
  for (int i = 0; i < 3; ++i) {
    Request r = request(rng, 4, 6, i == 1, 7 + uint64_t(i));
    r.prompt.insert(r.prompt.begin(), first.prompt.begin(), first.prompt.begin() + 48);  // 3 blocks of 16
    more.push_back(r);
    ids.push_back(engine.submit(r, st.callback()));
  }
  engine.run_until_idle();
  for (size_t i = 0; i < more.size(); ++i) EXPECT_EQ(st.tokens[ids[i]], alone(ref, more[i])) << "request " << i;
  const EngineStats s = engine.stats();
  EXPECT_EQ(s.cached_tokens, 3 * 48);
  EXPECT_EQ(s.step_tokens, 50 + 3 + 3 * (52 - 48 + 5));
}

TEST_F(EngineTest, PreemptedRequestsGiveWhatEachGivesAlone) {
  Session es(options(96)), ref(options(512));  // 6 blocks of 16 positions
  Engine engine(es, EngineOptions{});
  std::mt19937 rng(3);
  std::vector<Request> reqs;
  for (int i = 0; i < 3; ++i) reqs.push_back(request(rng, 20, 40, i == 2, 50 + uint64_t(i)));
  Streams st;
  std::vector<int64_t> ids;
  for (const Request& r : reqs) ids.push_back(engine.submit(r, st.callback()));
  engine.run_until_idle();
  EXPECT_GT(engine.stats().preemptions, 0);
  for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(st.tokens[ids[i]], alone(ref, reqs[i])) << "request " << i;
}

TEST_F(EngineTest, StopTokensEndARequest) {
  Session es(options(256)), ref(options(256));
  Engine engine(es, EngineOptions{});
  std::mt19937 rng(4);
  Request r = request(rng, 8, 20, false, 0);
  const std::vector<int32_t> free_run = alone(ref, r);
  r.stop = {free_run[3]};
  const auto cut = std::find(free_run.begin(), free_run.end(), free_run[3]);
  Streams st;
  const int64_t id = engine.submit(r, st.callback());
  engine.run_until_idle();
  EXPECT_EQ(st.tokens[id], std::vector<int32_t>(free_run.begin(), cut + 1));
  EXPECT_EQ(st.finish[id], Finish::Stop);
}

TEST_F(EngineTest, CancelsAndSubmissionsFromThreads) {
  Session es(options(1024)), ref(options(512));
  EngineOptions eo;
  eo.schedule.max_step_tokens = 32;
  Engine engine(es, eo);
  engine.start();
  std::mt19937 rng(5);
  // A long request cancelled after its first token; one cancelled while it waits behind it.
  std::atomic<int> first_tokens{0};
  Streams st;
  TokenCallback count = [&](const TokenEvent& e) {
    if (e.token >= 0) ++first_tokens;
    st.callback()(e);
  };
  const int64_t a = engine.submit(request(rng, 30, 500, false, 0), count);
  while (first_tokens.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_TRUE(engine.cancel(a));
  // Requests from four threads at once, all greedy or seeded: each gives what it gives alone.
  std::vector<Request> reqs;
  for (int i = 0; i < 8; ++i) reqs.push_back(request(rng, 6 + 5 * i, 8, i % 3 == 0, 300 + uint64_t(i)));
  std::vector<int64_t> ids(reqs.size());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (size_t i = size_t(t); i < reqs.size(); i += 4) ids[i] = engine.submit(reqs[i], st.callback());
    });
  for (auto& th : threads) th.join();
  for (int spin = 0; spin < 20000; ++spin) {
    {
      std::lock_guard lk(st.mu);
      if (st.finish.size() == reqs.size() + 1) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  engine.stop();
  std::lock_guard lk(st.mu);
  EXPECT_EQ(st.finish[a], Finish::Cancelled);
  EXPECT_LT(st.tokens[a].size(), 500u);
  EXPECT_FALSE(engine.cancel(a));  // ended already
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(st.finish[ids[i]], Finish::Length) << "request " << i;
    EXPECT_EQ(st.tokens[ids[i]], alone(ref, reqs[i])) << "request " << i;
  }
}

// lamina bench --parallel: one table row per sequence count with every column filled; bad lists
// are one line on stderr and exit status 1.
TEST_F(EngineTest, BenchParallelPrintsOneRowPerCount) {
  const std::string cli = std::string(LAMINA_CLI) + " bench -m '" + path_ + "' -d cpu -t 2 ";
  const std::string out = shell(cli + "--parallel 1,3 -p 12 -n 4 --prefix 8 2>&1");
  EXPECT_NE(out.find("| parallel | requests |    gen t/s"), std::string::npos) << out;
  for (const char* row : {"|        1 |        2 |", "|        3 |        6 |"}) EXPECT_NE(out.find(row), std::string::npos) << out;
  // KV waste: each sequence holds 12 to 16 tokens in one block of 16 (the shared 8-token prefix
  // fills no block), so between 0 and 4 of its 16 positions are empty: 0 to 25 %, and 25 % at
  // admission.
  EXPECT_NE(out.find("KV waste %"), std::string::npos) << out;
  const size_t row3 = out.find("|        3 |        6 |"), end = out.find('\n', row3);
  ASSERT_NE(row3, std::string::npos);
  const std::string line = out.substr(row3, end - row3 - 1);  // (up to the closing '|')
  const double waste = std::stod(line.substr(line.rfind('|', line.size() - 1) + 1));
  EXPECT_GT(waste, 0.0) << line;
  EXPECT_LE(waste, 25.0) << line;
  EXPECT_NE(out.find("prompt tokens found in the prefix cache"), std::string::npos) << out;
  // Blocks of 4: the shared 8-token prefix fills two, found in the cache by later prompts unless
  // --no-prefix-cache.
  const auto cached = [&](const std::string& flags) {
    const std::string o = shell(cli + "--parallel 3 -p 12 -n 4 --prefix 8 --kv-block 4 " + flags + " 2>&1");
    const size_t at = o.find(" prompt tokens found in the prefix cache");
    const size_t open = at == std::string::npos ? at : o.rfind('(', at);
    EXPECT_NE(open, std::string::npos) << o;
    return open == std::string::npos ? -1 : std::atoi(o.c_str() + open + 1);
  };
  EXPECT_GT(cached(""), 0);
  EXPECT_EQ(cached("--no-prefix-cache"), 0);
  // --waves 3: three requests per sequence at once.
  const std::string w3 = shell(cli + "--parallel 2 -p 12 -n 4 --waves 3 2>&1");
  EXPECT_NE(w3.find("|        2 |        6 |"), std::string::npos) << w3;
  // --ramp: the first requests start spread over the given seconds; the row still has them all,
  // and takes at least the ramp (its last request starts 2/3 of 0.3 s in).
  const auto t_ramp = std::chrono::steady_clock::now();
  const std::string ramp = shell(cli + "--parallel 3 -p 12 -n 4 --ramp 0.3 2>&1");
  EXPECT_NE(ramp.find("|        3 |        6 |"), std::string::npos) << ramp;
  EXPECT_GE(std::chrono::duration<double>(std::chrono::steady_clock::now() - t_ramp).count(), 0.2);
  // A step budget below one prompt: every prompt goes in chunks, and the rows still come out.
  const std::string small = shell(cli + "--parallel 3 -p 12 -n 4 --max-step-tokens 5 2>&1");
  EXPECT_NE(small.find("|        3 |        6 |"), std::string::npos) << small;
  for (const char* bad : {"--parallel 0", "--parallel 2,x", "--parallel 2 -p 4 --prefix 5", "--parallel 2 --kv-block 0",
                          "--parallel 2 --max-step-tokens 0", "--parallel 1,4 --max-step-tokens 3", "--parallel 2 --waves 0",
                          "--parallel 2 --ramp -1", "--parallel 2 --ramp nan"}) {
    const std::string err = shell(cli + bad + " 2>&1 >/dev/null; echo rc=$?");
    EXPECT_NE(err.find("rc=1"), std::string::npos) << bad << ": " << err;
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 2) << bad << ": " << err;  // one line, then rc
  }
}

TEST_F(EngineTest, RequestsThatCanNeverRunAreRefused) {
  Session es(options(64));
  Engine engine(es, EngineOptions{});
  Request r;
  EXPECT_THROW(engine.submit(r, nullptr), Error);  // empty prompt
  r.prompt = {1, 2, 40000};
  EXPECT_THROW(engine.submit(r, nullptr), Error);  // outside the vocabulary
  r.prompt = std::vector<int32_t>(60, 5);
  r.max_tokens = 10;
  EXPECT_THROW(engine.submit(r, nullptr), Error);  // 70 positions in a cache of 64
  r.max_tokens = 0;
  EXPECT_THROW(engine.submit(r, nullptr), Error);
}

// The default model in exact mode, as CI runs it: 32 sequences of different prompt lengths (some
// sharing a 40-token prefix), half joining after the first steps, two cancelled midway, in a
// cache too small for all of them at once (so some are preempted and recomputed): each sequence's
// greedy tokens equal the tokens it gets alone (a cancelled one's, a prefix of them), with prefix
// caching on and off.
TEST(EngineSmol, MixedBatchGivesEachSequenceWhatItGetsAlone) {
  const std::string model = default_model();
  if (!std::filesystem::exists(model)) GTEST_SKIP() << "SmolLM2 not found at " << model << " (set LAMINA_MODEL)";
  auto options = [&](int n_ctx) {
    SessionOptions o;
    o.model_path = model;
    o.device = "cpu";
    o.n_ctx = n_ctx;
    o.exact_matmul = true;
    return o;
  };
  Session ref(options(256));
  std::mt19937 rng(8);
  std::uniform_int_distribution<int32_t> id(100, 40000);
  std::vector<int32_t> shared(40);
  for (auto& t : shared) t = id(rng);
  std::vector<Request> reqs;
  for (int i = 0; i < 32; ++i) {
    Request r;
    if (i % 4 == 0) r.prompt = shared;
    for (int j = 0, n = 3 + (i * 7) % 50; j < n; ++j) r.prompt.push_back(id(rng));
    r.max_tokens = 10;
    r.sampling.temperature = 0;
    reqs.push_back(std::move(r));
  }
  std::vector<std::vector<int32_t>> want;
  for (const Request& r : reqs) want.push_back(alone(ref, r));
  for (bool cache : {true, false}) {
    SCOPED_TRACE(cache ? "prefix cache on" : "prefix cache off");
    Session es(options(400));  // 25 blocks of 16: about a fifth of what all 32 would hold
    EngineOptions eo;
    eo.prefix_cache = cache;
    eo.schedule.max_step_tokens = 64;
    Engine engine(es, eo);
    std::map<int64_t, std::vector<int32_t>> got;
    std::map<int64_t, Finish> finish;
    TokenCallback cb = [&](const TokenEvent& e) {
      if (e.token >= 0) got[e.id].push_back(e.token);
      if (e.finish != Finish::None) finish[e.id] = e.finish;
    };
    std::vector<int64_t> ids;
    for (int i = 0; i < 16; ++i) ids.push_back(engine.submit(reqs[size_t(i)], cb));
    for (int k = 0; k < 4; ++k) engine.step();
    for (int i = 16; i < 32; ++i) ids.push_back(engine.submit(reqs[size_t(i)], cb));
    engine.step();
    const std::set<size_t> cancelled{20, 29};  // still waiting or in their prompts
    for (size_t i : cancelled) EXPECT_TRUE(engine.cancel(ids[i]));
    engine.run_until_idle();
    for (size_t i = 0; i < reqs.size(); ++i) {
      const std::vector<int32_t>& g = got[ids[i]];
      if (cancelled.count(i)) {
        EXPECT_EQ(finish[ids[i]], Finish::Cancelled) << "request " << i;
        EXPECT_TRUE(std::equal(g.begin(), g.end(), want[i].begin())) << "request " << i;
      } else {
        EXPECT_EQ(finish[ids[i]], Finish::Length) << "request " << i;
        EXPECT_EQ(g, want[i]) << "request " << i;
      }
    }
    const EngineStats s = engine.stats();
    EXPECT_GT(s.preemptions, 0);
    if (cache) EXPECT_GT(s.cached_tokens, 0);
    else EXPECT_EQ(s.cached_tokens, 0);
    std::printf("engine, SmolLM2 exact, prefix cache %s: %lld steps, %lld rows, %lld cached prompt tokens, %lld preemptions\n",
                cache ? "on" : "off", (long long)s.steps, (long long)s.step_tokens, (long long)s.cached_tokens,
                (long long)s.preemptions);
  }
}

}  // namespace
