// Tests on the default model (SmolLM2-135M-Instruct Q4_1, fetched by scripts/fetch-model.sh).
// When the model cannot be found they are skipped with a visible message, never passed.
#include "format/gguf.h"
#include "format/quant.h"
#include "format/tokenizer.h"
#include "model/config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>

using namespace lamina;

namespace {

std::string model_path() {
  if (const char* p = std::getenv("LAMINA_MODEL")) return p;
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "") + "/.cache/lamina/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

#define REQUIRE_MODEL()                                                                       \
  if (!std::filesystem::exists(model_path()))                                                 \
    GTEST_SKIP() << "default model not found at " << model_path()                             \
                 << " (run scripts/fetch-model.sh)";

TEST(DefaultModel, HyperParameters) {
  REQUIRE_MODEL();
  const GgufFile f = GgufFile::open(model_path());
  const ModelConfig c = ModelConfig::from_gguf(f);
  EXPECT_EQ(c.arch, "llama");
  EXPECT_EQ(c.n_layer, 30u);
  EXPECT_EQ(c.n_embd, 576u);
  EXPECT_EQ(c.n_head, 9u);
  EXPECT_EQ(c.n_head_kv, 3u);
  EXPECT_EQ(c.head_dim, 64u);
  EXPECT_EQ(c.n_ff, 1536u);
  EXPECT_EQ(c.n_vocab, 49152u);
}

TEST(DefaultModel, EveryTensorDequantisesFinite) {
  REQUIRE_MODEL();
  const GgufFile f = GgufFile::open(model_path());
  ASSERT_EQ(f.tensors().size(), 272u);  // 30 layers x 9 + token_embd + output_norm
  std::vector<float> row;
  for (const auto& t : f.tensors()) {
    row.resize(size_t(t.ne[0]));
    const size_t rb = row_bytes(t.type, t.ne[0]);
    double sumsq = 0;
    for (int64_t r = 0; r < t.nrows(); ++r) {
      dequantize_row(t.type, t.data + size_t(r) * rb, row.data(), t.ne[0]);
      for (float v : row) {
        ASSERT_TRUE(std::isfinite(v)) << t.name << " row " << r;
        sumsq += double(v) * v;
      }
    }
    EXPECT_GT(sumsq, 0.0) << t.name << " is all zeros";
  }
}

TEST(DefaultModel, TokenizerRoundTrip) {
  REQUIRE_MODEL();
  const GgufFile f = GgufFile::open(model_path());
  const Tokenizer tok = Tokenizer::from_gguf(f);
  EXPECT_EQ(tok.pre(), "smollm");
  const std::string text = "The quick brown fox jumps over the lazy dog. 2024! <|im_start|>";
  const auto ids = tok.tokenize(text, true, true);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids.back(), tok.find("<|im_start|>"));
  EXPECT_EQ(tok.detokenize(ids, true, true), text);
}

}  // namespace
