// Malformed GGUF input: the committed corpus with expected messages, every truncation of a
// valid file, and byte corruptions. The reader must throw lamina::Error, never crash.
#include "core/error.h"
#include "format/gguf.h"
#include "model/config.h"

#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <random>
#include <sstream>

using namespace lamina;

namespace {

const std::string kCorpus = std::string(LAMINA_TEST_DATA) + "/gguf_bad";

// Runs `load` on every file of a corpus listing (file<TAB>message substring) and checks that it
// throws one line naming the file and containing the message; returns how many were listed.
int check_listing(const std::string& listing, const std::function<void(const std::string&)>& load) {
  std::ifstream list(kCorpus + "/" + listing);
  EXPECT_TRUE(list) << "missing " << kCorpus << "/" << listing;
  std::string line;
  int n = 0;
  while (std::getline(list, line)) {
    const size_t tab = line.find('\t');
    EXPECT_NE(tab, std::string::npos) << line;
    if (tab == std::string::npos) continue;
    const std::string file = kCorpus + "/" + line.substr(0, tab), want = line.substr(tab + 1);
    SCOPED_TRACE(file);
    try {
      load(file);
      ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(want), std::string::npos) << "message: " << msg << "\nwant: " << want;
      EXPECT_NE(msg.find(file), std::string::npos) << "message does not name the file: " << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << "message spans lines: " << msg;
    }
    ++n;
  }
  return n;
}

TEST(GgufMalformed, CorpusGivesExpectedMessages) {
  EXPECT_GE(check_listing("expected.txt", [](const std::string& f) { GgufFile::open(f); }), 30);
}

// Well-formed files with hyper-parameters no model can run (NaN, zero, negative, inconsistent):
// the reader accepts them, the model configuration refuses each with a message naming the key.
TEST(GgufMalformed, OutOfRangeConfigurationsAreRefused) {
  const int n = check_listing("expected_config.txt", [](const std::string& path) {
    const GgufFile f = GgufFile::open(path);  // well-formed: must not throw here
    ModelConfig::from_gguf(f);
  });
  EXPECT_GE(n, 17);
}

std::vector<uint8_t> valid_file() {
  GgufWriter w;
  w.set_str("general.architecture", "llama");
  w.set_u32("llama.block_count", 2);
  w.set_str_array("tokenizer.ggml.tokens", {"a", "b", "c"});
  w.set_f32_array("tokenizer.ggml.scores", {0.f, -1.f, -2.f});
  w.add_tensor("w", GgmlType::Q4_0, {64, 2}, [](uint8_t* d, size_t n) { for (size_t i = 0; i < n; ++i) d[i] = uint8_t(i); });
  w.add_tensor("v", GgmlType::F32, {5}, [](uint8_t* d, size_t n) { for (size_t i = 0; i < n; ++i) d[i] = 0; });
  return w.to_bytes();
}

TEST(GgufMalformed, EveryTruncationIsAnError) {
  const auto full = valid_file();
  ASSERT_NO_THROW(GgufFile::parse(full.data(), full.size(), "full"));
  // The last tensor ends at v.offset + 20; anything shorter must be rejected.
  const GgufFile ok = GgufFile::parse(full.data(), full.size(), "full");
  const size_t needed = ok.data_offset() + ok.tensor("v").offset + ok.tensor("v").nbytes;
  for (size_t len = 0; len < needed; ++len) {
    std::vector<uint8_t> cut(full.begin(), full.begin() + long(len));  // own buffer: ASan sees overreads
    EXPECT_THROW(GgufFile::parse(cut.data(), cut.size(), "cut"), Error) << "length " << len;
  }
}

TEST(GgufMalformed, RandomCorruptionNeverCrashes) {
  const auto full = valid_file();
  std::mt19937 rng(1234);
  int rejected = 0;
  for (int iter = 0; iter < 4000; ++iter) {
    std::vector<uint8_t> b = full;
    const int flips = 1 + int(rng() % 4);
    for (int k = 0; k < flips; ++k) b[rng() % b.size()] = uint8_t(rng());
    try {
      const GgufFile f = GgufFile::parse(b.data(), b.size(), "fuzz");
      for (const auto& t : f.tensors()) {  // accepted: every tensor lies inside the buffer
        ASSERT_GE(t.data, b.data());
        ASSERT_LE(t.data + t.nbytes, b.data() + b.size());
      }
    } catch (const Error&) {
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 100);
}

}  // namespace
