// The step plan and its fusion pass on whole models: every architecture's forward pass recorded,
// fused with the CUDA backend's rules and run on the CPU (tests/plan_on_cpu.h), against the
// plain CPU backend. A prompt of 11 rows (GEMM inputs: 16-bit copies), three rows (int8 copies),
// then decode steps of one row (pending norms, the logits row's argmax): the same logits bit for
// bit, and the fusions did happen.
#include "golden_util.h"
#include "model/llama.h"
#include "plan_on_cpu.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <numeric>
#include <tuple>

namespace lamina::test {
namespace {

struct Passes {
  std::vector<std::vector<float>> logits;
};

// The prompt, then three rows, then four single-row steps; the logits of each pass's last row.
Passes run_model(const GgufFile& f, Backend& be, const std::vector<int32_t>& prompt) {
  LlamaModel m(f, be);
  m.init_cache(64, GgmlType::F16);
  Passes r;
  int32_t p0 = 0;
  auto pass = [&](std::vector<int32_t> toks) {
    std::vector<int32_t> pos(toks.size());
    std::iota(pos.begin(), pos.end(), p0);
    p0 += int32_t(toks.size());
    r.logits.emplace_back();
    m.forward(toks, pos, false, r.logits.back());
  };
  pass(prompt);
  pass({7, 8, 9});
  for (int32_t t : {3, 4, 5, 6}) pass({t});
  return r;
}

class StepPlanModel : public ::testing::TestWithParam<std::string> {};

TEST_P(StepPlanModel, FusedPlanGivesThePlainOpsLogits) {
  const json c = golden_case(GetParam());
  ASSERT_FALSE(c.is_null()) << GetParam();
  const std::string path = ::testing::TempDir() + "/lamina-plan-" + GetParam() + ".gguf";
  gen_model(c["gen"]["preset"], c["gen"]["type"], 42, path);
  ASSERT_TRUE(std::filesystem::exists(path)) << path;
  const GgufFile f = GgufFile::open(path);
  const std::vector<int32_t> prompt = c["tokens"].get<std::vector<int32_t>>();
  CpuBackend plain(2), under(2);
  PlanOnCpu planned(under);
  const Passes want = run_model(f, plain, prompt), got = run_model(f, planned, prompt);
  ASSERT_EQ(got.logits.size(), want.logits.size());
  for (size_t i = 0; i < want.logits.size(); ++i) EXPECT_EQ(got.logits[i], want.logits[i]) << "pass " << i;
  EXPECT_GT(planned.fused_nodes, 0);
  EXPECT_GT(planned.copies_read, 0);
  const bool pending = c["gen"]["preset"] != "tiny-gemma3";  // (Gemma: post-norms, its lookup scaled: none pending)
  if (pending) {
    EXPECT_GT(planned.taken_norms, 0);
  }
  std::filesystem::remove(path);
}

// The engine's passes over a paged cache (several sequences, rows picked for logits, decode rows
// of three sequences in one pass): the same through the fused plan as through the plain ops.
TEST(StepPlanModel, PagedPassesGiveThePlainOpsLogits) {
  const std::string path = ::testing::TempDir() + "/lamina-plan-paged.gguf";
  gen_model("tiny-llama3", "q8_0", 7, path);
  ASSERT_TRUE(std::filesystem::exists(path));
  const GgufFile f = GgufFile::open(path);
  constexpr int kBlock = 16;
  const std::vector<std::vector<int32_t>> tables{{5, 2}, {9, 0, 14}, {7}};
  const std::vector<std::span<const int32_t>> spans(tables.begin(), tables.end());
  // per pass: (sequence, first position, rows)
  const std::vector<std::vector<std::tuple<int, int, int>>> passes{
      {{0, 0, 20}, {1, 0, 30}}, {{0, 20, 1}, {1, 30, 1}, {2, 0, 10}}, {{0, 21, 1}, {1, 31, 1}, {2, 10, 1}}, {{2, 11, 1}}};
  auto run = [&](Backend& be) {
    LlamaModel m(f, be);
    m.init_cache(256, GgmlType::F16);
    std::vector<std::vector<float>> out;
    for (const auto& pass : passes) {
      std::vector<int32_t> tokens, pos, row_seq, pick;
      for (const auto& [q, first, rows] : pass) {
        for (int i = 0; i < rows; ++i) tokens.push_back(3 + (q * 37 + first + i) % 90), pos.push_back(first + i), row_seq.push_back(q);
        pick.push_back(int32_t(tokens.size()) - 1);
      }
      const KvLayout layout{kBlock, row_seq, spans};
      const Tensor lg = m.forward_batch(tokens, pos, layout, pick);
      out.emplace_back(size_t(lg.rows * lg.cols));
      be.read(lg, out.back().data());
    }
    return out;
  };
  CpuBackend plain(2), under(2);
  PlanOnCpu planned(under);
  const auto want = run(plain), got = run(planned);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[i], want[i]) << "pass " << i;
  EXPECT_GT(planned.fused_nodes, 0);
  std::filesystem::remove(path);
}

INSTANTIATE_TEST_SUITE_P(Models, StepPlanModel,
                         ::testing::Values("tiny-f16", "tiny-q8_0", "tiny-q4_0", "tiny-q4_K", "tiny-qwen2-q8_0",
                                           "tiny-llama3-q8_0", "tiny-qwen3-q8_0", "tiny-gemma3-q8_0", "tiny-phi3-q8_0",
                                           "tiny-phi3-longrope-q8_0", "tiny-moe-q8_0", "tiny-qwen3moe-q8_0"),
                         [](const auto& p) { return case_param_name(p.param); });

}  // namespace
}  // namespace lamina::test
