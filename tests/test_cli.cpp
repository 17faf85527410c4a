// The lamina CLI: usage errors and bad files give one line on stderr and exit status 1.
#include "cli_runner.h"

#include "format/gguf.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include <unistd.h>

namespace {

using lamina::testing_cli::lines;
using lamina::testing_cli::Result;
using lamina::testing_cli::run;

const std::string kVocab = std::string(LAMINA_SHARED_DIR) + "/data/vocab/ggml-vocab-llama-spm.gguf";
const std::string kBad = std::string(LAMINA_TEST_DATA) + "/gguf_bad";

TEST(Cli, VersionAndHelp) {
  auto r = run("--version");
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("lamina"), std::string::npos);
  r = run("--help");
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("tokenize"), std::string::npos);
}

TEST(Cli, UsageErrorsAreOneLineExit1) {
  for (const char* args : {"", "nosuchcommand", "tokenize", "tokenize -m", "info --bogus",
                           "tokenize -m x.gguf -p a -f b", "detokenize -m x.gguf", "tune -m x.gguf --gemv-max-rows 9",
                           "tune -m x.gguf --gemv-max-rows 0", "bench -m x.gguf --pg 4294967304,2",
                           "bench -m x.gguf --pg 8,2junk", "bench -m x.gguf --pg '8, 2'", "bench -m x.gguf --pg 8,2,3",
                           "logits -m x.gguf -p hi --all ''"}) {
    SCOPED_TRACE(args);
    const auto r = run(args);
    EXPECT_EQ(r.status, 1);
    EXPECT_EQ(lines(r.err), 1) << r.err;
  }
}

TEST(Cli, BadFilesAreOneLineExit1) {
  for (const std::string& args : {std::string("info -m /nonexistent.gguf"),
                                  "info -m " + kBad + "/overlap.gguf",
                                  "info -m " + kBad + "/huge_array.gguf",
                                  "tokenize -m " + kBad + "/empty.gguf -p hi",
                                  "tokenize -m " + kVocab + " -f /nonexistent.txt",
                                  "detokenize -m " + kVocab + " 5 99999999",
                                  "detokenize -m " + kVocab + " 5 abc"}) {
    SCOPED_TRACE(args);
    const auto r = run(args);
    EXPECT_EQ(r.status, 1);
    EXPECT_EQ(lines(r.err), 1) << r.err;
    EXPECT_EQ(r.err.rfind("lamina: ", 0), 0u) << r.err;
  }
}

// gen-model --vocab takes only a file whose tokenizer loads (else it wrote a model no command ran).
TEST(Cli, GenModelRefusesAVocabularyThatDoesNotLoad) {
  lamina::GgufWriter w;
  w.set_str("tokenizer.ggml.model", "no-such-tokenizer");
  w.set_str_array("tokenizer.ggml.tokens", {"a", "b"});
  const std::string vocab = ::testing::TempDir() + "/lamina_bad_vocab_" + std::to_string(getpid()) + ".gguf";
  const std::string out = vocab + ".out.gguf";
  w.write(vocab);
  const auto r = run("gen-model --preset tiny --type q8_0 --vocab " + vocab + " -o " + out);
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("not a usable vocabulary"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(out));
  std::filesystem::remove(vocab);
}

TEST(Cli, TokenizeDetokenize) {
  auto r = run("tokenize -m " + kVocab + " -p 'Hello world'");
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.out, "1 15043 3186\n");  // BOS, ▁Hello, ▁world (llama-spm vocab)
  r = run("tokenize -m " + kVocab + " --no-bos -p 'Hello world'");
  EXPECT_EQ(r.out, "15043 3186\n");
  r = run("tokenize -m " + kVocab + " --no-bos --pieces -p 'Hello'");
  EXPECT_EQ(r.out, "15043:' Hello'\n");
  r = run("detokenize -m " + kVocab + " 15043 3186");
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.out, "Hello world\n");  // the SPM prefix space is stripped from the first piece
  r = run("detokenize -m " + kVocab + " '1 15043 3186'");
  EXPECT_EQ(r.out, " Hello world\n");  // as llama.cpp: not stripped after a leading BOS
  r = run("info -m " + kVocab);
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("tokenizer:     llama, 32000 tokens"), std::string::npos) << r.out;
}

}  // namespace

// kbench cpu runs in every build: the read bandwidth, each type's in-cache row-dot rate, and a row
// per shape and token count with figures; a K that is not whole blocks of a type is said so; bad
// shapes, types and token counts are one line each.
TEST(Cli, KbenchCpu) {
  auto r = run("kbench cpu --shapes 64x64 --types q8_0,q4_K -t 1 -r 5 --tokens 1,4");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("read bandwidth"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| q8_0 row dot in cache |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| q8_0 | 64x64 | 1 |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| q8_0 | 64x64 | 4 |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| q4_K | 64x64 | | K is not a whole number of 256-element blocks"), std::string::npos) << r.out;
  // (a list naming nothing; a shape whose weights would not fit in memory, refused before allocating)
  for (const char* bad : {"--shapes 64y64", "--shapes 64x33", "--types iq2_xxs", "--tokens 0", "--tokens 2x", "--shapes ,",
                          "--types ,", "--shapes 1048576x1048576"}) {
    SCOPED_TRACE(bad);
    r = run(std::string("kbench cpu -r 5 ") + bad);
    EXPECT_EQ(r.status, 1);
    EXPECT_EQ(lines(r.err), 1) << r.err;
    EXPECT_NE(r.err.find("kbench cpu:"), std::string::npos) << r.err;
  }
}
