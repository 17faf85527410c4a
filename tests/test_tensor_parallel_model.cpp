// The model split over ranks on the CPU (issue #35): 2 and 4 thread ranks, each with its share
// of the weights and its KV heads, an all-reduce after Wo and after down, and the greedy id
// picked over the split vocabulary, give the tokens of the whole model (exact matmuls), and
// logits within rounding of it. 4 ranks over 2 KV heads replicate each KV head twice.
#include "backend/cpu/cpu_backend.h"
#include "format/gguf.h"
#include "golden_util.h"
#include "model/llama.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <thread>
#include <unistd.h>

using namespace lamina;
using namespace lamina::test;

namespace {

struct Decoded {
  std::vector<int32_t> tokens;   // the greedy continuation
  std::vector<float> first;      // the logits after the prompt (the whole vocabulary)
};

constexpr int kSteps = 12;
const std::vector<int32_t> kPrompt{1, 450, 4996, 17354, 1701, 432, 17204, 975};

// Greedy decoding on one rank (the whole model when tp is null).
Decoded decode(const GgufFile& f, const LlamaModel::TpRank* tp) {
  CpuBackend be(1, true);
  LlamaModel m(f, be, tp);
  m.init_cache(64, GgmlType::F32);
  Decoded run;
  std::vector<int32_t> ctx = kPrompt;
  std::vector<int32_t> pos(ctx.size());
  for (size_t i = 0; i < pos.size(); ++i) pos[i] = int32_t(i);
  std::vector<int32_t> step = ctx;
  for (int s = 0; s <= kSteps; ++s) {
    const Tensor lg = m.forward(step, pos, LlamaModel::Logits::Last);
    std::vector<float> host(size_t(lg.cols));
    be.read(lg, host.data());
    int32_t next = 0;
    if (tp) {
      next = tp_argmax(*tp->comm, host.data(), lg.cols, tp->plan.vocab.first);
      if (s == 0) {
        run.first.resize(size_t(lg.cols) * size_t(tp->plan.ranks));
        tp->comm->all_gather(host.data(), size_t(lg.cols), run.first.data());
      }
    } else {
      next = int32_t(std::max_element(host.begin(), host.end()) - host.begin());
      if (s == 0) run.first = host;
    }
    if (s == kSteps) break;
    run.tokens.push_back(next);
    step = {next};
    pos = {int32_t(ctx.size())};
    ctx.push_back(next);
  }
  return run;
}

TEST(TensorParallelModel, TwoAndFourRanksGiveTheWholeModelsTokens) {
  const std::string path = ::testing::TempDir() + "/lamina-tp-tiny-q8_0-" + std::to_string(getpid()) + ".gguf";
  shell(std::string(LAMINA_CLI) + " gen-model --preset tiny --type q8_0 --vocab '" + kVocab + "' --seed 5 -o '" + path +
        "' 2>&1");
  {
    const GgufFile f = GgufFile::open(path);
    const Decoded whole = decode(f, nullptr);
    ASSERT_EQ(whole.tokens.size(), size_t(kSteps));
    const ModelConfig c = ModelConfig::from_gguf(f);
    for (int n : {2, 4}) {
      ThreadGroup group(n);
      std::vector<Decoded> runs(static_cast<size_t>(n));
      std::vector<std::string> errors(static_cast<size_t>(n));
      std::vector<std::thread> threads;
      for (int r = 0; r < n; ++r)
        threads.emplace_back([&, r] {
          try {
            auto comm = group.member(r);
            const LlamaModel::TpRank rank{TpPlan::make(c, n, r), comm.get()};
            runs[size_t(r)] = decode(f, &rank);
          } catch (const std::exception& e) {
            errors[size_t(r)] = e.what();
          }
        });
      for (auto& t : threads) t.join();
      for (int r = 0; r < n; ++r) {
        ASSERT_EQ(errors[size_t(r)], "") << n << " ranks, rank " << r;
        EXPECT_EQ(runs[size_t(r)].tokens, whole.tokens) << n << " ranks, rank " << r;
      }
      const double e = rel_l2(runs[0].first, whole.first);
      EXPECT_LE(e, 1e-5) << n << " ranks";
      std::printf("tensor parallel, %d ranks: %d greedy tokens equal to the whole model's; logits rel. L2 %.2e\n", n,
                  kSteps, e);
    }
  }
  std::filesystem::remove(path);
}

TEST(TensorParallelModel, AGroupThatDoesNotMatchThePlanIsRefused) {
  const std::string path = ::testing::TempDir() + "/lamina-tp-tiny-bad-" + std::to_string(getpid()) + ".gguf";
  shell(std::string(LAMINA_CLI) + " gen-model --preset tiny --type q8_0 --vocab '" + kVocab + "' --seed 5 -o '" + path +
        "' 2>&1");
  {
    const GgufFile f = GgufFile::open(path);
    const ModelConfig c = ModelConfig::from_gguf(f);
    auto one = single_rank();
    const LlamaModel::TpRank rank{TpPlan::make(c, 2, 0), one.get()};
    CpuBackend be(1, true);
    EXPECT_THROW(LlamaModel(f, be, &rank), Error);
  }
  std::filesystem::remove(path);
}

}  // namespace
