// Tokenizer tests: llama.cpp's own vectors (../shared/data/vocab/*.inp/.out) must match exactly.
#include "format/gguf.h"
#include "format/tokenizer.h"
#include "format/unicode.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

using namespace lamina;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string vocab_path(const std::string& name) {
  return std::string(LAMINA_SHARED_DIR) + "/data/vocab/ggml-vocab-" + name + ".gguf";
}

// Further llama.cpp vocabularies fetched by scripts/fetch-vocab.sh (LAMINA_VOCAB_DIR).
std::string extra_vocab_dir() {
  const char* d = std::getenv("LAMINA_VOCAB_DIR");
  return d ? d : "";
}

struct Case {
  std::string text;
  std::vector<Token> ids;
};

std::vector<Case> load_cases(const std::string& gguf) {
  const std::string inp = slurp(gguf + ".inp"), out = slurp(gguf + ".out");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<Case> cases;
  for (size_t pos = 0; pos < inp.size();) {
    const size_t end = inp.find(sep, pos);
    if (end == std::string::npos) break;
    cases.push_back({inp.substr(pos, end - pos), {}});
    pos = end + sep.size();
  }
  std::istringstream lines(out);
  std::string line;
  for (auto& c : cases) {
    std::getline(lines, line);
    std::istringstream ids(line);
    Token t;
    while (ids >> t) c.ids.push_back(t);
  }
  return cases;
}

std::string join(const std::vector<Token>& v) {
  std::string s;
  for (Token t : v) {
    s += ' ';
    s += std::to_string(t);
  }
  return s;
}

class VocabVectors : public ::testing::TestWithParam<std::string> {};

void expect_vectors_match(const std::string& path) {
  const GgufFile f = GgufFile::open(path);
  const Tokenizer tok = Tokenizer::from_gguf(f);
  const auto cases = load_cases(path);
  ASSERT_GE(cases.size(), 40u);
  int failures = 0;
  for (const auto& c : cases) {
    const auto got = tok.tokenize(c.text, false, false);
    if (got != c.ids) {
      ++failures;
      ADD_FAILURE() << "text '" << c.text << "'\n  want" << join(c.ids) << "\n  got " << join(got);
    }
  }
  EXPECT_EQ(failures, 0);
}

TEST_P(VocabVectors, MatchLlamaCpp) { expect_vectors_match(vocab_path(GetParam())); }

// Every further vocabulary with a supported tokenizer model (llama/gpt2) and test vectors.
TEST(ExtraVocabs, MatchLlamaCpp) {
  const std::string dir = extra_vocab_dir();
  if (dir.empty() || !std::filesystem::exists(dir))
    GTEST_SKIP() << "LAMINA_VOCAB_DIR not set or missing: run scripts/fetch-vocab.sh";
  int tested = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string p = e.path().string();
    if (!p.ends_with(".gguf") || !std::filesystem::exists(p + ".inp")) continue;
    const GgufFile f = GgufFile::open(p);
    const std::string model = f.get_string("tokenizer.ggml.model").value_or("");
    if (model != "llama" && model != "gpt2") continue;  // bert (WPM) etc. are not implemented
    SCOPED_TRACE(p);
    expect_vectors_match(p);
    ++tested;
  }
  EXPECT_GE(tested, 10);
}

TEST_P(VocabVectors, DetokenizeRoundTrip) {
  // Decoding the expected ids and re-encoding gives the same ids for ordinary text.
  const std::string path = vocab_path(GetParam());
  const GgufFile f = GgufFile::open(path);
  const Tokenizer tok = Tokenizer::from_gguf(f);
  const std::string text = "Hello world! Numbers 12345, and ünïcödé — 你好.";
  const auto ids = tok.tokenize(text, false, false);
  std::string bytes;
  for (Token t : ids) bytes += tok.token_to_piece(t);
  if (tok.kind() == Tokenizer::Kind::Spm) {
    ASSERT_EQ(bytes.substr(0, 1), " ");  // the space prefix
    bytes.erase(0, 1);
  }
  EXPECT_EQ(bytes, text);
}

INSTANTIATE_TEST_SUITE_P(Shared, VocabVectors, ::testing::Values("llama-spm", "gpt-2", "starcoder"),
                         [](const auto& param_info) {
                           std::string n = param_info.param;
                           for (char& c : n) if (c == '-') c = '_';
                           return n;
                         });

TEST(Tokenizer, SpmSpecialTokensAndBos) {
  const GgufFile f = GgufFile::open(vocab_path("llama-spm"));
  const Tokenizer tok = Tokenizer::from_gguf(f);
  EXPECT_EQ(tok.bos(), 1);
  EXPECT_EQ(tok.eos(), 2);
  const auto with_bos = tok.tokenize("Hello", true, false);
  ASSERT_FALSE(with_bos.empty());
  EXPECT_EQ(with_bos[0], 1);
  // With parse_special, "</s>" in the text becomes the EOS token; without, it is plain text.
  const auto parsed = tok.tokenize("a</s>b", false, true);
  EXPECT_NE(std::find(parsed.begin(), parsed.end(), 2), parsed.end());
  const auto plain = tok.tokenize("a</s>b", false, false);
  EXPECT_EQ(std::find(plain.begin(), plain.end(), 2), plain.end());
  // Byte fallback: a character with no token of its own becomes <0xNN> byte tokens.
  const auto bytes = tok.tokenize("\x01", false, false);
  ASSERT_FALSE(bytes.empty());
  EXPECT_EQ(tok.text(bytes.back()), "<0x01>");
}

TEST(Tokenizer, StreamingPiecesReassembleUtf8) {
  const GgufFile f = GgufFile::open(vocab_path("gpt-2"));
  const Tokenizer tok = Tokenizer::from_gguf(f);
  const std::string text = "日本語のテキスト🙂";
  const auto ids = tok.tokenize(text, false, false);
  Utf8Stream stream;
  std::string out;
  for (Token t : ids) {
    const std::string chunk = stream.push(tok.token_to_piece(t));
    // Every chunk released is whole UTF-8 (no partial character at its end).
    if (!chunk.empty()) {
      const unsigned char last = static_cast<unsigned char>(chunk.back());
      EXPECT_TRUE(last < 0x80 || (last & 0xC0) == 0x80);
    }
    out += chunk;
  }
  out += stream.flush();
  EXPECT_EQ(out, text);
}

}  // namespace
