// Malformed GGUF input: the committed corpus with expected messages, every truncation of a
// valid file, and byte corruptions. The reader must throw lamina::Error, never crash.
#include "core/error.h"
#include "format/gguf.h"
#include "model/config.h"

#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <sstream>

using namespace lamina;

namespace {

const std::string kCorpus = std::string(LAMINA_TEST_DATA) + "/gguf_bad";

TEST(GgufMalformed, CorpusGivesExpectedMessages) {
  std::ifstream list(kCorpus + "/expected.txt");
  ASSERT_TRUE(list) << "missing " << kCorpus << "/expected.txt";
  std::string line;
  int n = 0;
  while (std::getline(list, line)) {
    const size_t tab = line.find('\t');
    ASSERT_NE(tab, std::string::npos);
    const std::string file = kCorpus + "/" + line.substr(0, tab), want = line.substr(tab + 1);
    SCOPED_TRACE(file);
    try {
      GgufFile::open(file);
      ADD_FAILURE() << "accepted a malformed file";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(want), std::string::npos) << "message: " << msg << "\nwant: " << want;
      EXPECT_NE(msg.find(file), std::string::npos) << "message does not name the file: " << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << "message spans lines: " << msg;
    }
    ++n;
  }
  EXPECT_GE(n, 30);
}

// Well-formed files with hyper-parameters no model can run (NaN, zero, negative, inconsistent):
// the reader accepts them, the model configuration refuses each with a message naming the key.
TEST(GgufMalformed, OutOfRangeConfigurationsAreRefused) {
  std::ifstream list(kCorpus + "/expected_config.txt");
  ASSERT_TRUE(list) << "missing " << kCorpus << "/expected_config.txt";
  std::string line;
  int n = 0;
  while (std::getline(list, line)) {
    const size_t tab = line.find('\t');
    ASSERT_NE(tab, std::string::npos);
    const std::string file = kCorpus + "/" + line.substr(0, tab), want = line.substr(tab + 1);
    SCOPED_TRACE(file);
    const GgufFile f = GgufFile::open(file);
    try {
      ModelConfig::from_gguf(f);
      ADD_FAILURE() << "accepted an out-of-range configuration";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(want), std::string::npos) << "message: " << msg << "\nwant: " << want;
      EXPECT_NE(msg.find(file), std::string::npos) << "message does not name the file: " << msg;
    }
    ++n;
  }
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
